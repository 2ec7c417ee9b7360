"""What a folder holds: nothing, a train.py run, a GRPO run, an export, a dataset, a scan of runs, a file, or
something else (``look``).

A folder one of our commands made says what it is in a small marker it wrote (``MARKER``, a JSON object
with a ``kind``; a run's also says how far it got and how it ended). Folders from before markers, or put
together by hand, are recognised by the files each command leaves (``_unmarked``). The door (folders.py)
looks before it lets a command write.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from errors import UserError

# What the destination holds (``Found.kind``).
ABSENT, EMPTY, FILE = "absent", "empty", "file"
RUN, GRPO, EXPORT, DATASET, SCAN, OTHER = "run", "grpo", "export", "dataset", "scan", "other"

MARKER = ".adams_gpt"  # in a folder a command of ours made: what it is (its kind), and for a run how far it got
RUN_FILES = (MARKER, "checkpoints", "metrics.jsonl", "config.json", "wandb_id")  # what train.py writes in out_dir
SWEEP_LOG = "train.log"  # the sweep's log of one of its runs, written beside train.py's files
DATASET_FILES = ("train.bin", "val.bin")
WEIGHTS = (".safetensors", ".bin", ".pt")


@dataclass(frozen=True)
class Found:
    """What a destination holds: its ``kind`` and, in words, ``what`` (for error lines)."""

    kind: str
    what: str
    finished: bool = False  # a run or GRPO run that reached its end
    checkpoints: bool = False  # a train.py run with a checkpoint to resume from
    restartable: bool = False  # a train.py run stopped before its first checkpoint, or an unfinished GRPO run


def marker(path: str | os.PathLike) -> dict | None:
    """The marker a command of ours left in the folder ``path`` (a JSON object with a ``kind``), or None."""
    try:
        found = json.loads((Path(path) / MARKER).read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) and found.get("kind") in (RUN, GRPO, EXPORT, SCAN) else None


def _number(value, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _marked_run(path: Path, m: dict) -> Found:
    """A train.py run, from its marker: its last checkpoint (present or not) and how it ended, if it did."""
    ckpt, end = m.get("checkpoint"), m.get("end")
    ckpts = isinstance(ckpt, str) and bool(ckpt) and (path / ckpt).exists()
    at = _number(m.get("at"), _number(m.get("iter")))
    finished = end in ("finished", "diverged")
    state = "finished" if finished else "stopped"
    if ckpts:
        what = f"a train.py run ({state} at iteration {at:,}, with checkpoints)"
    elif ckpt or finished:
        what = f"a train.py run ({state} at iteration {at:,}) whose checkpoints are gone (packed or moved away)"
    else:
        what = "a train.py run stopped before its first checkpoint"
    return Found(RUN, what, finished=finished, checkpoints=ckpts, restartable=not (ckpt or finished))


def _grpo(path: Path) -> Found:
    done = False
    try:
        done = bool(json.loads((path / "run.json").read_text()).get("done"))
    except (OSError, ValueError, AttributeError):
        pass
    return Found(GRPO, "a finished GRPO run" if done else "an unfinished GRPO run", finished=done, restartable=not done)


def look(path: str | os.PathLike) -> Found:
    """What ``path`` holds: for a folder one of our commands made, what its marker says; for one made before
    markers (or by hand), what its file names say (``_unmarked``)."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        return Found(FILE, "a broken symbolic link")
    if not path.exists():
        return Found(ABSENT, "nothing")
    if not path.is_dir():
        return Found(FILE, "a file" if path.is_file() else "something that is neither a file nor a folder")
    try:
        names = set(os.listdir(path)) - {".lock"}  # (the lock inside a run folder of an older version)
    except OSError as e:
        raise UserError(f"{path} cannot be read ({e.strerror}); fix its permissions or choose another folder") from e
    if not names:
        return Found(EMPTY, "an empty folder")
    kind = (marker(path) or {}).get("kind") if MARKER in names else None
    if kind == RUN:
        return _marked_run(path, marker(path))
    if kind == GRPO:
        return _grpo(path)
    if kind == EXPORT:
        return Found(EXPORT, "a Hugging Face model (an export)")
    if kind == SCAN:
        return Found(SCAN, "a scan of runs")
    return _unmarked(path, names)


# --- folders written before markers: recognised by the files each command leaves ------------------------------


def _records(log: Path) -> list[dict]:
    """A log's lines as objects (a last line cut short by a crash left out), or one ``corrupt`` line."""
    try:
        lines = [line for line in log.read_text().splitlines() if line.strip()]
        out = [json.loads(line) for line in lines[:-1]]
        with contextlib.suppress(ValueError, RecursionError):
            out.append(json.loads(lines[-1]) if lines else None)
        out = [r for r in out if r is not None]
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return [{"kind": "corrupt"}]
    return out if all(isinstance(r, dict) for r in out) else [{"kind": "corrupt"}]


def _unmarked_run(path: Path, names: set[str]) -> Found:
    folder = path / "checkpoints"
    ckpts = folder.is_dir() and any(re.fullmatch(r"ckpt_\d{8}\.(pt|dcp)", n) for n in os.listdir(folder))
    records = _records(path / "metrics.jsonl") if "metrics.jsonl" in names else []
    max_iters, logged = None, False
    if "config.json" in names:
        try:
            saved = json.loads((path / "config.json").read_text())
            max_iters, logged = saved["config"]["max_iters"], saved.get("derived", {}).get("checkpoints_in_log", False)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            pass
    if isinstance(max_iters, bool) or not isinstance(max_iters, int):  # a damaged config.json: the length is unknown
        max_iters = None
    iters = [r.get("iter", 0) for r in records if isinstance(r.get("iter", 0), int)]
    diverged = bool(records) and records[-1].get("kind") == "diverged"
    finished = diverged or (max_iters is not None and bool(iters) and max(iters) >= max_iters)
    # Did it ever complete a checkpoint? Its log says so (a 'checkpoint' line); a run of an older version, whose
    # log does not, is taken to have, once it evaluated past iteration 0.
    evaluated = any(r.get("kind") == "checkpoint" or (not logged and r.get("kind", "eval") == "eval"
                                                      and r.get("iter", 0) > 0) for r in records)
    corrupt = any(r.get("kind") == "corrupt" for r in records)
    last = max(iters, default=0)
    if ckpts:
        what = f"a train.py run ({'finished' if finished else 'stopped'} at iteration {last:,}, with checkpoints)"
    elif finished or evaluated or corrupt:
        what = (f"a train.py run ({'finished' if finished else 'stopped'} at iteration {last:,}) whose checkpoints "
                "are gone (packed or moved away)") if not corrupt else "a train.py run whose log is corrupt"
    else:
        what = "a train.py run stopped before its first checkpoint"
    restartable = not (ckpts or finished or evaluated or corrupt)
    return Found(RUN, what, finished=finished, checkpoints=ckpts, restartable=restartable)


def _is_grpo_log(path: Path) -> bool:
    records = _records(path)
    return any("test_reward" in r or ("step" in r and "iter" not in r) for r in records)


def _is_run_config(path: Path) -> bool:
    try:
        saved = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(saved, dict) and isinstance(saved.get("config"), dict) and "max_iters" in saved["config"]


def _unmarked(path: Path, names: set[str]) -> Found:
    if "adams_gpt.json" in names or ("config.json" in names and any(n.endswith(WEIGHTS) for n in names)
                                     and "checkpoints" not in names and "metrics.jsonl" not in names):
        return Found(EXPORT, "a Hugging Face model (an export)")
    if "run.json" in names or ("metrics.jsonl" in names and _is_grpo_log(path / "metrics.jsonl")):
        return _grpo(path)
    if names & {"checkpoints", "metrics.jsonl", "wandb_id"} or ("config.json" in names and _is_run_config(path)):
        return _unmarked_run(path, names)
    if names & set(DATASET_FILES):
        return Found(DATASET, "a dataset (" + ", ".join(sorted(names & set(DATASET_FILES))) + ")")
    if names == {SWEEP_LOG}:
        return Found(RUN, "a sweep's run that has not started", restartable=True)
    children = [path / n for n in sorted(names) if not n.startswith(".")][:64]
    if {"runs.csv", "summary.csv"} & names or any((c / "metrics.jsonl").is_file() or (c / "run.json").is_file()
                                                   or (c / SWEEP_LOG).is_file() for c in children if c.is_dir()):
        return Found(SCAN, "a scan of runs")
    return Found(OTHER, f"{len(names)} file(s) or folder(s) of something else (e.g. {sorted(names)[0]})")
