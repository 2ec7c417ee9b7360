"""A training run's folder (out_dir) and the one object that writes it.

``RunFolder`` owns everything train.py puts in out_dir::

    .adams_gpt          what the folder is (a run), how far it got and how it ended: read by contents.look
    config.json         the run's settings and what it derived from them
    metrics.jsonl       its log (metrics.py reads it)
    wandb_id            the Weights & Biases run it continues, when it logs there
    checkpoints/        checkpoint.py's files

It takes the folder's lock through the door (folders.Destination) and holds it until the run ends;
rank 0 decides whether the run resumes or starts fresh, every rank abides. A fresh start writes
nothing until ``begin``, which train.py calls once the run has taken its first step (so that no input
the user gave can still make it fail): only then is a run it replaces moved aside, and the marker and
config.json written. Every whole file goes through ``folders.write_atomic`` (beside, fsync, rename,
fsync of the folder); the log is appended line by line and made durable with each checkpoint.
``read_only`` (an evaluation) takes no lock and writes nothing.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

import checkpoint
import contents
import data_parallel
import folders
import metrics
from errors import UserError

WANDB_ID = "wandb_id"  # the run's wandb id, so that a resumed run continues its own wandb run


class RunFolder:
    def __init__(self, out_dir: str | os.PathLike, dist_: data_parallel.Dist, read_only: bool = False):
        self.path, self.dist, self.read_only = Path(out_dir), dist_, read_only
        self.writes = dist_.is_main and not read_only
        self.dest = folders.Destination(out_dir, makes=contents.RUN, option="--out_dir", command="train.py")
        self.found: contents.Found | None = None
        self.fresh, self.held, self.begun = True, False, False
        self.marker: dict = {}
        self.held_lines: list[dict] = []
        self.wandb_run = None
        self.log_path = self.path / metrics.FILE

    # -- opening: lock, look, decide
    def open(self, init_from: str, overwrite: bool) -> dict | None:
        """Under the lock, decide: the checkpoint this invocation resumes (returned, loaded on every rank), or
        None for a fresh start. Refuses (on every rank alike) what it may not do."""
        decision = []

        def decide():
            if not self.read_only:
                self.dest.__enter__()
                self.held = True
                gone = clear_leftovers(self.path)  # killed checkpoint writers' whole-size temporaries
                if gone:
                    print(f"note: removed {len(gone)} half-written checkpoint file(s) a killed run left in "
                          f"{self.path / checkpoint.FOLDER} ({', '.join(p.name for p in gone)})", flush=True)
            self.found = self.dest.found if self.held else contents.look(self.path)
            decision.append(self._decide(init_from, overwrite))

        try:
            data_parallel.agree(decide)
        except UserError:
            self.close()
            raise
        decision = data_parallel.all_gather_object(decision[0] if decision else "")[0]
        if not decision.startswith("resume:"):
            return None
        self.fresh = False
        latest = Path(decision.removeprefix("resume:"))
        state = checkpoint.load_file(latest)
        if self.writes:  # (a folder from before markers gets one that points at the checkpoint it resumes)
            self.marker = dict(contents.marker(self.path) or {}, iter=state["iter_num"],
                               checkpoint=latest.relative_to(self.path).as_posix())
        return state

    def _decide(self, init_from: str, overwrite: bool) -> str:
        found, where = self.found, f"out_dir '{self.path}'"
        latest = checkpoint.latest(self.path) if found.kind == contents.RUN else None
        killed = self._killed_at() if found.kind == contents.RUN and not self.read_only else None
        if killed is not None:
            print(f"note: the run in {where} ended at iteration {killed:,} without a word: {metrics.KILLED}")
        if init_from == "resume" or (init_from == "auto" and latest is not None):
            if latest is not None:
                return f"resume:{latest}"
            if found.kind == contents.RUN and found.restartable:
                raise UserError(f"{where} has no checkpoint yet: its run stopped before the first one. Start it again "
                                "with the same command without --init_from=resume (or with --init_from=auto)")
            if found.kind == contents.RUN:
                raise UserError(f"{where} holds {found.what}: there is nothing to resume. Start a new run in another "
                                "out_dir")
            if found.kind in (contents.ABSENT, contents.EMPTY):
                raise UserError(f"no checkpoint in {self.path / checkpoint.FOLDER}; train first, or use "
                                "--init_from=scratch")
            raise UserError(f"{where} holds {found.what}, not a train.py run; give the out_dir of a run")
        if self.read_only:
            if init_from in ("scratch", "auto"):
                raise UserError("eval_only=True evaluates a trained model: give --init_from=resume with the run's "
                                "--out_dir, or --init_from=gpt2 or a Hugging Face directory")
            return "fresh"
        if found.kind == contents.RUN and not found.restartable and not overwrite:
            resume = "continue it with --init_from=resume, " if latest is not None else ""
            raise UserError(f"{where} already holds {found.what}; {resume}choose another --out_dir, or pass "
                            "--overwrite=True to replace it")
        self.dest.allow(overwrite=overwrite)
        if self.path.exists() and not os.access(self.path, os.W_OK | os.X_OK):
            raise UserError(f"{where} is not writable; choose another --out_dir")
        return "fresh"

    def _killed_at(self) -> int | None:
        """The iteration the folder's run ended at without saying why (its process was killed), if it did."""
        try:
            lines = metrics.records(self.log_path) if self.log_path.is_file() else []
            saved = json.loads((self.path / "config.json").read_text())
            max_iters = saved["config"]["max_iters"]
        except (UserError, OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None
        return metrics.silent_end(lines, max_iters if isinstance(max_iters, int) else None)

    # -- the run's files
    def begin(self, config: dict, wandb: dict | None = None) -> None:
        """The run is under way: clear the run it replaces (a fresh start), mark the folder, write config.json and
        the log lines held so far, and start (or continue) its wandb run. Every rank calls it once."""
        if self.writes:
            if self.fresh and self.found.kind == contents.RUN:
                if self.found.restartable and self.found.what.startswith("a train.py run"):
                    print(f"note: out_dir '{self.path}' held the log of a run stopped before its first checkpoint; "
                          "starting it again")
                self.dest.move_aside((contents.MARKER, "config.json", metrics.FILE, WANDB_ID, checkpoint.FOLDER))
            self.path.mkdir(exist_ok=True)
            self.dest.lock.hold_folder(self.dest.option)
            self._mark(iter=self.marker.get("iter", 0), checkpoint=self.marker.get("checkpoint"), end=None,
                       max_iters=config["config"]["max_iters"])
            folders.write_atomic(self.path / "config.json", json.dumps(config, indent=2).encode())
            if wandb is not None:
                self.wandb_run = start_wandb(self.path, not self.fresh, config=config["config"], **wandb)
            held, self.held_lines = self.held_lines, []
            for record in held:
                self._append(record)
        self.begun = True
        data_parallel.barrier()

    def log(self, kind: str, **record) -> None:
        """A line of metrics.jsonl (and wandb's); held in memory until the run begins."""
        if not self.writes:
            return
        record = dict(kind=kind, **record)
        if self.begun:
            self._append(record)
        else:
            self.held_lines.append(record)

    def _append(self, record: dict) -> None:
        try:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:  # a full or read-only disk
            raise UserError(f"iteration {record.get('iter')}: {self.log_path} could not be written ({e.strerror}); free "
                            "space or fix the folder's permissions, then resume with --init_from=resume") from e
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in record.items() if k != "kind"}, step=record["iter"])

    def truncate(self, last_iter: int) -> None:
        """Drop the log's lines past ``last_iter``, which a resumed run writes again."""
        if self.writes and self.log_path.exists():
            kept = [r for r in metrics.records(self.log_path) if r["iter"] <= last_iter]
            folders.write_atomic(self.log_path, "".join(json.dumps(r) + "\n" for r in kept).encode())

    def save(self, model, optimizer, scaler, progress, meta: dict, keep: int, sharded: bool) -> None:
        """A checkpoint of the run at ``progress.iter`` (every rank calls it), then its log line and the marker
        that point at it: the log is flushed to disk first, so a checkpoint never outlives the lines before it."""
        path = checkpoint.save_run(self.path, model, optimizer, scaler, progress, meta, keep, self.dist, sharded=sharded)
        if self.writes:
            self.log("checkpoint", iter=progress.iter)
            with open(self.log_path, "rb+") as f:
                os.fsync(f.fileno())
            self._mark(iter=progress.iter, checkpoint=path.relative_to(self.path).as_posix() if path else None)

    def end(self, how: str, iter: int, reason: str | None = None) -> None:
        """The run's last word: ``finished``, ``stopped`` (an error, Ctrl-C, a signal: with its reason) or
        ``diverged``; the last two as a log line too (metrics.py)."""
        if not (self.writes and self.begun):
            return
        if how != "finished":
            self.log(how, iter=iter, reason=reason)
        self._mark(end=how, at=iter)

    def _mark(self, **fields) -> None:
        self.marker = dict(self.marker, kind=contents.RUN, by="train.py", **fields)
        folders.write_atomic(self.path / contents.MARKER, (json.dumps(self.marker, indent=2) + "\n").encode())

    def finish(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()

    def close(self) -> None:
        if self.held:
            self.held = False
            self.dest.__exit__(None, None, None)


def clear_leftovers(out_dir: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of checkpoint writers that were killed (.NAME.PID.tmp, PID no longer running):
    whole checkpoints' worth of bytes that nothing else removes. Returns what it removed."""
    folder = Path(out_dir) / checkpoint.FOLDER
    gone = []
    for tmp in folder.glob(".*.tmp") if folder.is_dir() else []:
        match = re.fullmatch(r"\..+\.(\d+)\.tmp", tmp.name)
        if match and not folders.alive(int(match.group(1))):
            tmp.unlink(missing_ok=True)
            gone.append(tmp)
    return gone


def start_wandb(out_dir: Path, resuming: bool, project: str, name: str, config: dict):
    """A wandb run for this training run: the one it started (its id kept in out_dir) when resuming."""
    try:
        import wandb
    except ImportError:
        raise UserError("wandb_log=True needs wandb: pip install wandb (or drop --wandb_log)") from None
    path = out_dir / WANDB_ID
    run_id = path.read_text().strip() if resuming and path.is_file() else secrets.token_hex(4)
    folders.write_atomic(path, (run_id + "\n").encode())
    return wandb.init(project=project, name=name, config=config, id=run_id, resume="allow")
