"""A run's log: metrics.jsonl in out_dir (one JSON object per line), and Weights & Biases if asked.

Every line has a ``kind``:

- ``train``: the state of training after ``iter`` iterations: ``train_loss`` (the mean loss of
  the last iteration's batch), ``grad_norm``, ``clip_frac``, ``skipped_steps``, ``tokens_per_s``,
  ``mfu``, ``lr``, ``tokens``, ``elapsed_s``;
- ``eval``: an evaluation after ``iter`` iterations, on the same batches every time:
  ``val_loss`` and ``eval_train_loss`` (the training data, measured the same way), ``lr``,
  ``tokens``, ``elapsed_s``;
- ``checkpoint``: a checkpoint of iteration ``iter`` is complete (written after its ``eval`` line);
- ``diverged``: the last line of a run that train.py stopped after more than
  ``max_consecutive_skips`` non-finite steps in a row: ``iter`` (the count the failing iteration
  would have reached) and ``reason``. A resume from an earlier checkpoint drops it with the
  lines after that checkpoint.

- ``stopped``: the last line of a run that stopped before its end and could say why: ``iter`` and
  ``reason`` (an error, Ctrl-C or a signal). A log that ends with neither this nor ``diverged``,
  short of ``max_iters``, belongs to a process killed from outside (``silent_end``).

A crash can leave the last line half-written: every reader here skips it (``records``), and a
resume drops it.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from errors import UserError

FILE = "metrics.jsonl"
WANDB_ID = "wandb_id"  # in out_dir: the run's wandb id, so that a resumed run continues its own wandb run


def read_json(path) -> object:
    """A JSON file's content (a path, or anything with ``read_text``: a file inside a packed scan), or one error
    naming the file when it is missing, unreadable or not JSON."""
    try:
        return json.loads(path.read_text() if hasattr(path, "read_text") else Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise UserError(f"{path} cannot be read as JSON ({type(e).__name__}: {str(e)[:120]}); restore it, or leave it "
                        "out") from None


def run_config(folder) -> dict:
    """The settings a train.py run recorded (its config.json's ``config``), or one error naming the file."""
    import configurator

    saved = read_json(folder / "config.json")
    if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
        raise UserError(f"{folder / 'config.json'} is not the config.json of a train.py run (no 'config' in it)")
    for key, value in saved["config"].items():  # each known setting of the kind it has (an older run's others: kept)
        if key in configurator.kinds():
            configurator.coerce(key, value, f"{folder / 'config.json'}")
    return saved["config"]


def records(path) -> list[dict]:
    """The JSON objects of a metrics.jsonl, one a line; a last line cut short by a crash is left out
    (a bad line anywhere else is corruption, and an error naming the file). ``path`` is a file's path,
    or anything with ``read_text`` (a file inside an archive)."""
    try:
        text = path.read_text() if hasattr(path, "read_text") else Path(path).read_text()
    except UnicodeDecodeError:
        raise UserError(f"{path} is not text: the log is corrupt; restore it, or start a new run") from None
    lines = [line for line in text.splitlines() if line.strip()]
    out = []
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if i == len(lines) - 1:
                break
            raise UserError(f"{path} line {i + 1} is not JSON: the log is corrupt (only its last line may be cut short "
                            "by a crash); restore it, or start a new run") from None
        out.append(_checked(record, path, i + 1))
    return out


NUMBERS = ("iter", "step", "tokens", "val_loss", "eval_train_loss", "train_loss", "grad_norm", "lr", "elapsed_s",
           "test_reward", "test_accuracy", "reward")  # fields readers compute with, when a line has them


def _checked(record, path, line: int) -> dict:
    """A log line as readers use it: an object with a string ``kind``, its numeric fields numbers."""
    if not isinstance(record, dict) or not isinstance(record.get("kind", ""), str):
        raise UserError(f"{path} line {line} is not a log record (a JSON object with a kind): the log is corrupt; "
                        "restore it, or start a new run")
    for key in NUMBERS:
        value = record.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (key in ("iter", "step") and
                                                                              not isinstance(value, int)):
            raise UserError(f"{path} line {line}: {key} is {value!r}, not a number: the log is corrupt; restore it, or "
                            "start a new run")
    return record


def silent_end(lines: list[dict], max_iters: int | None) -> int | None:
    """The iteration a run's log ends at without saying why it stopped (None: it reached ``max_iters``, or its
    last line says why: ``diverged``, ``stopped``). Such a run's process was killed from outside."""
    if not lines or lines[-1].get("kind") in ("diverged", "stopped"):
        return None
    last = max((r["iter"] for r in lines if isinstance(r.get("iter"), int)), default=0)
    return None if max_iters is not None and last >= max_iters else last


KILLED = ("it was killed from outside, most likely by the kernel's out-of-memory killer (`dmesg | grep -i killed` or "
          "`journalctl -k` shows it); a smaller batch_size (with more gradient_accumulation_steps) needs less memory")


class Log:
    """Appends records to out_dir/metrics.jsonl on the main process (and to wandb, if given a run).

    ``held``: keep the records in memory until ``open`` (a fresh run writes nothing into its folder
    before its first step; folders.RunFolder)."""

    def __init__(self, out_dir: str | os.PathLike, is_main: bool, wandb_run=None, held: bool = False):
        self.path = Path(out_dir) / FILE
        self.is_main = is_main
        self.wandb_run = wandb_run
        self.pending: list[dict] | None = [] if held else None
        self.last_kind: str | None = None

    def write(self, kind: str, **record) -> None:
        if not self.is_main:
            return
        self.last_kind = kind
        record = dict(kind=kind, **record)
        if self.pending is not None:
            self.pending.append(record)
            return
        self._append(record)

    def open(self, wandb_run=None) -> None:
        """Write the records held so far, and every one from now on."""
        pending, self.pending = self.pending or [], None
        self.wandb_run = wandb_run or self.wandb_run
        for record in pending:
            self._append(record)

    def _append(self, record: dict) -> None:
        try:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:  # a full or read-only disk
            raise UserError(f"iteration {record.get('iter')}: {self.path} could not be written ({e.strerror}); free space "
                            "or fix the folder's permissions, then resume with --init_from=resume") from e
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in record.items() if k != "kind"}, step=record["iter"])

    def truncate(self, last_iter: int) -> None:
        """Drop the lines past ``last_iter`` (a resumed run will write them again)."""
        if not self.is_main or not self.path.exists():
            return
        kept = [r for r in records(self.path) if r["iter"] <= last_iter]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(tmp, self.path)

    def finish(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()


def read(out_dir) -> tuple[list[dict], list[dict]]:
    """(train lines, eval lines) of a run's metrics.jsonl; ``out_dir`` may be anything with ``joinpath``
    whose files have ``read_text`` (a folder inside an archive)."""
    train, evals = [], []
    folder = out_dir if hasattr(out_dir, "joinpath") else Path(out_dir)
    for r in records(folder / FILE):
        kind = r.get("kind")
        if kind == "eval":
            evals.append(r)
        elif kind == "train":
            train.append(r)
    return train, evals


def start_wandb(out_dir: str | os.PathLike, resuming: bool, project: str, name: str, config: dict):
    """A wandb run for this training run: the one it started (its id kept in out_dir) when resuming."""
    try:
        import wandb
    except ImportError:
        raise UserError("wandb_log=True needs wandb: pip install wandb (or drop --wandb_log)") from None
    path = Path(out_dir) / WANDB_ID
    run_id = path.read_text().strip() if resuming and path.is_file() else secrets.token_hex(4)
    path.write_text(run_id + "\n")
    return wandb.init(project=project, name=name, config=config, id=run_id, resume="allow")
