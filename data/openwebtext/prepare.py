"""OpenWebText as GPT-2 BPE tokens, in this project's token-file format.

    python -m data.openwebtext.prepare                          # download (~55 GB in the HF cache), tokenise
    python -m data.openwebtext.prepare --input docs/*.parquet   # your own files, offline

Writes ``train.bin`` and ``val.bin`` next to this script (about 9B and 4M tokens for OpenWebText),
each document followed by GPT-2's end-of-text token.

The split is nanoGPT's (``train_test_split(test_size=0.0005, seed=2357)``), so validation numbers
are comparable with nanoGPT's. Recent ``datasets`` releases refuse script-based datasets, and the
Hub's ``Skylion007/openwebtext`` still ships one; this script loads the Hub's parquet conversion
of it instead (``--hf-revision refs/convert/parquet``). That download path needs the network and
was not exercised where this was written; ``--input`` was, by the tests.

``--input`` reads local files through the same pipeline: parquet or jsonl (json lines with a
``text`` field), or plain text (one document per file). Both outputs are written to a temporary
folder and moved into place only when both are complete, so an interrupted run leaves no
complete-looking output.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import numpy as np

from tokens import TokenWriter

_ENCODINGS: dict = {}


def get_encoding(encoding):
    """A tiktoken encoding by name (cached per worker process), or the object itself."""
    if not isinstance(encoding, str):
        return encoding
    if encoding not in _ENCODINGS:
        import tiktoken

        _ENCODINGS[encoding] = tiktoken.get_encoding(encoding)
    return _ENCODINGS[encoding]


def load_local(paths: list[Path]):
    """One ``datasets.Dataset`` with a ``text`` column from parquet, jsonl and plain-text files."""
    from datasets import Dataset, concatenate_datasets

    parts = []
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"--input {path}: no such file")
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            part = Dataset.from_parquet(str(path))
        elif suffix in (".jsonl", ".json"):
            part = Dataset.from_json(str(path))
        else:
            part = Dataset.from_dict({"text": [path.read_text(encoding="utf-8", errors="replace")]})
        if "text" not in part.column_names:
            raise SystemExit(f"--input {path}: no 'text' field (found {part.column_names})")
        parts.append(part.select_columns(["text"]))
    return concatenate_datasets(parts)


def tokenize(dataset, encoding, num_proc: int):
    def encode(example):
        enc = get_encoding(encoding)
        ids = enc.encode_ordinary(example["text"])
        ids.append(enc.eot_token)  # documents are separated by end-of-text
        return {"ids": ids, "len": len(ids)}

    return dataset.map(encode, remove_columns=dataset.column_names, num_proc=num_proc if num_proc > 1 else None,
                       desc="tokenizing")


def write_split(dataset, path: Path, vocab_size: int, shards: int = 64) -> int:
    from tqdm import tqdm

    with TokenWriter(path, vocab_size) as writer:
        shards = max(1, min(shards, len(dataset)))
        for i in tqdm(range(shards), desc=f"writing {path.name}"):
            shard = dataset.shard(num_shards=shards, index=i, contiguous=True).with_format("numpy")
            if len(shard):
                writer.write(np.concatenate(list(shard["ids"])))
        return writer.count


def prepare(dataset, out_dir: Path, encoding="gpt2", test_size: float = 0.0005, seed: int = 2357,
            num_proc: int = 1) -> dict[str, int]:
    """Split, tokenise and write ``dataset`` (a ``text`` column); return the token counts."""
    split = dataset.train_test_split(test_size=test_size, seed=seed, shuffle=True)
    split["val"] = split.pop("test")  # nanoGPT's name for it
    vocab_size = get_encoding(encoding).n_vocab
    tmp = out_dir / ".prepare.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    counts = {}
    for name in ("val", "train"):
        counts[name] = write_split(tokenize(split[name], encoding, num_proc), tmp / f"{name}.bin", vocab_size)
    for name in ("val", "train"):  # both complete: move them into place
        os.replace(tmp / f"{name}.bin", out_dir / f"{name}.bin")
    shutil.rmtree(tmp)
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, nargs="+", help="local parquet/jsonl/text files instead of the Hub")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--encoding", default="gpt2", help="tiktoken encoding")
    parser.add_argument("--num-proc", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--test-size", type=float, default=0.0005, help="validation fraction (nanoGPT's)")
    parser.add_argument("--seed", type=int, default=2357, help="split seed (nanoGPT's)")
    parser.add_argument("--hf-dataset", default="Skylion007/openwebtext")
    parser.add_argument("--hf-revision", default="refs/convert/parquet", help="the Hub's parquet conversion")
    args = parser.parse_args(argv)

    if args.input:
        dataset = load_local(args.input)
    else:
        from datasets import load_dataset

        dataset = load_dataset(args.hf_dataset, revision=args.hf_revision, split="train", num_proc=args.num_proc)
    counts = prepare(dataset, args.out, args.encoding, args.test_size, args.seed, args.num_proc)
    print(f"{len(dataset):,} documents -> train {counts['train']:,} tokens, val {counts['val']:,} tokens in {args.out}")
    return counts


if __name__ == "__main__":
    main()
