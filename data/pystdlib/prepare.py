"""The embedded dataset: the Python standard library's own source, as byte-level tokens.

    python -m data.pystdlib.prepare

Every machine with Python has this text (about 13 MB of .py files in the standard library
folder, tests and site-packages left out), so the default training run needs no download.
Tokens are raw UTF-8 bytes (vocab 256). The split is by file and deterministic: files are
sorted by path, and every 20th file goes to validation (about 5%).

The same files as GPT-2 BPE tokens (vocab 50257, each file followed by end-of-text), for runs
that want GPT-2's vocabulary on the same text; needs tiktoken's GPT-2 files (the network, or
TIKTOKEN_CACHE_DIR pointing at a copy):

    python -m data.pystdlib.prepare --tokenizer tiktoken:gpt2 --out data/pystdlib_gpt2
    python train.py config/repro/cpu_adams.py --dataset=pystdlib_gpt2

A quarter of the training files (every 4th, in the same order) and the same validation files, for
runs that pass over their training text about 4x as often in the same number of steps (3.5x here:
files differ in size):

    python -m data.pystdlib.prepare --train-every 4 --out data/pystdlib_q4
"""

from __future__ import annotations

import os
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import cli
import folders
from errors import UserError
from tokens import TokenWriter

VOCAB_SIZE = 256
VAL_EVERY = 20
SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__", "lib2to3"}


def source_files(stdlib: Path) -> list[Path]:
    files = [p for p in stdlib.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(stdlib).parts[:-1])]
    return sorted(files, key=lambda p: p.relative_to(stdlib).as_posix())


def encoded(files: list[Path], encode, workers: int, chunk: int = 64):
    """encode(file's bytes) for each file, in order, ``workers`` threads at a time.

    tiktoken releases the GIL while it encodes, so threads speed up a large tree (all of a
    site-packages folder is hundreds of MB); ``chunk`` files per thread bound what is in memory."""
    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, len(files), chunk * workers):
            yield from pool.map(lambda path: encode(path.read_bytes()), files[start : start + chunk * workers])


def prepare(
    out_dir: Path, stdlib: Path | None = None, quiet: bool = False, tokenizer: str | None = None, workers: int | None = None,
    train_every: int = 1, overwrite: bool = False, wait: bool = False,
) -> dict[str, int]:
    """Write out_dir/train.bin and out_dir/val.bin (both, or neither: folders.dataset); return their token counts.
    A dataset already there is replaced only with ``overwrite``; ``wait``: for another command preparing it.

    tokenizer: None for bytes, else a data.text tokenizer spec such as "tiktoken:gpt2".
    train_every: keep only every train_every-th training file (the first, then every n-th after it);
    the validation files do not change.
    workers: threads that encode files (default: one per CPU); the output does not depend on it."""
    if train_every < 1:
        raise UserError(f"--train-every {train_every} keeps no training file; pass 1 (all of them) or more")
    stdlib = Path(stdlib or sysconfig.get_paths()["stdlib"])
    files = source_files(stdlib)
    if not files:
        raise UserError(f"found no .py files under {stdlib}; pass --stdlib PATH to a Python source tree")
    is_val = [i % VAL_EVERY == VAL_EVERY - 1 for i in range(len(files))]
    kept = [i for i in range(len(files)) if is_val[i] or (i - i // VAL_EVERY) % train_every == 0]
    files, is_val = [files[i] for i in kept], [is_val[i] for i in kept]
    if tokenizer is None:
        vocab, encode = VOCAB_SIZE, lambda raw: np.frombuffer(raw, dtype=np.uint8)
    else:
        from vocabulary import load_tokenizer

        tok = load_tokenizer(tokenizer)
        vocab, encode = tok.n_vocab, lambda raw: tok.encode(raw.decode("utf-8", errors="replace")) + [tok.eot]
    with folders.dataset(out_dir, ("train.bin", "val.bin"), overwrite, "data.pystdlib.prepare", wait) as staged, \
            TokenWriter(staged / "train.bin", vocab) as train, TokenWriter(staged / "val.bin", vocab) as val:
        tokens = encoded(files, encode, workers or os.cpu_count() or 1)
        for i, doc in enumerate(tokens if quiet else cli.progress(tokens, f"{tokenizer or 'byte'} tokens, files", len(files))):
            (val if is_val[i] else train).write(doc)
        counts = {"train": train.count, "val": val.count}
    if not quiet:
        share = f" (1 training file in {train_every})" if train_every > 1 else ""
        print(f"{len(files)} files from {stdlib}{share}: train {counts['train']:,} tokens, val {counts['val']:,} tokens -> {out_dir}")
    return counts


def main(argv=None) -> dict[str, int]:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=cli.place, default=Path(__file__).resolve().parent, help="output folder")
    parser.add_argument("--stdlib", type=cli.folder, help="folder to read instead of this Python's standard library")
    parser.add_argument("--tokenizer", type=cli.text(), help="bytes if left out; tiktoken:gpt2 for GPT-2's BPE (see data/text.py)")
    parser.add_argument("--train-every", type=cli.count, default=1, metavar="N",
                        help="keep every N-th training file only (validation unchanged), for runs that repeat their data more")
    parser.add_argument("--overwrite", action="store_true", help="replace the dataset already in --out")
    args = parser.parse_args(argv)
    return prepare(args.out, args.stdlib, tokenizer=args.tokenizer, train_every=args.train_every, overwrite=args.overwrite)


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
