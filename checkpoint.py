"""Checkpoints: everything a run needs to continue exactly, written so a crash loses nothing.

Layout inside ``out_dir``::

    checkpoints/ckpt_00001000.pt   one file per saved iteration; the last ``keep`` are kept
    checkpoints/ckpt_00001000.dcp/ the same from a sharded (FSDP) run: torch.distributed.checkpoint
                                   shards, one set per rank, plus meta.pt with everything else
    checkpoints/latest             the name of the newest complete checkpoint

Each file is written to a temporary name in the same folder, flushed to disk (fsync), renamed
into place with ``os.replace`` (atomic on POSIX), and the folder entry flushed too. Only then is
``latest`` rewritten the same way, and only then are old checkpoints pruned. A crash at any
moment leaves the previous checkpoint and pointer intact; temporary files are never read.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from errors import UserError

FOLDER = "checkpoints"
LATEST = "latest"
PATTERN = re.compile(r"^ckpt_(\d{8})\.(pt|dcp)$")
MODEL_SHAPE = ("n_layer", "n_head", "n_embd", "block_size", "bias")


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _HookAfterHalf:
    """A file wrapper that calls ``hook`` once about half of ``expected`` bytes are written."""

    def __init__(self, f, expected: int, hook: Callable[[], None]):
        self.f, self.expected, self.hook, self.written = f, expected, hook, 0

    def write(self, data) -> int:
        n = self.f.write(data)
        self.written += n
        if self.hook and self.written >= self.expected // 2:
            self.f.flush()
            hook, self.hook = self.hook, None
            hook()
        return n

    def __getattr__(self, name):
        return getattr(self.f, name)


def _atomic_write(path: Path, write: Callable) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoint files in out_dir, oldest first."""
    folder = Path(out_dir) / FOLDER
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if PATTERN.match(p.name))


def save(out_dir: str | os.PathLike, state: dict, keep: int = 2, during_write: Callable | None = None) -> Path:
    """Write ``state`` as the checkpoint of iteration ``state['iter_num']`` and point ``latest`` at it."""
    folder = Path(out_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ckpt_{state['iter_num']:08d}.pt"
    if during_write is None:
        _atomic_write(path, lambda f: torch.save(state, f))
    else:  # tests: interrupt the write halfway (the size estimate only needs to be rough)
        expected = sum(t.numel() * t.element_size() for t in _tensors(state)) or 1
        _atomic_write(path, lambda f: torch.save(state, _HookAfterHalf(f, expected, during_write)))
    _publish(folder, path, keep)
    return path


def _publish(folder: Path, path: Path, keep: int) -> None:
    """Point ``latest`` at a complete checkpoint, then prune the oldest beyond ``keep``."""
    _atomic_write(folder / LATEST, lambda f: f.write(path.name.encode()))
    for old in checkpoints(folder.parent)[:-keep]:
        shutil.rmtree(old) if old.is_dir() else old.unlink()


def save_sharded(out_dir: str | os.PathLike, model_state: dict, optim_state: dict, meta: dict, keep: int,
                 is_main: bool) -> Path:
    """A sharded checkpoint through torch.distributed.checkpoint; every rank calls it.

    The shards go to a temporary folder; rank 0 adds ``meta.pt`` (iteration, config, RNG states,
    ...), renames the folder into place and only then moves ``latest``.
    """
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    folder = Path(out_dir) / FOLDER
    path = folder / f"ckpt_{meta['iter_num']:08d}.dcp"
    tmp = folder / f".{path.name}.tmp"
    if is_main:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(tmp))
    dist.barrier()  # every rank's shards are written
    if is_main:
        _atomic_write(tmp / "meta.pt", lambda f: torch.save(meta, f))
        os.replace(tmp, path)
        _fsync_dir(folder)
        _publish(folder, path, keep)
    dist.barrier()
    return path


def load_sharded(path: Path, model_state: dict, optim_state: dict) -> None:
    """Fill ``model_state`` and ``optim_state`` in place from a sharded checkpoint, resharding as needed."""
    import torch.distributed.checkpoint as dcp

    try:
        dcp.load({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(path))
    except Exception as e:
        raise UserError(f"sharded checkpoint {path} cannot be read ({type(e).__name__}: {str(e)[:200]}); "
                        "move it aside to resume from an older one") from e


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def latest(out_dir: str | os.PathLike) -> Path | None:
    """The checkpoint ``latest`` names, or the newest complete one if the pointer is missing."""
    folder = Path(out_dir) / FOLDER
    pointer = folder / LATEST
    if pointer.is_file():
        target = folder / pointer.read_text().strip()
        if PATTERN.match(target.name) and target.is_file():
            return target
    found = checkpoints(out_dir)
    return found[-1] if found else None


def load(out_dir: str | os.PathLike, map_location="cpu") -> dict:
    path = latest(out_dir)
    if path is None:
        raise UserError(f"no checkpoint in {Path(out_dir) / FOLDER}; train first, or use --init_from=scratch")
    return load_file(path, map_location)


def load_file(path: Path, map_location="cpu") -> dict:
    """A checkpoint's contents; for a sharded one, its meta.pt plus ``dcp_path`` to load the tensors from."""
    try:
        if path.is_dir():
            state = torch.load(path / "meta.pt", map_location=map_location, weights_only=False)
            state["dcp_path"] = path
            return state
        state = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:
        older = [p.name for p in checkpoints(path.parent.parent) if p != path]
        hint = f"move it aside to resume from {older[-1]}" if older else "start a new run in another out_dir"
        raise UserError(f"checkpoint {path} is corrupt or not a checkpoint ({type(e).__name__}); {hint}") from e
    if not isinstance(state, dict) or "model" not in state or "model_args" not in state:
        raise UserError(f"{path} is not a checkpoint of this project (no model entry); start a new out_dir")
    return state


def check_shape(state: dict, config: dict, path: str = "the checkpoint") -> None:
    """Refuse a checkpoint whose model shape differs from the config, naming the field."""
    for key in MODEL_SHAPE:
        theirs, ours = state["model_args"][key], config[key]
        if theirs != ours:
            raise UserError(f"{path} has {key}={theirs} but the config says {key}={ours}; "
                            f"resume with --{key}={theirs}, or start a new run in another out_dir")


def clean_state_dict(state_dict: dict) -> dict:
    """Model weights without the prefixes torch.compile ('_orig_mod.') and DDP ('module.') add."""
    out = {}
    for key, value in state_dict.items():
        stripped = None
        while stripped != key:  # the two wrappers nest in either order
            stripped = key
            for prefix in ("_orig_mod.", "module."):
                key = key.removeprefix(prefix)
        out[key] = value
    return out
