"""A run's data: the token files of one dataset, and how every batch is drawn from them.

Every batch is a set of random windows drawn from a generator seeded by (seed, stream,
iteration, micro-batch index) alone, so an iteration's tokens do not depend on how its
micro-batches are split across ranks, a resumed run sees the batches the uninterrupted run
would have seen, and a script can draw exactly the batch a run drew.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from errors import UserError
from tokens import read_tokens

REPO = Path(__file__).resolve().parent
TRAIN, EVAL_VAL, EVAL_TRAIN = 0, 1, 2  # independent random streams: training batches, the two evaluations


def load(data_dir: str, dataset: str, block_size: int) -> dict:
    """The train and val tokens of ``data_dir/dataset`` (memory-mapped) and their vocabulary size.

    The embedded dataset ('pystdlib') is built on first use.
    """
    folder = Path(data_dir)
    folder = (folder if folder.is_absolute() else REPO / folder) / dataset
    if dataset == "pystdlib" and not (folder / "train.bin").exists():
        from data.pystdlib.prepare import prepare

        print(f"preparing the embedded dataset in {folder} (once)...")
        try:
            prepare(folder, wait=True)  # (the runs of a sweep may all start here at once: one prepares it)
        except UserError:
            if not (folder / "train.bin").exists():
                raise
    if not folder.is_dir():
        if (REPO / "data" / dataset / "prepare.py").exists():
            raise UserError(f"dataset folder {folder} does not exist; run python -m data.{dataset}.prepare first")
        raise UserError(f"dataset folder {folder} does not exist and no data/{dataset}/prepare.py makes it; write "
                        f"train.bin and val.bin there with a data/*/prepare.py and --out, e.g. "
                        f"python -m data.pystdlib.prepare --tokenizer tiktoken:gpt2 --out {folder}")
    data, vocabs = {}, set()
    for split in ("train", "val"):
        data[split], vocab = read_tokens(folder / f"{split}.bin")
        vocabs.add(vocab)
        if len(data[split]) <= block_size + 1:
            raise UserError(f"{folder / f'{split}.bin'} has {len(data[split])} tokens, too few for block_size="
                            f"{block_size}; lower block_size or prepare more data")
    if len(vocabs) != 1:
        raise UserError(f"train.bin and val.bin in {folder} have different vocabularies {sorted(vocabs)}; "
                        "regenerate them")
    data["vocab_size"] = vocabs.pop()
    data["fingerprint"] = {split: fingerprint(folder / f"{split}.bin") for split in ("train", "val")}
    return data


SAMPLES, SAMPLE_BYTES = 16, 1 << 16


def fingerprint(path: Path) -> dict:
    """A token file's size and a SHA-256 of 16 evenly spaced 64 KiB pieces of it (the whole file when that is
    smaller): at most 1 MiB read, however large the file, and a re-prepared or converted file differs."""
    import hashlib

    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= SAMPLES * SAMPLE_BYTES:
            digest.update(f.read())
        else:
            for k in range(SAMPLES):
                f.seek((size - SAMPLE_BYTES) * k // (SAMPLES - 1))
                digest.update(f.read(SAMPLE_BYTES))
    return dict(bytes=size, sha256_sampled=digest.hexdigest())


def check_unchanged(saved: dict | None, now: dict, folder: str, allow: bool) -> str | None:
    """Refuse to resume a run on token files other than those it began on (``saved``, from its checkpoint),
    unless ``allow``; then return the line that says so. Runs from before fingerprints pass."""
    changed = [split for split in now if saved and split in saved and saved[split] != now[split]]
    if not changed:
        return None
    what = " and ".join(f"{split}.bin (" + (f"{saved[split]['bytes']:,} bytes then, {now[split]['bytes']:,} now)"
                                             if saved[split]["bytes"] != now[split]["bytes"] else "same size, other content)")
                        for split in changed)
    if not allow:
        raise UserError(f"the run was trained on other data: {what} in {folder} changed since it began, so it would "
                        "not continue as it started. Restore the data, start a new run, or pass --allow_new_data=True")
    return f"resuming on changed data (--allow_new_data=True): {what}"


def model_vocab(data_vocab: int) -> int:
    """The vocabulary a new model gets: bytes as they are, larger vocabularies padded to a
    multiple of 64 for fast matmuls (GPT-2's 50257 becomes 50304)."""
    return data_vocab if data_vocab <= 256 else 64 * math.ceil(data_vocab / 64)


def get_batch(tokens: np.ndarray, seed: int, stream: int, it: int, index: int, batch_size: int, block_size: int,
              vocab_size: int, device: torch.device):
    """Micro-batch ``index`` of iteration ``it`` of ``stream``: inputs and next-token targets, (B, T) each."""
    rng = np.random.default_rng([seed, stream, it, index])
    starts = rng.integers(0, len(tokens) - block_size, size=batch_size)
    windows = np.stack([tokens[s : s + block_size + 1] for s in starts]).astype(np.int64)
    if windows.max() >= vocab_size:
        raise UserError(f"the data holds token id {windows.max()} but the model's vocabulary is {vocab_size}; "
                        "the token file does not belong to this model")
    x, y = (torch.from_numpy(np.ascontiguousarray(w)) for w in (windows[:, :-1], windows[:, 1:]))
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)




def ahead(batches):
    """The batches of ``batches`` in order, each drawn (and its copy to the GPU begun) before the one ahead of it
    is handed out: the next batch is under way while the model runs on this one."""
    batches = iter(batches)
    ready = next(batches, None)
    for following in batches:
        yield ready
        ready = following
    if ready is not None:
        yield ready
