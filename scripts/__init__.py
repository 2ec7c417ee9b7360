"""Scripts that reproduce the paper's figures and tables and measure the product; run each from the
repository root as ``python -m scripts.NAME`` (``--help`` for its options)."""

from pathlib import Path


def out_file(prefix: Path, ext: str) -> Path:
    """A script's output file: its --out prefix with ``ext`` appended, in a folder that exists. Unlike
    Path.with_suffix, a prefix with a dot in its last part keeps it (``noise_b0.95`` -> ``noise_b0.95.csv``,
    not ``noise_b0.csv``), so two prefixes that differ after a dot never write the same files. A prefix
    that ends in an output's extension is taken without it (``--out x.png`` writes x.png and x.csv).
    A file there that a figure or table may not replace (one inside a run, an export, a dataset or a
    scan, or an archive) is refused (folders.check_output)."""
    import folders

    prefix = Path(prefix)
    if prefix.suffix in (".png", ".csv", ".md", ".json", ".txt"):
        prefix = prefix.with_suffix("")
    path = prefix.with_name(prefix.name + ext)
    folders.check_output(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_json(path: Path, data) -> None:
    """A benchmark's --json file, written whole (beside, then renamed) and only where an output may go."""
    import json

    import folders

    path = Path(path)
    folders.check_output(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folders.write_atomic(path, json.dumps(data, indent=2).encode())
