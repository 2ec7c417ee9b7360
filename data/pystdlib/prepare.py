"""The embedded dataset: the Python standard library's own source, as byte-level tokens.

    python -m data.pystdlib.prepare

Every machine with Python has this text (about 13 MB of .py files in the standard library
folder, tests and site-packages left out), so the default training run needs no download.
Tokens are raw UTF-8 bytes (vocab 256). The split is by file and deterministic: files are
sorted by path, and every 20th file goes to validation (about 5%).
"""

from __future__ import annotations

import argparse
import sysconfig
from pathlib import Path

import numpy as np

from tokens import TokenWriter

VOCAB_SIZE = 256
VAL_EVERY = 20
SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__", "lib2to3"}


def source_files(stdlib: Path) -> list[Path]:
    files = [p for p in stdlib.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(stdlib).parts[:-1])]
    return sorted(files, key=lambda p: p.relative_to(stdlib).as_posix())


def prepare(out_dir: Path, stdlib: Path | None = None, quiet: bool = False) -> dict[str, int]:
    """Write out_dir/train.bin and out_dir/val.bin; return their token counts."""
    stdlib = Path(stdlib or sysconfig.get_paths()["stdlib"])
    files = source_files(stdlib)
    if not files:
        raise SystemExit(f"found no .py files under {stdlib}; pass --stdlib PATH to a Python source tree")
    counts = {}
    with TokenWriter(out_dir / "train.bin", VOCAB_SIZE) as train, TokenWriter(out_dir / "val.bin", VOCAB_SIZE) as val:
        for i, path in enumerate(files):
            data = np.frombuffer(path.read_bytes(), dtype=np.uint8)
            (val if i % VAL_EVERY == VAL_EVERY - 1 else train).write(data)
        counts = {"train": train.count, "val": val.count}
    if not quiet:
        print(f"{len(files)} files from {stdlib}: train {counts['train']:,} tokens, val {counts['val']:,} tokens -> {out_dir}")
    return counts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="output folder")
    parser.add_argument("--stdlib", type=Path, help="folder to read instead of this Python's standard library")
    args = parser.parse_args()
    prepare(args.out, args.stdlib)
