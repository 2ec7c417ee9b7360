"""Datasets: one folder each, with a ``prepare`` module that writes train.bin and val.bin there
(``python -m data.NAME.prepare`` from the repository root)."""
