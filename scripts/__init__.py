"""Scripts that reproduce the paper's figures and tables; run each from the repository root as
``python -m scripts.NAME`` (``--help`` for its options)."""

from pathlib import Path


def out_file(prefix: Path, ext: str) -> Path:
    """A script's output file: its --out prefix with ``ext`` appended. Unlike Path.with_suffix, a
    prefix with a dot in its last part keeps it (``noise_b0.95`` -> ``noise_b0.95.csv``, not
    ``noise_b0.csv``), so two prefixes that differ after a dot never write the same files."""
    return prefix.with_name(prefix.name + ext)
