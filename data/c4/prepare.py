"""C4 English, the data of the AdamS paper's Llama 2 runs, as token files (or local files like it).

    python -m data.c4.prepare --tokenizer path/to/llama2/tokenizer.model --shards 8   # 8 of the 1,024 Hub shards
    python -m data.c4.prepare --input c4-train.*.json.gz --val-input c4-validation.00000-of-00008.json.gz
    python -m data.c4.prepare --input my_docs/*.jsonl                                   # GPT-2 BPE, offline

The tokenizer is given by path: Llama 2's sentencepiece ``tokenizer.model`` (gated: get it from
Meta or the Hub with your own access), any Hugging Face tokenizer folder, or ``tiktoken:NAME``;
the default is GPT-2's BPE (``tiktoken:gpt2``), which needs no access. Each document is followed
by the tokenizer's end-of-sequence token.

From the Hub (``allenai/c4``, its ``en`` files: 1,024 training shards and 8 validation shards),
``--shards N`` takes the first N training shards and ``--val-shards`` the first validation ones.
The paper's 8K steps of 4,194,304 tokens read 33.5B tokens (the paper rounds it to "over 32B"): raise ``--shards`` until the printed count of
training tokens reaches what your run reads (or let it repeat data, knowingly). The Hub path needs the network and was not exercised where this was written;
``--input`` was, by the tests. With ``--input`` and no ``--val-input``, a random ``--test-size``
fraction becomes the validation split, as for OpenWebText.
"""

from __future__ import annotations

import os
from pathlib import Path

import cli
from data.text import load_hub, load_local, random_split, write_splits
from errors import UserError

HUB = "allenai/c4"


def hub_files(shards: int, val_shards: int) -> dict[str, list[str]]:
    """The Hub's file names of the first ``shards`` training and ``val_shards`` validation shards."""
    if not 1 <= shards <= 1024 or not 1 <= val_shards <= 8:
        raise UserError(f"--shards must be in 1..1024 and --val-shards in 1..8, got {shards} and {val_shards}")
    return {"train": [f"en/c4-train.{i:05d}-of-01024.json.gz" for i in range(shards)],
            "validation": [f"en/c4-validation.{i:05d}-of-00008.json.gz" for i in range(val_shards)]}


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=cli.text(), default="tiktoken:gpt2",
                        help="a sentencepiece .model file, a Hugging Face tokenizer folder, or tiktoken:NAME")
    parser.add_argument("--input", type=cli.file, nargs="+", help="local jsonl(.gz)/parquet/text files instead of the Hub")
    parser.add_argument("--val-input", type=cli.file, nargs="+", help="local validation files (else a random split)")
    parser.add_argument("--test-size", type=cli.fraction, default=0.0005, help="validation fraction when split at random")
    parser.add_argument("--seed", type=cli.seed, default=2357)
    parser.add_argument("--shards", type=cli.integer(1, 1024), default=8, help="Hub training shards to download (of 1,024)")
    parser.add_argument("--val-shards", type=cli.integer(1, 8), default=1, help="Hub validation shards (of 8)")
    parser.add_argument("--out", type=cli.place, default=Path(__file__).resolve().parent)
    parser.add_argument("--overwrite", action="store_true", help="replace the dataset already in --out")
    parser.add_argument("--num-proc", type=cli.integer(1, 1024), default=max(1, (os.cpu_count() or 2) // 2))
    args = parser.parse_args(argv)

    def load():
        if args.input:
            train = load_local(args.input)
            return {"train": train, "val": load_local(args.val_input)} if args.val_input else \
                random_split(train, args.test_size, args.seed)
        loaded = load_hub(HUB, data_files=hub_files(args.shards, args.val_shards), num_proc=args.num_proc)
        return {"train": loaded["train"].select_columns(["text"]), "val": loaded["validation"].select_columns(["text"])}

    # local files are read (and checked) first; the Hub only once the tokenizer is checked and --out taken, so
    # no download is spent on a command that would then be refused
    local = load() if args.input else None
    counts = write_splits(lambda: local or load(), args.out, args.tokenizer, args.num_proc, args.overwrite,
                          "data.c4.prepare")
    print(f"train {counts['train']:,} tokens, val {counts['val']:,} tokens in {args.out}")
    return counts


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
