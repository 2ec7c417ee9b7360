"""Text documents to token files: what every dataset's prepare module shares.

The tokenizer is named by a string (vocabulary.load_tokenizer), so that worker processes can load it themselves.

Each document becomes its tokens followed by the tokenizer's end-of-text (end-of-sequence) token.
Both splits are written beside the output folder and moved into place only when both are complete
(folders.dataset), so an interrupted run leaves no complete-looking output, and a dataset already
there is replaced only with --overwrite.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

import cli
import folders
from errors import UserError
from tokens import TokenWriter
from vocabulary import load_tokenizer


def load_local(paths: list[Path]):
    """One ``datasets.Dataset`` with a ``text`` column from parquet, jsonl (optionally .gz) and
    plain-text files (one document per file)."""
    from datasets import Dataset, concatenate_datasets

    parts = []
    for path in paths:
        if not path.is_file():
            raise UserError(f"--input {path}: no such file")
        suffixes = [s.lower() for s in path.suffixes]
        if suffixes[-1:] == [".parquet"]:
            try:
                part = Dataset.from_parquet(str(path))
            except Exception as e:  # pyarrow's errors, whatever their class
                raise UserError(f"--input {path} is not a readable parquet file ({type(e).__name__}); give parquet, "
                                "jsonl or plain-text files") from None
        elif ".jsonl" in suffixes or ".json" in suffixes:
            if path.stat().st_size == 0:
                raise UserError(f"--input {path} is empty; give files that hold documents")
            try:
                part = Dataset.from_json(str(path))
            except Exception as e:  # datasets' parse error, whatever its class
                raise UserError(f"--input {path} is not JSON lines with a 'text' field ({type(e).__name__}); "
                                 "give one JSON object a line, or parquet or plain-text files") from None
        else:
            part = Dataset.from_dict({"text": [path.read_text(encoding="utf-8", errors="replace")]})
        if "text" not in part.column_names:
            raise UserError(f"--input {path}: no 'text' field (found {part.column_names})")
        parts.append(part.select_columns(["text"]))
    return concatenate_datasets(parts)


def load_hub(name: str, **kwargs):
    """``datasets.load_dataset(name, **kwargs)``, or one line saying why it cannot be had (no network, say)."""
    from datasets import load_dataset

    try:
        return load_dataset(name, **kwargs)
    except Exception as e:  # the hub's and the network's errors, whatever their class
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise UserError(f"{name} cannot be loaded from the Hugging Face Hub ({type(e).__name__}: {first}); check the "
                        "network (HF_HUB_OFFLINE unset), or give local files with --input") from None


def tokenize(dataset, tokenizer, num_proc: int):
    def encode(example):
        tok = load_tokenizer(tokenizer)
        ids = list(tok.encode(example["text"]))
        ids.append(tok.eot)  # documents are separated by end-of-text
        return {"ids": ids, "len": len(ids)}

    return dataset.map(encode, remove_columns=dataset.column_names, num_proc=num_proc if num_proc > 1 else None,
                       desc="tokenizing")


def write_split(dataset, path: Path, vocab_size: int, shards: int = 64) -> int:
    with TokenWriter(path, vocab_size) as writer:
        shards = max(1, min(shards, len(dataset)))
        for i in cli.progress(range(shards), f"writing {path.name}, shards"):
            shard = dataset.shard(num_shards=shards, index=i, contiguous=True).with_format("numpy")
            if len(shard):
                writer.write(np.concatenate(list(shard["ids"])))
        return writer.count


def write_splits(load: Callable[[], dict], out_dir: Path, tokenizer, num_proc: int = 1, overwrite: bool = False,
                 command: str | None = None) -> dict[str, int]:
    """Tokenise the splits ``load()`` gives ({'train': dataset, 'val': dataset}) and write them into ``out_dir``
    (both files, or neither: folders.dataset; a dataset already there is replaced only with ``overwrite``);
    return the token counts. The tokenizer is checked and the folder taken before ``load`` runs, so a download
    is never spent on a command that would then be refused."""
    vocab_size = load_tokenizer(tokenizer).n_vocab
    counts = {}
    with folders.dataset(out_dir, ("train.bin", "val.bin"), overwrite, command) as staged:
        splits = load()
        for name in ("val", "train"):
            counts[name] = write_split(tokenize(splits[name], tokenizer, num_proc), staged / f"{name}.bin", vocab_size)
    return counts


def random_split(dataset, test_size: float, seed: int) -> dict:
    """{'train', 'val'} by datasets' own train_test_split (nanoGPT's, with its seed 2357)."""
    if len(dataset) < 2:
        raise UserError(f"{len(dataset)} document(s) cannot be split into training and validation; give more")
    split = dataset.train_test_split(test_size=test_size, seed=seed, shuffle=True)
    return {"train": split["train"], "val": split["test"]}
