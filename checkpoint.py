"""Checkpoints: everything a run needs to continue exactly, written so a crash loses nothing.

A run meets this module twice: ``restore`` (the model, optimizer, loss scaler, RNG streams and
counters of the run being continued, in whatever layout this run has) and ``save_run`` (all of it
again). Whether a folder holds a run to continue is its owner's to say (run_folder.py).

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

import math
import os
import pickle
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import data_parallel
from configurator import MODEL_SHAPE
from errors import UserError
from folders import fsync_dir, write_atomic

FOLDER = "checkpoints"
LATEST = "latest"
PATTERN = re.compile(r"^ckpt_(\d{8})\.(pt|dcp)$")


def checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoint files in out_dir, oldest first."""
    folder = Path(out_dir) / FOLDER
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if PATTERN.match(p.name))


def save(out_dir: str | os.PathLike, state: dict, keep: int = 2) -> Path:
    """Write ``state`` as the checkpoint of iteration ``state['iter_num']`` and point ``latest`` at it."""
    folder = Path(out_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ckpt_{state['iter_num']:08d}.pt"
    try:
        write_atomic(path, lambda f: torch.save(state, f))
    except OSError as e:  # a full disk, a file-size limit, a folder turned read-only
        last = latest(out_dir)
        then = (f"the last complete checkpoint is {last}: free space (or raise the limit), then resume with "
                "--init_from=resume") if last else "no checkpoint is complete yet: free space (or raise the limit), then " \
            "start the run again"
        raise UserError(f"{e.filename} could not be written ({e.strerror}); nothing of it is left, and {then}") from None
    _publish(folder, path, keep)
    return path


def _publish(folder: Path, path: Path, keep: int) -> None:
    """Point ``latest`` at a complete checkpoint, then prune the oldest beyond ``keep``."""
    write_atomic(folder / LATEST, lambda f: f.write(path.name.encode()))
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
        write_atomic(tmp / "meta.pt", lambda f: torch.save(meta, f))
        os.replace(tmp, path)
        fsync_dir(folder)
        _publish(folder, path, keep)
    dist.barrier()
    return path


# A sharded checkpoint's .metadata is a pickle that torch.distributed.checkpoint reads with plain pickle, and
# its non-tensor entries (the optimizer's step counts) are loaded with weights_only=False: either could run
# code a crafted file holds. These are read here instead, admitting only the classes a checkpoint's
# metadata is made of, and torch.load(weights_only=True).
_DCP_GLOBALS = {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
                ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"),
                *(("pathlib", name) for name in ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"))}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        import torch.distributed.checkpoint.metadata as meta

        if module == meta.__name__ and isinstance(getattr(meta, name, None), type):
            return getattr(meta, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if (module, name) in _DCP_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"its .metadata refers to {module}.{name}, which no checkpoint's metadata holds")


def _dcp_reader_and_planner(path: Path, empty: bool = False):
    """A storage reader and a load planner for a sharded checkpoint that read nothing but data."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    class Reader(FileSystemReader):
        def read_metadata(self, *args, **kwargs) -> Metadata:
            with self.fs.create_stream(self._get_metadata_path(kwargs.get("rank")), "rb") as f:
                metadata = _MetadataUnpickler(f).load()
            if not isinstance(metadata, Metadata):
                raise pickle.UnpicklingError("its .metadata is not a checkpoint's metadata")
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class Planner(_EmptyStateDictLoadPlanner if empty else DefaultLoadPlanner):
        def load_bytes(self, read_item, value) -> None:
            value = torch.load(value, weights_only=True)
            target = self.original_state_dict if self.flatten_state_dict else self.state_dict
            if self.flatten_state_dict:
                from torch.distributed.checkpoint._traverse import set_element

                set_element(target, self.mappings[read_item.dest_index.fqn], value)
            else:
                target[read_item.dest_index.fqn] = value

    return Reader(path), Planner()


def load_dcp(path: Path, state_dict: dict, in_one_process: bool = False) -> dict:
    """Fill ``state_dict`` in place from the sharded checkpoint ``path`` (resharding as needed), or, if it is
    empty, with everything the checkpoint holds; tensors and plain values only. A file that is not a whole
    checkpoint of ours is one error naming it."""
    from torch.distributed.checkpoint import state_dict_loader
    from torch.distributed.checkpoint.api import CheckpointException

    reader, planner = _dcp_reader_and_planner(path, empty=not state_dict)
    try:
        state_dict_loader._load_state_dict(state_dict, storage_reader=reader, planner=planner,
                                           no_dist=in_one_process or not torch.distributed.is_initialized())
    except (Exception, CheckpointException) as e:  # CheckpointException derives from BaseException
        raise UserError(f"sharded checkpoint {path} cannot be read ({cause(e)}); move it aside to resume from an older "
                        "one") from None
    return state_dict


def cause(e: BaseException) -> str:
    """An error in one line: torch.distributed.checkpoint's CheckpointException carries every rank's traceback as its
    text; its first rank's own exception is what went wrong."""
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        inner = next(iter(failures.values()))  # (the exception, its traceback's frames), as torch wraps it
        e = inner[0] if isinstance(inner, tuple) and inner and isinstance(inner[0], BaseException) else inner
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200]}" if text else type(e).__name__


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


def _torch_load(path: Path, map_location):
    """``torch.load(weights_only=True)``: tensors and plain types only, nothing a file could run."""
    return torch.load(path, map_location=map_location, weights_only=True)


def load_file(path: Path, map_location="cpu") -> dict:
    """A checkpoint's contents; for a sharded one, its meta.pt plus ``dcp_path`` to load the tensors from."""
    try:
        if path.is_dir():
            state = _torch_load(path / "meta.pt", map_location)
            state["dcp_path"] = path
            return state
        state = _torch_load(path, map_location)
    except Exception as e:
        older = [p.name for p in checkpoints(path.parent.parent) if p != path]
        hint = f"move it aside to resume from {older[-1]}" if older else "start a new run in another out_dir"
        raise UserError(f"checkpoint {path} is corrupt or not a checkpoint ({type(e).__name__}); {hint}") from e
    if not isinstance(state, dict) or "model" not in state or "model_args" not in state:
        raise UserError(f"{path} is not a checkpoint of this project (no model entry); start a new out_dir")
    check_model(state, path)
    state["path"] = path
    return state


RESUME_FIELDS = {"iter_num": int, "tokens": int, "best_val_loss": float, "skipped_steps": int, "rng": list,
                 "optimizer": dict, "scaler": dict}


def check_model(state: dict, path) -> None:
    """Refuse, naming the file, a checkpoint whose model fields are not what train.py writes: an unknown model type,
    model_args its model does not take (or not a dict)."""
    import dataclasses

    from architectures import ARCHITECTURES

    model_type = state.get("model_type", "gpt2")
    if model_type not in ARCHITECTURES:
        raise UserError(f"checkpoint {path} has model_type {model_type!r}, which this project does not build (it builds "
                        f"{', '.join(ARCHITECTURES)}); it was not written by train.py")
    args = state["model_args"]
    known = {f.name for f in dataclasses.fields(ARCHITECTURES[model_type][1])}
    if not isinstance(args, dict) or set(args) - known:
        extra = sorted(set(args) - known) if isinstance(args, dict) else type(args).__name__
        raise UserError(f"checkpoint {path} has model_args {extra} that a {model_type} model does not take; it was not "
                        "written by this version of train.py")


def check_resumable(state: dict) -> None:
    """Refuse a checkpoint a run cannot continue exactly: a field train.py writes missing or of another kind, or no
    optimizer state after steps were taken (resuming would restart the momentum from zero without a word)."""
    path = state.get("path", "the checkpoint")
    for key, kind in RESUME_FIELDS.items():
        if key == "optimizer" and "dcp_path" in state:  # (a sharded checkpoint's optimizer is in its shards)
            continue
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else kind):
            raise UserError(f"checkpoint {path} has no {key} of the kind train.py writes (got {type(value).__name__}); "
                            "resume from another checkpoint, or start a new run")
    if "dcp_path" not in state and state["iter_num"] > 0 and not state["optimizer"].get("state"):
        raise UserError(f"checkpoint {path} holds no optimizer state after {state['iter_num']} iterations: resuming would "
                        "restart the optimizer from zero; resume from another checkpoint, or start a new run")


def model_of(state: dict):
    """An untrained model of the checkpoint's architecture and shape (its weights not yet loaded)."""
    from architectures import architecture

    model_cls, config_cls = architecture(state.get("model_type", "gpt2"))
    return model_cls(config_cls(**state["model_args"]))


def load_model(source: str | os.PathLike):
    """Our model (GPT-2 or Llama) from an out_dir (its latest checkpoint) or a checkpoint path, either layout,
    in eval mode, and the checkpoint's metadata."""
    source = Path(source)
    if source.is_dir() and not source.name.endswith(".dcp"):
        state = load(source)
    elif source.exists():
        state = load_file(source)
    else:
        raise UserError(f"{source} is neither a run's out_dir nor a checkpoint; pass the out_dir train.py wrote")
    model = model_of(state)
    load_model_weights(state, model)
    return model.eval(), state


def load_model_weights(state: dict, model: torch.nn.Module) -> None:
    """Load a checkpoint's weights (``load`` or ``load_file``'s result, either layout) into an
    unsharded model built from ``state['model_args']``, in one process."""
    try:
        if "dcp_path" in state:
            weights = model.state_dict()
            load_dcp(state["dcp_path"], {"model": weights}, in_one_process=True)
            model.load_state_dict(weights)
        else:
            model.load_state_dict(clean_state_dict(state["model"]))
    except (RuntimeError, KeyError, TypeError, AttributeError) as e:  # a missing, extra or wrong-shaped tensor
        raise UserError(f"checkpoint {state.get('path', '')} holds weights that do not fit its own model_args "
                        f"({cause(e)}); it is damaged or was not written by train.py") from None


def check_shape(state: dict, config: dict, path: str = "the checkpoint") -> None:
    """Refuse a checkpoint whose model (or optimizer grouping) differs from the config's, naming the field."""
    shape = {"model": state.get("model_type", "gpt2"), **state["model_args"]}
    for key in MODEL_SHAPE:
        if key not in shape:  # (Llama has no bias setting)
            continue
        theirs, ours = shape[key], config[key]
        if theirs != ours:
            raise UserError(f"{path} has {key}={theirs} but the config says {key}={ours}; "
                            f"resume with --{key}={theirs}, or start a new run in another out_dir")
    # the optimizer's groups are saved with it, so a changed lr split would not load (or be overridden)
    theirs, ours = state.get("config", {}).get("embedding_lr_scale", 1.0), config.get("embedding_lr_scale", 1.0)
    if theirs != ours:
        raise UserError(f"{path} was trained with embedding_lr_scale={theirs:g} but the config says {ours:g}; "
                        f"resume with --embedding_lr_scale={theirs:g}, or start a new run in another out_dir")


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


# --- a run's checkpoints: prepare, restore, save --------------------------------------------------------


@dataclass
class Progress:
    """Where a run stands; saved with every checkpoint."""

    iter: int = 0  # iterations done
    tokens: int = 0  # tokens trained on
    best_val_loss: float = math.inf
    skipped_steps: int = 0  # steps skipped for a non-finite loss or gradient


def rng_states(device: torch.device) -> dict:
    """Every RNG's state in plain types and tensors, so that ``torch.load(weights_only=True)`` reads it."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = dict(python=random.getstate(), numpy=(name, keys.tolist(), pos, has_gauss, gauss), torch=torch.get_rng_state())
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_states(state: dict, device: torch.device) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def restore(state: dict, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler,
            dist_: data_parallel.Dist) -> Progress:
    """Load a checkpoint into this run, whatever its layout and this run's (one process, DDP or
    FSDP, any number of ranks), and return where it stood. Every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
    check_resumable(state)
    try:
        if "dcp_path" in state:  # sharded: torch.distributed.checkpoint reshards into this run's layout
            model_state, optim_state = get_state_dict(model, optimizer)
            load_dcp(state["dcp_path"], {"model": model_state, "optimizer": optim_state})
            set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state)
        else:  # a full state dict fits any layout
            set_state_dict(model, optimizer, model_state_dict=clean_state_dict(state["model"]),
                           optim_state_dict=state["optimizer"], options=StateDictOptions(full_state_dict=True))
        scaler.load_state_dict(state["scaler"])
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as e:  # a tensor of another shape, a field
        raise UserError(f"checkpoint {state.get('path', '')} does not fit the run it belongs to ({cause(e)}); it is "
                        "damaged or was not written by train.py: resume from another checkpoint") from None
    ranks = state["rng"]
    if len(ranks) == dist_.world_size:
        set_rng_states(ranks[dist_.rank], dist_.device)
    elif dist_.is_main:
        print(f"warning: the checkpoint has RNG states for {len(ranks)} ranks, this run has {dist_.world_size}; "
              "dropout masks will differ from an uninterrupted run (batches will not)")
    return Progress(state["iter_num"], state["tokens"], state["best_val_loss"], state["skipped_steps"])


def save_run(out_dir: str | os.PathLike, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler,
             progress: Progress, meta: dict, keep: int, dist_: data_parallel.Dist, sharded: bool) -> Path | None:
    """Checkpoint the run at ``progress.iter``: one file from rank 0, or (``sharded``) every
    rank's shards. Every rank calls it; rank 0 gets the checkpoint's path. ``meta`` goes in as it is (config,
    model shape, ...).

    Parameters holding NaN/Inf are refused (every rank decides alike): the last good checkpoint
    stays the newest.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    shards = [data_parallel.local(p) for p in model.parameters()]
    bad = torch.tensor(float(sum(not torch.isfinite(t).all() for t in shards)))
    if data_parallel.all_reduce_sum(bad).item():
        raise UserError(f"iteration {progress.iter}: the parameters hold NaN/Inf; refusing to checkpoint them. "
                        f"The last good checkpoint is {latest(out_dir)}")
    rng = data_parallel.all_gather_object(rng_states(dist_.device))  # every rank's, for an exact resume
    meta = dict(meta, scaler=scaler.state_dict(), iter_num=progress.iter, tokens=progress.tokens,
                best_val_loss=progress.best_val_loss, skipped_steps=progress.skipped_steps, rng=rng)
    if sharded:
        model_state, optim_state = get_state_dict(model, optimizer)
        path = save_sharded(out_dir, model_state, optim_state, meta, keep, dist_.is_main)
        return path if dist_.is_main else None
    model_state, optim_state = get_state_dict(model, optimizer,
                                              options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    path = None
    if dist_.is_main:
        try:
            path = save(out_dir, dict(meta, model=model_state, optimizer=optim_state), keep=keep)
        except OSError as e:  # a full or read-only disk: the earlier checkpoint and its pointer are untouched
            raise UserError(f"iteration {progress.iter}: the checkpoint could not be written to {Path(out_dir) / FOLDER} "
                            f"({e.strerror}); the last complete one is {latest(out_dir)}. Free space or fix the "
                            "folder's permissions, then resume with --init_from=resume") from e
    data_parallel.barrier()
    return path
