"""A run's log, metrics.jsonl in out_dir (one JSON object per line), and its readers. run_folder.py writes it.

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
from pathlib import Path

from errors import UserError

FILE = "metrics.jsonl"


def run_config(folder) -> dict:
    """The settings a train.py run recorded (its config.json's ``config``), or one error naming the file."""
    import configurator
    from folders import read_json

    saved = read_json(Path(folder) / "config.json")
    if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
        raise UserError(f"{folder / 'config.json'} is not the config.json of a train.py run (no 'config' in it)")
    for key, value in saved["config"].items():  # each known setting of the kind it has (an older run's others: kept)
        if key in configurator.kinds():
            configurator.coerce(key, value, f"{folder / 'config.json'}")
    return saved["config"]


def records(path) -> list[dict]:
    """The JSON objects of a metrics.jsonl, one a line; a last line cut short by a crash is left out
    (a bad line anywhere else is corruption, and an error naming the file)."""
    try:
        text = Path(path).read_text()
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


def read(out_dir) -> tuple[list[dict], list[dict]]:
    """(train lines, eval lines) of a run's metrics.jsonl."""
    train, evals = [], []
    for r in records(Path(out_dir) / FILE):
        kind = r.get("kind")
        if kind == "eval":
            evals.append(r)
        elif kind == "train":
            train.append(r)
    return train, evals
