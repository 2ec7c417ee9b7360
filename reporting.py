"""What a training run says as it goes: a progress bar on a terminal (nanoGPT's plain lines when the output
is redirected), the log's ``train`` lines, what the run will cost, and settings that make it learn nothing.

Before the first step: one line for each setting that makes the run a no-op or mostly evaluation (it ends
inside the warmup, so the peak lr is never reached; an evaluation costs more than the training between two;
the data is smaller than one batch). The first evaluation is timed, and after the first few steps a line
estimates the run's time from them; every plain log line then carries the time left.
"""

from __future__ import annotations

import sys
import time

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


class Report:
    """The bar, the plain lines and the log's ``train`` lines of one run; only the main rank prints."""

    def __init__(self, cfg, log, model, peak_flops: float | None, progress, tokens_per_iter: int, main: bool):
        from tqdm import tqdm

        self.cfg, self.log, self.model, self.peak, self.progress = cfg, log, model, peak_flops, progress
        self.tokens_per_iter, self.main = tokens_per_iter, main
        self.bar = tqdm(total=cfg.max_iters, initial=progress.iter, disable=not (main and sys.stderr.isatty()),
                        dynamic_ncols=True, mininterval=1.0, desc=cfg.optimizer)
        self.start = self.window_start = time.time()
        self.window_tokens = self.clipped = 0
        self.first_step, self.steps_timed, self.eval_seconds = None, 0, None

    def say(self, text: str) -> None:
        if self.main:  # (tqdm.write prints even when the bar is disabled)
            self.bar.write(text)

    def evaluated(self, seconds: float) -> None:
        if self.eval_seconds is None:
            self.eval_seconds = seconds
            self.say(f"one evaluation takes {duration(seconds)} ({2 * self.cfg.eval_iters} batches)")

    def step(self, it: int, lr: float, train_loss: float, norm: float, clipped: bool) -> dict:
        """After iteration ``it``: the bar, the estimate once, and at each log interval the log line."""
        now = time.time()
        self.clipped += int(clipped)
        self.window_tokens += self.tokens_per_iter
        self.bar.update(1)
        self.steps_timed += 1
        if self.steps_timed == 1:
            self.first_step = now
        elif self.steps_timed == ESTIMATE_AFTER + 1:
            self.say(f"estimate: {duration(self.remaining(now))} for the {self.cfg.max_iters - it - 1:,} steps left "
                     f"and their evaluations (from the last {ESTIMATE_AFTER} steps)")
        done = it + 1
        if done % self.cfg.log_interval and done != self.cfg.max_iters:
            return {}
        tokens_per_s = self.window_tokens / (now - self.window_start)
        mfu = self.model.estimate_mfu(tokens_per_s, self.peak) if self.peak else None
        steps = self.cfg.log_interval if done % self.cfg.log_interval == 0 else done % self.cfg.log_interval
        self.log.write("train", iter=done, tokens=self.progress.tokens, lr=lr, train_loss=train_loss, grad_norm=norm,
                       clip_frac=self.clipped / steps, skipped_steps=self.progress.skipped_steps,
                       tokens_per_s=tokens_per_s, mfu=mfu, elapsed_s=now - self.start)
        postfix = dict(loss=f"{train_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}")
        self.bar.set_postfix(postfix if mfu is None else dict(postfix, mfu=f"{100 * mfu:.1f}%"))
        if self.bar.disable and self.main:
            ms = 1000 * (now - self.window_start) / steps
            left = f", {duration(self.remaining(now))} left" if self.steps_timed > ESTIMATE_AFTER else ""
            print(f"iter {done}: loss {train_loss:.4f}, time {ms:.2f}ms" + ("" if mfu is None else f", mfu {100 * mfu:.2f}%")
                  + left, flush=True)
        self.window_start, self.window_tokens, self.clipped = now, 0, 0
        return dict(train_loss=train_loss)

    def remaining(self, now: float) -> float:
        """Seconds left: the steps at the pace since the first, and the evaluations at the first one's."""
        per_step = (now - self.first_step) / max(1, self.steps_timed - 1)
        left = self.cfg.max_iters - self.progress.iter
        evals = left // self.cfg.eval_interval + 1
        return left * per_step + evals * (self.eval_seconds or 0.0)

    def close(self) -> None:
        self.bar.close()
