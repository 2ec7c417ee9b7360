"""Fault injection for the reliability tests: break a real run on purpose, from outside it.

Faults are ``kind@iteration``, comma-separated:

    nan_loss@5      the loss of iteration 5 becomes NaN (inf_loss: +Inf)
    nan_grad@5      one gradient element becomes NaN after iteration 5's backward (inf_grad: +Inf)
    crash@5         raise RuntimeError at the start of iteration 5 (the process exits non-zero)
    kill@5          SIGKILL the process at the start of iteration 5
    interrupt@5     SIGTERM the process at the start of iteration 5 (as a scheduler or kill stops it)
    kill_in_save@5  SIGKILL the process halfway through writing the checkpoint of iteration 5

In a test's own process: ``with injected("nan_loss@3"): train.main(cfg)``. In a subprocess, or
under torchrun, run this module instead of train.py, with the faults in ADAMS_GPT_FAULTS:

    ADAMS_GPT_FAULTS=crash@6 torchrun --nproc_per_node=1 -m tests.faults --max_iters=8 ...

There they fire only in the first attempt of a torchrun job, so a restarted worker runs clean.
Nothing here is imported by the product: the faults are patched into the functions train.py
calls (the batch draw, the model's forward, gradient clipping, torch.save).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import torch

import dataset
import model as model_module

KINDS = ("nan_loss", "inf_loss", "nan_grad", "inf_grad", "crash", "kill", "interrupt", "kill_in_save")


def parse(spec: str) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        kind, _, it = item.partition("@")
        if kind not in KINDS or not it.isdigit():
            raise ValueError(f"bad fault '{item}': use kind@iteration with kind in {KINDS}")
        out.setdefault(kind, set()).add(int(it))
    return out


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _KillAfterHalf:
    """A file wrapper that SIGKILLs the process once about half of ``expected`` bytes are written."""

    def __init__(self, f, expected: int):
        self.f, self.expected, self.written = f, expected, 0

    def write(self, data) -> int:
        n = self.f.write(data)
        self.written += n
        if self.written >= self.expected // 2:
            self.f.flush()
            os.fsync(self.f.fileno())
            kill_self()
        return n

    def __getattr__(self, name):
        return getattr(self.f, name)


def _tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


@contextlib.contextmanager
def injected(spec: str):
    """Patch the faults of ``spec`` into what train.py calls, for the duration of the block."""
    faults = parse(spec)
    current = {"it": -1}  # the training iteration in progress: that of the batch its model runs on
    born: dict[int, int] = {}  # id of a training batch's inputs -> its iteration (batches are drawn ahead)
    get_batch, forward = dataset.get_batch, model_module.GPT.forward
    clip, save = torch.nn.utils.clip_grad_norm_, torch.save

    def get_batch_(tokens, seed, stream, it, index, *args, **kwargs):
        x, y = get_batch(tokens, seed, stream, it, index, *args, **kwargs)
        if stream == dataset.TRAIN:
            born[id(x)] = it
        return x, y

    def forward_(self, idx, targets=None):
        it = born.pop(id(idx), None) if self.training else None
        if it is not None and it != current["it"]:  # the first forward of iteration ``it``
            current["it"] = it
            if it in faults.get("kill", ()):
                kill_self()
            if it in faults.get("interrupt", ()):
                os.kill(os.getpid(), signal.SIGTERM)
            if it in faults.get("crash", ()):
                raise RuntimeError(f"injected crash at iteration {it}")
        logits, loss = forward(self, idx, targets)
        if self.training and loss is not None:
            if current["it"] in faults.get("nan_loss", ()):
                loss = loss * float("nan")
            elif current["it"] in faults.get("inf_loss", ()):
                loss = loss * float("inf")
        return logits, loss

    def clip_(parameters, *args, **kwargs):
        parameters = list(parameters)
        for kind, value in (("nan_grad", float("nan")), ("inf_grad", float("inf"))):
            if current["it"] in faults.get(kind, ()):
                next(p for p in parameters if p.grad is not None).grad.view(-1)[0] = value
        return clip(parameters, *args, **kwargs)

    def save_(obj, f, *args, **kwargs):
        if isinstance(obj, dict) and obj.get("iter_num") in faults.get("kill_in_save", ()) and "model" in obj:
            f = _KillAfterHalf(f, _tensor_bytes(obj) or 1)
        return save(obj, f, *args, **kwargs)

    dataset.get_batch, model_module.GPT.forward = get_batch_, forward_
    torch.nn.utils.clip_grad_norm_, torch.save = clip_, save_
    try:
        yield
    finally:
        dataset.get_batch, model_module.GPT.forward = get_batch, forward
        torch.nn.utils.clip_grad_norm_, torch.save = clip, save


def main() -> int:
    """train.py's command line, with the faults of ADAMS_GPT_FAULTS (first torchrun attempt only)."""
    import train

    spec = os.environ.get("ADAMS_GPT_FAULTS", "")
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        spec = ""
    with injected(spec):
        return train.cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
