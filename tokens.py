"""Token files: one format for every dataset.

Layout (little-endian): a 32-byte header, then the tokens.

    magic    8 bytes  b"ADAMSTOK"
    version  uint32   1
    itemsize uint32   2 (uint16 tokens) or 4 (uint32, when the vocabulary needs it)
    vocab    uint32   vocabulary size; every token is < vocab
    (pad)    4 bytes
    count    uint64   number of tokens

Writers write to a temporary file of their own (``NAME.<random>.tmp``) and rename it when
complete, so an interrupted write never leaves a complete-looking file, and processes preparing
the same dataset at once (the ranks of a run, the runs of a sweep) never write into each
other's file. The reader checks the header against the file's size, so a truncated or
foreign file is a clear error naming the file, never silent garbage.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import numpy as np

import cli
import contents
import folders
from errors import UserError

MAGIC = b"ADAMSTOK"
VERSION = 1
HEADER = struct.Struct("<8sIII4xQ")
assert HEADER.size == 32


def dtype_for(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


class TokenWriter:
    """Append token arrays to a token file; it appears under its name only when closed cleanly.

        with TokenWriter("data/x/train.bin", vocab_size=256) as w:
            w.write(np.frombuffer(b"hello", dtype=np.uint8))
    """

    def __init__(self, path: str | os.PathLike, vocab_size: int):
        self.path = Path(path)
        self.vocab_size = vocab_size
        self.dtype = dtype_for(vocab_size)
        self.count = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f"{self.path.name}.", suffix=".tmp")
        self.tmp = Path(tmp)
        self.file = os.fdopen(fd, "wb")
        self.file.write(b"\0" * HEADER.size)  # the real header is written on close

    def write(self, tokens) -> None:
        tokens = np.asarray(tokens)
        if tokens.size and int(tokens.max()) >= self.vocab_size:
            raise ValueError(f"token id {int(tokens.max())} is >= vocab_size {self.vocab_size} in {self.path}")
        try:
            self.file.write(tokens.astype(self.dtype, copy=False).tobytes())
        except OSError as e:  # a full disk, a file-size limit: a write's error names no file, so name this one
            raise OSError(e.errno, e.strerror, str(self.path)) from None
        self.count += tokens.size

    def close(self) -> None:
        self.file.seek(0)
        self.file.write(HEADER.pack(MAGIC, VERSION, self.dtype.itemsize, self.vocab_size, self.count))
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.chmod(self.tmp, 0o666 & ~folders.umask())  # mkstemp made it private to us; a token file is the user's, as any they write
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        self.abort() if exc_type else self.close()


def write_tokens(path, tokens, vocab_size: int) -> None:
    with TokenWriter(path, vocab_size) as w:
        w.write(tokens)


def read_header(path: Path) -> tuple[int, int, int]:
    """(itemsize, vocab_size, count) of a token file, after checking it is whole and ours."""
    if not path.is_file():
        if path.exists():
            raise UserError(f"token file {path} is {'a folder' if path.is_dir() else 'not a regular file'}; the dataset "
                            "folder needs train.bin and val.bin as files (the dataset's prepare.py writes them)")
        raise UserError(f"token file {path} does not exist; run the dataset's prepare.py first")
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(HEADER.size)
    if len(raw) < HEADER.size or raw[:8] != MAGIC:
        raise UserError(f"{path} is not a token file (bad magic); regenerate it with the dataset's prepare.py, or, if it "
                        f"is nanoGPT's headerless uint16 file, convert it: python -m tokens from-nanogpt {path.parent} OUT_DIR")
    _, version, itemsize, vocab, count = HEADER.unpack(raw)
    if version != VERSION:
        raise UserError(f"{path} has token-file version {version}, this code reads {VERSION}; regenerate it")
    if itemsize not in (2, 4) or np.dtype(f"<u{itemsize}") != dtype_for(vocab).newbyteorder("<"):
        raise UserError(f"{path} stores {itemsize}-byte tokens, wrong for vocab size {vocab}; regenerate it")
    if size != HEADER.size + count * itemsize:
        raise UserError(f"{path} is {size} bytes but its header promises {count} tokens "
                        f"({HEADER.size + count * itemsize} bytes): it is truncated or corrupt; regenerate it")
    return itemsize, vocab, count


def read_tokens(path: str | os.PathLike) -> tuple[np.memmap, int]:
    """The tokens of a file (memory-mapped, read-only) and its vocabulary size."""
    path = Path(path)
    itemsize, vocab, count = read_header(path)
    tokens = np.memmap(path, dtype=f"<u{itemsize}", mode="r", offset=HEADER.size, shape=(count,))
    return tokens, vocab


def from_nanogpt(src: Path, dst: Path, vocab_size: int = 50257, chunk: int = 1 << 24, dtype: str = "uint16") -> int:
    """Convert a nanoGPT token file (headerless ids, uint16 unless said otherwise; GPT-2's 50,257-token vocabulary
    unless said otherwise) into this format; returns the token count. The file is read in chunks, never whole."""
    if not src.is_file():
        raise UserError(f"{src} does not exist; give a nanoGPT train.bin or val.bin, or the folder holding them")
    size = 2 if dtype == "uint16" else 4
    if src.stat().st_size == 0:
        raise UserError(f"{src} is empty: it holds no tokens; give a nanoGPT train.bin or val.bin")
    if src.stat().st_size % size:
        raise UserError(f"{src} is not a whole number of {dtype} tokens ({src.stat().st_size} bytes)")
    raw = np.memmap(src, dtype=f"<u{size}", mode="r")
    head = np.asarray(raw[: 1 << 16])
    if size == 2 and len(raw) % 2 == 0 and head.size >= 1024 and not head[1::2].any() and head[0::2].any():
        raise UserError(f"{src} looks like uint32 tokens, not nanoGPT's uint16 (every second 16-bit word of its start is "
                        "0, as uint32 ids below 65,536 leave them); pass --dtype uint32")
    with TokenWriter(dst, vocab_size) as writer:
        for start in range(0, len(raw), chunk):
            part = np.asarray(raw[start:start + chunk])
            if part.size and int(part.max()) >= vocab_size:
                raise UserError(f"{src} holds token id {int(part.max())}, outside a vocabulary of {vocab_size}; "
                                "pass its vocabulary with --vocab-size (nanoGPT's meta.pkl has it)")
            writer.write(part)
        return writer.count


def convert(src: Path, dst: Path, vocab_size: int, overwrite: bool = False, dtype: str = "uint16") -> None:
    """nanoGPT's file ``src``, or the train.bin and val.bin of the folder ``src``, into ``dst``; every input
    is checked before anything is written, and ``dst`` gets all of the new files or none (folders.py). A
    token file or dataset already at ``dst`` is replaced only with ``overwrite``."""
    import folders

    names = ("train.bin", "val.bin")
    pairs = [(src / n, n) for n in names] if src.is_dir() else [(src, None)]
    for a, _ in pairs:
        if not a.is_file():
            raise UserError(f"{a} does not exist; give a nanoGPT train.bin or val.bin, or the folder holding them")
        if a.resolve() in ((dst / a.name).resolve(), dst.resolve()):
            raise UserError(f"{dst} is where {a} is; write the converted file elsewhere")
    if src.is_dir():
        with folders.dataset(dst, names, overwrite, command="python -m tokens from-nanogpt") as staged:
            for a, name in pairs:
                print(f"{a} -> {dst / name}: {from_nanogpt(a, staged / name, vocab_size, dtype=dtype):,} tokens")
        return
    with folders.Destination(dst, makes=contents.FILE, option="DST", command="python -m tokens from-nanogpt") as dest:
        dest.allow(overwrite=overwrite)
        staged = dest.stage(folder=False)
        count = from_nanogpt(src, staged, vocab_size, dtype=dtype)
        dest.swap(staged)
        print(f"{src} -> {dst}: {count:,} tokens")


def main(argv=None):

    parser = cli.Parser(prog="python -m tokens", description="Token files: convert nanoGPT's into ours.")
    convert_cmd = parser.add_subparsers(dest="command", required=True).add_parser(
        "from-nanogpt", help="nanoGPT's headerless train.bin / val.bin -> this format",
        description="Convert nanoGPT's token files (headerless uint16) into this project's format. SRC is a file, "
                    "or a folder whose train.bin and val.bin are converted into DST.")
    convert_cmd.add_argument("src", type=cli.existing, help="a nanoGPT .bin file, or a folder with train.bin and val.bin")
    convert_cmd.add_argument("dst", type=cli.place, help="the file to write, or (for a folder) the dataset folder to write")
    convert_cmd.add_argument("--vocab_size", type=cli.integer(1, 1 << 32), default=50257, help="the ids' vocabulary (GPT-2's)")
    convert_cmd.add_argument("--dtype", type=cli.choice("uint16", "uint32"), default="uint16",
                             help="the ids' width on disk (nanoGPT writes uint16; uint32 for vocabularies past 65,535)")
    convert_cmd.add_argument("--overwrite", action="store_true", help="replace the token file or dataset already at DST")
    args = parser.parse_args(argv)
    convert(args.src, args.dst, args.vocab_size, args.overwrite, args.dtype)


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
