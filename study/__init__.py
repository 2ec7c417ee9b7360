"""The closed study of AdamS's learning rate: its instruments, analysis and report (study/README.md).

Nothing in the product imports this package: deleting study/ breaks no product command and no product test.
Run each instrument as ``python -m study.<name>`` (``--help`` for its options).
"""
