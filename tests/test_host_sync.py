"""The training loop never waits on the device between log intervals.

On a GPU every read of a tensor's value by the host (``item()``, ``bool()``, ``float()``, ``tolist()``,
``numpy()``) waits for the queue to drain. A CPU has no queue, but the reads are the same calls: here they are
counted (``aten._local_scalar_dense``, which item/bool/float/int reach, seen by a dispatch mode; ``tolist`` and
``numpy`` patched) between the calls train.py makes to its reporter after each iteration.
"""

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import reporting
import step
import train
from tests import faults
from tests.helpers import tiny_config


class HostReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count, self.inside = 0, False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and not self.inside:
            self.count += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def counted(monkeypatch):
    reads = HostReads()
    for name in ("tolist", "numpy"):
        original = getattr(torch.Tensor, name)

        def read(self, *args, _original=original, **kwargs):
            reads.count += 1
            reads.inside = True  # (one read, whatever it reaches inside)
            try:
                return _original(self, *args, **kwargs)
            finally:
                reads.inside = False

        monkeypatch.setattr(torch.Tensor, name, read)
    with reads:
        yield reads


def per_iteration(monkeypatch, cfg, spec: str = "") -> tuple[list[int], list[int], dict]:
    """(host reads in each iteration's loop body, in each call of the reporter after it, the run's summary)."""
    marks = []
    report_step = reporting.Report.step

    def step_(self, it, lr):
        before = reads.count
        report_step(self, it, lr)
        marks.append((before, reads.count))

    monkeypatch.setattr(reporting.Report, "step", step_)
    with counted(monkeypatch) as reads, faults.injected(spec):
        summary = train.main(cfg)
    bodies = [b - a for (_, a), (b, _) in zip(marks, marks[1:])]
    return bodies, [after - before for before, after in marks], summary


def test_the_loop_reads_the_device_once_per_log_interval(data_dir, tmp_path, monkeypatch):
    # AdamW (torch's fused kernel, as on a GPU) skips a non-finite step from a flag on the device
    cfg = tiny_config(data_dir, tmp_path / "run", optimizer="adamw", implementation="fused", max_iters=8,
                      log_interval=4, eval_interval=100, grad_clip=1.0)
    bodies, reporter, summary = per_iteration(monkeypatch, cfg, "nan_loss@5")
    assert bodies == [0] * 7  # not one wait in an iteration, the skipped one included
    assert reporter == [0, 0, 0, 1] * 2  # one at each log line
    assert summary["skipped_steps"] == 1


def test_an_optimizer_without_a_device_flag_waits_once_a_step(data_dir, tmp_path, monkeypatch):
    # AdamS takes no found_inf: the host decides each step (one read), and the reporter still reads at log lines
    cfg = tiny_config(data_dir, tmp_path / "run", optimizer="adams", max_iters=6, log_interval=3, eval_interval=100)
    assert not step.skips_on_device(torch.optim.SGD([torch.zeros(1, requires_grad=True)]))
    bodies, reporter, _ = per_iteration(monkeypatch, cfg)
    assert bodies == [1] * 5 and reporter == [0, 0, 1] * 2


@pytest.mark.parametrize("spec, skipped", [("nan_loss@3", 1), ("inf_grad@2,inf_grad@3", 2)])
def test_a_device_skip_changes_nothing(data_dir, tmp_path, spec, skipped):
    # the fused step told its flag leaves parameters and state (step counts too) as a host-side skip would
    cfg = tiny_config(data_dir, tmp_path / "run", optimizer="adamw", implementation="fused", max_iters=6,
                      log_interval=6, eval_interval=100)
    with faults.injected(spec):
        device = train.main(cfg)
    host = tiny_config(data_dir, tmp_path / "host", optimizer="adamw", implementation="foreach", max_iters=6,
                       log_interval=6, eval_interval=100)
    with faults.injected(spec):
        reference = train.main(host)
    assert device["skipped_steps"] == reference["skipped_steps"] == skipped
    assert device["train_loss"] == pytest.approx(reference["train_loss"], rel=1e-5)


def test_float16_skips_a_nonfinite_loss_through_the_scalers_own_flag(data_dir, tmp_path):
    # the GradScaler decides a float16 step; a non-finite loss is added to its flag: skipped and counted
    import checkpoint

    cfg = tiny_config(data_dir, tmp_path / "run", optimizer="adamw", implementation="fused", dtype="float16",
                      max_iters=4, eval_interval=3, keep_checkpoints=3)
    with faults.injected("nan_loss@3"):
        summary = train.main(cfg)
    assert summary["skipped_steps"] == 1
    before, after = (checkpoint.load_file(p) for p in checkpoint.checkpoints(cfg.out_dir))
    assert all(torch.equal(before["model"][k], after["model"][k]) for k in before["model"])
    assert after["scaler"]["scale"] < before["scaler"]["scale"]  # and the scale backed off, as for an overflow
