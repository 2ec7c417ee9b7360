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

``--input`` reads local files through the same pipeline (data/text.py): parquet or jsonl (json
lines with a ``text`` field), or plain text (one document per file).
"""

from __future__ import annotations

import os
from pathlib import Path

import cli
from data.text import load_hub, load_local, random_split, write_splits


def prepare(dataset, out_dir: Path, tokenizer="tiktoken:gpt2", test_size: float = 0.0005, seed: int = 2357,
            num_proc: int = 1, overwrite: bool = False) -> dict[str, int]:
    """Split ``dataset`` (a ``text`` column, or a function that loads one) as nanoGPT does, tokenise and write
    it; return the token counts. Documents at hand are split (and checked) first; a function is called only
    once the tokenizer is checked and ``out_dir`` taken, so no download is spent on a command then refused."""
    if callable(dataset):
        load = lambda: random_split(dataset(), test_size, seed)  # noqa: E731
    else:
        splits = random_split(dataset, test_size, seed)
        load = lambda: splits  # noqa: E731
    return write_splits(load, out_dir, tokenizer, num_proc, overwrite, "data.openwebtext.prepare")


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=cli.file, nargs="+", help="local parquet/jsonl/text files instead of the Hub")
    parser.add_argument("--out", type=cli.place, default=Path(__file__).resolve().parent)
    parser.add_argument("--overwrite", action="store_true", help="replace the dataset already in --out")
    parser.add_argument("--tokenizer", type=cli.text(), default="tiktoken:gpt2",
                        help="tiktoken:NAME, a sentencepiece .model file, or a Hugging Face tokenizer folder")
    parser.add_argument("--num-proc", type=cli.integer(1, 1024), default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--test-size", type=cli.fraction, default=0.0005, help="validation fraction (nanoGPT's)")
    parser.add_argument("--seed", type=cli.seed, default=2357, help="split seed (nanoGPT's)")
    parser.add_argument("--hf-dataset", type=cli.text(), default="Skylion007/openwebtext")
    parser.add_argument("--hf-revision", type=cli.text(), default="refs/convert/parquet", help="the Hub's parquet conversion")
    args = parser.parse_args(argv)

    documents = [load_local(args.input)] if args.input else []

    def from_hub():
        documents.append(load_hub(args.hf_dataset, revision=args.hf_revision, split="train", num_proc=args.num_proc))
        return documents[0]

    counts = prepare(documents[0] if documents else from_hub, args.out, args.tokenizer, args.test_size, args.seed,
                     args.num_proc, args.overwrite)
    print(f"{len(documents[0]):,} documents -> train {counts['train']:,} tokens, val {counts['val']:,} tokens in "
          f"{args.out}")
    return counts


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
