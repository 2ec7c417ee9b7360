"""What a training run says as it goes: a progress bar on a terminal (nanoGPT's plain lines when the output
is redirected), the log's ``train`` lines, what the run will cost, and settings that make it learn nothing.

Before the first step: one line for each setting that makes the run a no-op or mostly evaluation (it ends
inside the warmup, so the peak lr is never reached; an evaluation costs more than the training between two;
the data is smaller than one batch). The first evaluation is timed, and after the first few steps a line
estimates the run's time from them; every plain log line then carries the time left.
"""

from __future__ import annotations

import math
import sys
import time

import checkpoint
from errors import UserError

ESTIMATE_AFTER = 3  # steps timed before the estimate (the first pays for warm-up: allocation, compilation)


def warnings(cfg, train_tokens: int, tokens_per_iter: int, start: int) -> list[str]:
    """The settings that make this run learn little or nothing, in words (each with its fix)."""
    out = []
    steps = cfg.max_iters - start
    if cfg.decay_lr and 0 < cfg.max_iters <= cfg.warmup_iters:
        out.append(f"the run ends inside its warmup (max_iters={cfg.max_iters} <= warmup_iters={cfg.warmup_iters}): the "
                   f"lr never reaches its peak {cfg.learning_rate:g}; lower warmup_iters (and lr_decay_iters) with max_iters")
    eval_tokens = 2 * cfg.eval_iters * cfg.batch_size * cfg.block_size  # validation and training data, forward only
    between = min(cfg.eval_interval, max(steps, 1)) * tokens_per_iter * 3  # forward and backward: ~3 forwards
    if steps > 0 and eval_tokens > between:
        out.append(f"each evaluation ({2 * cfg.eval_iters} batches) costs more than the training between two "
                   f"({min(cfg.eval_interval, steps)} steps): lower eval_iters or raise eval_interval")
    if train_tokens < tokens_per_iter:
        out.append(f"the training data ({train_tokens:,} tokens) is smaller than one batch ({tokens_per_iter:,} tokens): "
                   "every step sees all of it; prepare more data or lower batch_size")
    return out


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# Dense bf16/fp16 tensor-core peak FLOP/s, from the vendors' data sheets, for the MFU estimate.
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12, "4090": 165e12}


def peak_flops(device) -> float | None:
    if device.type != "cuda":
        return None
    import torch

    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS.items() if key in name), None)


class Report:
    """Everything a run says as it goes, the one writer of its log lines (through its folder): the bar and the
    plain lines (main rank only), ``train`` lines at log intervals, ``eval`` lines, and the last word when a run
    stops early. The step's values stay on the device between log intervals (step.Guard): ``read`` fetches them,
    counts the skipped steps and stops a run that ran past ``max_consecutive_skips`` non-finite steps."""

    def __init__(self, cfg, folder, model, guard, progress, tokens_per_iter: int, device, main: bool):
        from tqdm import tqdm

        self.cfg, self.folder, self.model, self.guard, self.progress = cfg, folder, model, guard, progress
        self.tokens_per_iter, self.main, self.peak = tokens_per_iter, main, peak_flops(device)
        self.bar = tqdm(total=cfg.max_iters, initial=progress.iter, disable=not (main and sys.stderr.isatty()),
                        dynamic_ncols=True, mininterval=1.0, desc=cfg.optimizer)
        self.start = self.window_start = time.time()
        self.window_tokens = self.window_steps = self.clipped = 0
        self.first_step, self.steps_timed, self.eval_seconds = None, 0, None
        self.summary: dict = {}

    def say(self, text: str) -> None:
        if self.main:  # (tqdm.write prints even when the bar is disabled)
            self.bar.write(text)

    def read(self, it: int) -> dict:
        """The guard's values after iteration ``it`` (a wait on the device): skips said and counted; a run past
        its limit of non-finite steps in a row stops here, its log's last line saying why."""
        values = self.guard.read()
        self.progress.skipped_steps += values["skipped"]
        self.clipped += values["clipped"]
        if values["over"] is not None:
            at, loss, norm = values["over"]
            what, value = ("loss", loss) if not math.isfinite(loss) else ("gradient norm", norm)
            self.folder.end("diverged", iter=at + 1, reason=f"the {what} is {value}")  # sweep.py reads this
            raise UserError(f"iteration {at}: the {what} is {value}; stopping after {self.cfg.max_consecutive_skips + 1} "
                            f"non-finite step(s) in a row (max_consecutive_skips={self.cfg.max_consecutive_skips}). The "
                            f"last good checkpoint is {checkpoint.latest(self.cfg.out_dir)}: resume from it with a lower "
                            "learning_rate, or check the data")
        if values["skipped"]:
            self.say(f"iter {it}: {values['skipped']} step(s) skipped since the last report: a non-finite loss or "
                     f"gradient norm ({values['in_a_row']} in a row now)")
        return values

    def step(self, it: int, lr: float) -> None:
        """After iteration ``it``: the bar, the estimate once, and at each log interval the log line."""
        now = time.time()
        self.window_tokens += self.tokens_per_iter
        self.window_steps += 1
        self.bar.update(1)
        self.steps_timed += 1
        if self.steps_timed == 1:
            self.first_step = now
        elif self.steps_timed == ESTIMATE_AFTER + 1:
            self.say(f"estimate: {duration(self.remaining(now))} for the {self.cfg.max_iters - it - 1:,} steps left "
                     f"and their evaluations (from the last {ESTIMATE_AFTER} steps)")
        done = it + 1
        if done % self.cfg.log_interval and done != self.cfg.max_iters:
            return
        values = self.read(done)
        tokens_per_s = self.window_tokens / (now - self.window_start)
        mfu = self.model.estimate_mfu(tokens_per_s, self.peak) if self.peak else None
        self.folder.log("train", iter=done, tokens=self.progress.tokens, lr=lr, train_loss=values["loss"],
                        grad_norm=values["norm"], clip_frac=self.clipped / self.window_steps,
                        skipped_steps=self.progress.skipped_steps, tokens_per_s=tokens_per_s, mfu=mfu,
                        elapsed_s=now - self.start)
        postfix = dict(loss=f"{values['loss']:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}")
        self.bar.set_postfix(postfix if mfu is None else dict(postfix, mfu=f"{100 * mfu:.1f}%"))
        if self.bar.disable and self.main:
            ms = 1000 * (now - self.window_start) / self.window_steps
            left = f", {duration(self.remaining(now))} left" if self.steps_timed > ESTIMATE_AFTER else ""
            print(f"iter {done}: loss {values['loss']:.4f}, time {ms:.2f}ms" + ("" if mfu is None else f", mfu {100 * mfu:.2f}%")
                  + left, flush=True)
        self.window_start, self.window_tokens, self.window_steps, self.clipped = now, 0, 0, 0
        self.summary["train_loss"] = values["loss"]

    def evaluated(self, it: int, lr: float, losses: dict, seconds: float) -> None:
        if self.eval_seconds is None:
            self.eval_seconds = seconds
            self.say(f"one evaluation takes {duration(seconds)} ({2 * self.cfg.eval_iters} batches)")
        self.folder.log("eval", iter=it, tokens=self.progress.tokens, lr=lr, val_loss=losses["val"],
                        eval_train_loss=losses["train"], elapsed_s=time.time() - self.start)
        self.say(f"iter {it}: val loss {losses['val']:.4f}, train loss {losses['train']:.4f}")
        self.summary.update(val_loss=losses["val"], eval_train_loss=losses["train"], iter=it)

    def stopped(self, e: BaseException) -> None:
        """The log's last line for a run that stops before its end (an error, Ctrl-C, a signal); else it was
        killed from outside (metrics.py)."""
        reason = ("interrupted" if isinstance(e, KeyboardInterrupt) else str(e)[:300] if isinstance(e, UserError)
                  else f"{type(e).__name__}: {e}"[:300])
        if self.folder.marker.get("end") != "diverged":
            self.folder.end("stopped", iter=self.progress.iter, reason=reason)

    def remaining(self, now: float) -> float:
        """Seconds left: the steps at the pace since the first, and the evaluations at the first one's."""
        per_step = (now - self.first_step) / max(1, self.steps_timed - 1)
        left = self.cfg.max_iters - self.progress.iter
        evals = left // self.cfg.eval_interval + 1
        return left * per_step + evals * (self.eval_seconds or 0.0)

    def close(self) -> None:
        self.bar.close()


