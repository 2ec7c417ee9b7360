"""A run's log: metrics.jsonl in out_dir (one JSON object per line), and Weights & Biases if asked.

Every line has a ``kind``:

- ``train``: the state of training after ``iter`` iterations: ``train_loss`` (the mean loss of
  the last iteration's batch), ``grad_norm``, ``clip_frac``, ``skipped_steps``, ``tokens_per_s``,
  ``mfu``, ``lr``, ``tokens``, ``elapsed_s``;
- ``eval``: an evaluation after ``iter`` iterations, on the same batches every time:
  ``val_loss`` and ``eval_train_loss`` (the training data, measured the same way), ``lr``,
  ``tokens``, ``elapsed_s``;
- ``diverged``: the last line of a run that train.py stopped after more than
  ``max_consecutive_skips`` non-finite steps in a row: ``iter`` (the count the failing iteration
  would have reached) and ``reason``. A resume from an earlier checkpoint drops it with the
  lines after that checkpoint.

Runs written before kinds existed have no ``kind`` and call the eval estimate ``train_loss``;
``read`` tells the two apart by the presence of ``val_loss``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FILE = "metrics.jsonl"


class Log:
    """Appends records to out_dir/metrics.jsonl on the main process (and to wandb, if given a run)."""

    def __init__(self, out_dir: str | os.PathLike, is_main: bool, wandb_run=None):
        self.path = Path(out_dir) / FILE
        self.is_main = is_main
        self.wandb_run = wandb_run

    def write(self, kind: str, **record) -> None:
        if not self.is_main:
            return
        record = dict(kind=kind, **record)
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in record.items() if k != "kind"}, step=record["iter"])

    def truncate(self, last_iter: int) -> None:
        """Drop the lines past ``last_iter`` (a resumed run will write them again)."""
        if not self.is_main or not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines() if line.strip() and json.loads(line)["iter"] <= last_iter]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, self.path)

    def finish(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()


def read(out_dir: str | os.PathLike) -> tuple[list[dict], list[dict]]:
    """(train lines, eval lines) of a run's metrics.jsonl, old runs' included."""
    train, evals = [], []
    for line in (Path(out_dir) / FILE).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            kind = r.get("kind", "eval" if "val_loss" in r else "train")
            if kind == "eval":
                evals.append(r)
            elif kind == "train":
                train.append(r)
    return train, evals
