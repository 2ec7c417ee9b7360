"""Checkpoints: what a run needs to continue, written so that a crash mid-save loses nothing.

A checkpoint is one ``torch.save`` dict: model, optimizer, GradScaler, iteration, tokens seen,
best validation loss and the full config. It is written to a temporary name in the same
folder, flushed to disk, then renamed over ``ckpt.pt`` (``os.replace`` is atomic on POSIX), so
a reader sees the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from errors import UserError

NAME = "ckpt.pt"


def save(out_dir: str | os.PathLike, state: dict) -> Path:
    out = Path(out_dir)
    path = out / NAME
    tmp = out / f".{NAME}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)
    return path


def load(out_dir: str | os.PathLike, map_location="cpu") -> dict:
    path = Path(out_dir) / NAME
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}; train first, or use init_from='scratch'")
    try:
        state = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:
        raise UserError(f"checkpoint {path} cannot be read ({type(e).__name__}); it is corrupt or not a checkpoint") from e
    if not isinstance(state, dict) or "model" not in state:
        raise UserError(f"{path} is not a checkpoint of this project (no 'model' entry)")
    return state


def clean_state_dict(state_dict: dict) -> dict:
    """Model weights without the prefixes torch.compile ('_orig_mod.') and DDP ('module.') add."""
    out = {}
    for key, value in state_dict.items():
        for prefix in ("_orig_mod.", "module."):
            while key.startswith(prefix):
                key = key[len(prefix):]
        out[key] = value
    return out
