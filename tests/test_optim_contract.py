"""The torch.optim contract, case by case, for AdamS, Lion and AdamMini in every implementation, with
torch.optim.AdamW's behaviour in the same case as the reference: copies and pickles, state_dict round trips across
implementations, parameter groups added later, hooks, closures, lr schedulers (OneCycleLR's momentum cycling too),
GradScaler, ZeroRedundancyOptimizer, torch.compile of the step, and non-finite gradients."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from adams_optim import AdamMini, AdamS, Lion
from torch import nn

IMPLEMENTATIONS = {"loop": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}
CASES = [(cls, impl) for cls in (AdamS, Lion) for impl in IMPLEMENTATIONS] + \
        [(AdamMini, "default"), (torch.optim.AdamW, "foreach"), (torch.optim.AdamW, "fused")]
IDS = [f"{cls.__name__}-{impl}" for cls, impl in CASES]
NAMES = ("h0.mlp.c_fc.weight", "h0.mlp.c_fc.bias")  # names Adam-mini's GPT-2 rules know


def params(seed: int = 0) -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [nn.Parameter(torch.randn(8, 5, generator=gen)), nn.Parameter(torch.randn(8, generator=gen))]


def make(cls, impl: str, ps, **kwargs) -> torch.optim.Optimizer:
    kwargs = dict(lr=1e-2, weight_decay=0.1, **kwargs)
    if cls is AdamMini:
        return AdamMini(list(zip(NAMES, ps)), n_head=1, **kwargs)
    return cls(ps, **IMPLEMENTATIONS.get(impl, {}), **kwargs)


def grads(step: int, ps, bad: float | None = None) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    for p in ps:
        p.grad = torch.randn(p.shape, generator=gen)
    if bad is not None:
        ps[0].grad[0, :3] = bad


def run(opt, ps, steps: int, start: int = 0) -> None:
    for k in range(start, start + steps):
        grads(k, ps)
        opt.step()


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    for x, y in zip(a, b):
        torch.testing.assert_close(x.detach(), y.detach(), rtol=1e-6, atol=1e-7, equal_nan=True)


@pytest.mark.parametrize("cls, impl", CASES, ids=IDS)
def test_a_copy_or_a_pickle_steps_as_the_original(cls, impl):
    # AdamMini's partition used to be lost in both (AttributeError '_blocks' at the next step)
    ps = params()
    opt = make(cls, impl, ps)
    run(opt, ps, 2)
    for clone in (copy.deepcopy((opt, ps)), pickle.loads(pickle.dumps((opt, ps)))):
        other, other_ps = clone
        assert [q is not p for q, p in zip(other.param_groups[0]["params"], ps)]
        run(other, other_ps, 2, start=2)
    run(opt, ps, 2, start=2)
    assert_same(ps, other_ps)


@pytest.mark.parametrize("cls", [AdamS, Lion])
@pytest.mark.parametrize("first, second", [("loop", "fused"), ("fused", "foreach"), ("foreach", "loop")])
def test_a_state_dict_carries_over_between_implementations(cls, first, second):
    a, b = params(), params()
    opt_a, opt_b = make(cls, first, a), make(cls, first, b)
    run(opt_a, a, 3)
    run(opt_b, b, 3)
    moved = make(cls, second, b)
    moved.load_state_dict(opt_b.state_dict())
    run(opt_a, a, 2, start=3)
    run(moved, b, 2, start=3)
    assert_same(a, b)


@pytest.mark.parametrize("cls, impl", CASES, ids=IDS)
def test_a_group_added_later_is_stepped_with_its_own_values(cls, impl):
    ps, extra = params(), nn.Parameter(torch.ones(4, 3))
    opt = make(cls, impl, ps)
    run(opt, ps, 1)
    group = {"params": [("h1.mlp.c_proj.weight", extra)] if cls is AdamMini else [extra], "lr": 0.5}
    opt.add_param_group(group)
    assert opt.param_groups[-1]["lr"] == 0.5 and opt.param_groups[-1]["weight_decay"] == 0.1  # the defaults fill in
    grads(1, ps)
    extra.grad = torch.ones(4, 3)
    opt.step()
    assert not torch.equal(extra.detach(), torch.ones(4, 3)) and opt.state[extra]


def test_adam_mini_refuses_a_group_without_names_and_keeps_its_groups():
    # it used to accept plain tensors, then step() died with a KeyError
    ps = params()
    opt = make(AdamMini, "default", ps)
    with pytest.raises(ValueError, match="AdamMini needs parameter names"):
        opt.add_param_group({"params": [nn.Parameter(torch.ones(3))]})
    assert len(opt.param_groups) == 1
    run(opt, ps, 1)


@pytest.mark.parametrize("cls, impl", CASES, ids=IDS)
def test_hooks_and_a_closure_run_as_for_any_optimizer(cls, impl):
    ps = params()
    opt = make(cls, impl, ps)
    called = []
    opt.register_step_pre_hook(lambda o, args, kwargs: called.append("pre"))
    opt.register_step_post_hook(lambda o, args, kwargs: called.append("post"))

    def closure():
        grads(0, ps)
        called.append("closure")
        return torch.tensor(3.0)

    assert opt.step(closure).item() == 3.0
    assert called == ["pre", "closure", "post"]


@pytest.mark.parametrize("cls, impl", CASES, ids=IDS)
def test_one_cycle_lr_cycles_the_lr_and_beta1_as_for_adamw(cls, impl):
    ps, ref_ps = params(), params()
    opt, ref = make(cls, impl, ps), torch.optim.AdamW(ref_ps, lr=1e-2, weight_decay=0.1)
    scheds = [torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=6, cycle_momentum=True,
                                                   base_momentum=0.85, max_momentum=0.95) for o in (opt, ref)]
    for k in range(5):
        grads(k, ps)
        opt.step()
        for s in scheds:
            s.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(ref.param_groups[0]["lr"])
        assert opt.param_groups[0]["betas"][0] == pytest.approx(ref.param_groups[0]["betas"][0])


@pytest.mark.parametrize("cls, impl", CASES, ids=IDS)
def test_grad_scaler_skips_a_step_with_an_infinite_gradient(cls, impl):
    ps = params()
    opt = make(cls, impl, ps)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    run(opt, ps, 1)
    before = [p.detach().clone() for p in ps], copy.deepcopy(opt.state_dict()["state"])
    loss = sum((p * p).sum() for p in ps)
    scaler.scale(loss).backward()
    ps[0].grad[0, 0] = float("inf")
    scaler.step(opt)
    scaler.update()
    assert_same(before[0], ps)
    assert scaler.get_scale() == 2.0**3  # halved, as after any overflow
    for key, state in opt.state_dict()["state"].items():
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, before[1][key][name]), name


@pytest.mark.parametrize("cls", [AdamS, Lion, torch.optim.AdamW])
def test_zero_redundancy_optimizer_shards_them_and_steps_as_one(cls, tmp_path):
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        ps, ref_ps = params(), params()
        zero = ZeroRedundancyOptimizer(ps, optimizer_class=cls, lr=1e-2, weight_decay=0.1)
        ref = cls(ref_ps, lr=1e-2, weight_decay=0.1)
        run(zero, ps, 3)
        run(ref, ref_ps, 3)
        assert_same(ps, ref_ps)
        zero.consolidate_state_dict(0)
        assert zero.state_dict()["state"]
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # (torch.compile: seconds a case)
@pytest.mark.parametrize("cls", [AdamS, Lion, AdamMini])
def test_a_compiled_step_steps_as_the_eager_one(cls):
    ps, ref_ps = params(), params()
    opt, ref = make(cls, "foreach", ps), make(cls, "foreach", ref_ps)
    step = torch.compile(opt.step)
    for k in range(3):
        grads(k, ps)
        step()
        grads(k, ref_ps)
        ref.step()
    assert_same(ps, ref_ps)


@pytest.mark.parametrize("cls", [AdamS, Lion])
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_every_implementation_meets_a_non_finite_gradient_as_the_loop_does(cls, bad):
    # fused Lion on a CPU used to turn its momentum NaN one step after an infinite gradient, where the loop, the
    # foreach path and lion-pytorch keep it infinite; from then on the parameters parted too
    runs = {}
    for impl in IMPLEMENTATIONS:
        ps = params()
        opt = make(cls, impl, ps)
        for k in range(4):
            grads(k, ps, bad if k == 1 else None)
            opt.step()
        runs[impl] = [*ps, *(opt.state[p]["exp_avg"] for p in ps)]
    for impl in ("foreach", "fused"):
        assert_same(runs["loop"], runs[impl])


def test_lion_meets_an_infinite_gradient_as_lion_pytorch_does():
    lion_pytorch = pytest.importorskip("lion_pytorch")
    ps, ref_ps = params(), params()
    opt = make(Lion, "fused", ps, betas=(0.9, 0.99))
    ref = lion_pytorch.Lion(ref_ps, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.99))
    for k in range(4):
        for p_set, o in ((ps, opt), (ref_ps, ref)):
            grads(k, p_set, float("inf") if k == 1 else None)
            o.step()
    assert_same(ps, ref_ps)
    assert_same([opt.state[p]["exp_avg"] for p in ps], [ref.state[p]["exp_avg"] for p in ref_ps])
