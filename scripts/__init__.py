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


def write_json(path: Path, data) -> Path:
    """A benchmark's --json file, through folders.write_output (locked, checked, written whole)."""
    import json

    import folders

    return folders.write_output(path, json.dumps(data, indent=2).encode())


def read_csv(path: Path, columns=(), what: str = "a table this project wrote") -> list[dict]:
    """The rows of a CSV table as dicts, or one UserError naming the file: missing, not text, or without
    the ``columns`` its reader needs (then it is not ``what``)."""
    import csv

    from errors import UserError

    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows, header = list(reader), reader.fieldnames or []
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise UserError(f"{path} is not a file; give the path of {what}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise UserError(f"{path} is not a CSV table ({type(e).__name__}); give the path of {what}") from None
    missing = [c for c in columns if c not in header]
    if missing:
        raise UserError(f"{path} has no {', '.join(missing)} column{'s' * (len(missing) > 1)}: it is not {what}")
    return rows


def csv_bytes(rows, fieldnames=None) -> bytes:
    """A table as CSV: dicts (header from ``fieldnames``, else the first row's keys), or plain lists."""
    import csv
    import io

    rows = list(rows)
    buffer = io.StringIO(newline="")
    if fieldnames is not None or (rows and isinstance(rows[0], dict)):
        writer = csv.DictWriter(buffer, fieldnames=list(fieldnames or rows[0]))
        writer.writeheader()
    else:
        writer = csv.writer(buffer)
    writer.writerows(rows)
    return buffer.getvalue().encode()


def figure_bytes(fig, format: str = "png", **kwargs) -> bytes:
    """A matplotlib figure rendered in memory (then closed), for a write that is all or nothing."""
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format=format, **kwargs)
    plt.close(fig)
    return buffer.getvalue()


def write_csv(path: Path, rows, fieldnames=None) -> Path:
    """A table through folders.write_output (locked, checked, written whole)."""
    import folders

    return folders.write_output(path, csv_bytes(rows, fieldnames))


def write_text(path: Path, text: str) -> Path:
    """A text output (a markdown table) through folders.write_output."""
    import folders

    return folders.write_output(path, text.encode())


def save_figure(fig, path: Path, **kwargs) -> Path:
    """A figure through folders.write_output, in the format its suffix names (png by default)."""
    import folders

    path = Path(path)
    return folders.write_output(path, figure_bytes(fig, path.suffix.lstrip(".") or "png", **kwargs))
