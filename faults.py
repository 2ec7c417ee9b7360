"""Test-only fault injection, so the reliability tests can break a real run on purpose.

Inactive unless the environment variable ADAMS_GPT_FAULTS lists faults, comma-separated, each
``kind@iteration``:

    nan_loss@5      the loss of iteration 5 becomes NaN (inf_loss: +Inf)
    nan_grad@5      one gradient element becomes NaN after iteration 5's backward (inf_grad: +Inf)
    crash@5         raise RuntimeError at the start of iteration 5 (the process exits non-zero)
    kill@5          SIGKILL this process at the start of iteration 5
    kill_in_save@5  SIGKILL this process halfway through writing the checkpoint of iteration 5

Faults fire only in the first attempt of a torchrun job (TORCHELASTIC_RESTART_COUNT unset or 0),
so a restarted worker runs clean.
"""

from __future__ import annotations

import os
import signal

import torch

KINDS = ("nan_loss", "inf_loss", "nan_grad", "inf_grad", "crash", "kill", "kill_in_save")


def _parse() -> dict[str, set[int]]:
    spec = os.environ.get("ADAMS_GPT_FAULTS", "")
    if not spec or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return {}
    out: dict[str, set[int]] = {}
    for item in spec.split(","):
        kind, _, it = item.strip().partition("@")
        if kind not in KINDS or not it.isdigit():
            raise ValueError(f"bad ADAMS_GPT_FAULTS entry '{item}': use kind@iteration with kind in {KINDS}")
        out.setdefault(kind, set()).add(int(it))
    return out


def active(kind: str, it: int) -> bool:
    return it in _parse().get(kind, ())


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def at_iteration_start(it: int) -> None:
    if active("kill", it):
        kill_self()
    if active("crash", it):
        raise RuntimeError(f"injected crash at iteration {it} (ADAMS_GPT_FAULTS)")


def corrupt_loss(it: int, loss: torch.Tensor) -> torch.Tensor:
    if active("nan_loss", it):
        return loss * float("nan")
    if active("inf_loss", it):
        return loss * float("inf")
    return loss


def corrupt_grad(it: int, model: torch.nn.Module) -> None:
    for kind, value in (("nan_grad", float("nan")), ("inf_grad", float("inf"))):
        if active(kind, it):
            p = next(p for p in model.parameters() if p.grad is not None)
            p.grad.view(-1)[0] = value


def save_hook(it: int):
    """A callback for checkpoint.save that kills the process halfway through the write, or None."""
    return kill_self if active("kill_in_save", it) else None
