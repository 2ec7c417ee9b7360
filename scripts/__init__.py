"""Scripts that reproduce the paper's figures and tables; run each from the repository root as
``python -m scripts.NAME`` (``--help`` for its options)."""
