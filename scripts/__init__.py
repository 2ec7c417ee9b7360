"""Scripts that reproduce the paper's figures and tables; run each from the repository root as
``python -m scripts.NAME`` (``--help`` for its options)."""

from pathlib import Path


def out_file(prefix: Path, ext: str) -> Path:
    """A script's output file: its --out prefix with ``ext`` appended, in a folder that exists. Unlike
    Path.with_suffix, a prefix with a dot in its last part keeps it (``noise_b0.95`` -> ``noise_b0.95.csv``,
    not ``noise_b0.csv``), so two prefixes that differ after a dot never write the same files. A prefix
    that ends in an output's extension is taken without it (``--out x.png`` writes x.png and x.csv)."""
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    if prefix.suffix in (".png", ".csv", ".md", ".json", ".txt"):
        prefix = prefix.with_suffix("")
    return prefix.with_name(prefix.name + ext)
