"""Optimizer library tests: closed forms, reference packages, and one registry-wide list.

References are independent of our code: hand-derived formulas, torch.optim, the published
lion-pytorch and adam-mini packages.
"""

import copy
import math

import pytest
import torch
from adams_optim import OPTIMIZERS, AdamMini, AdamS, Lion, build_optimizer, hyperparameters, state_bytes
from adams_optim.adam_mini import partition
from torch import nn

IMPLS = {"loop": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}


@pytest.fixture
def compiled_on_cpu(monkeypatch):
    """The torch.compile kernel (what fused=True runs on CUDA) instead of the C++ one on CPU."""
    from adams_optim._momentum_only import MomentumOnlyOptimizer

    monkeypatch.setattr(MomentumOnlyOptimizer, "_compiled_on_cpu", True)


# --- AdamS closed forms ---------------------------------------------------------------------

def adams_by_hand(p0, grads, lr, b1, b2, eps, wd, bias_correction):
    """AdamS on one scalar, written out from the paper with plain floats."""
    p, m = p0, 0.0
    for t, g in enumerate(grads, start=1):
        bc = 1 - b1**t if bias_correction else 1.0
        p = p * (1 - lr * wd)
        v = b2 * (m / bc) ** 2 + (1 - b2) * g * g
        m = b1 * m + (1 - b1) * g
        p = p - lr * (m / bc) / (math.sqrt(v) + eps)
    return p, m


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adams_closed_form_steps_1_and_2(impl, bias_correction, wd):
    p0 = [1.0, -2.0, 0.5]
    g1 = [0.5, 0.01, -3.0]
    g2 = [-0.3, 0.02, -1.0]
    lr, b1, b2, eps = 0.01, 0.9, 0.95, 1e-8
    p = nn.Parameter(torch.tensor(p0, dtype=torch.float64 if impl != "fused" else torch.float32))
    opt = AdamS([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, bias_correction=bias_correction, **IMPLS[impl])
    for step, grads in enumerate((g1, g2), start=1):
        p.grad = torch.tensor(grads, dtype=p.dtype)
        opt.step()
        for i in range(3):
            want_p, want_m = adams_by_hand(p0[i], [g1[i], g2[i]][:step], lr, b1, b2, eps, wd, bias_correction)
            assert p[i].item() == pytest.approx(want_p, rel=1e-6, abs=1e-7)
            assert opt.state[p]["exp_avg"][i].item() == pytest.approx(want_m, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("bias_correction, factor", [(True, 1 / math.sqrt(0.05)), (False, 0.1 / math.sqrt(0.05))])
def test_adams_first_step_size(bias_correction, factor):
    # 4.47·lr·sign(g) with bias correction, 0.447·lr without, at β = (0.9, 0.95)
    p = nn.Parameter(torch.zeros(4, dtype=torch.float64))
    p.grad = torch.tensor([3.0, -0.001, 1e3, -7.0], dtype=torch.float64)
    AdamS([p], lr=1e-3, eps=0.0, weight_decay=0.0, bias_correction=bias_correction).step()
    torch.testing.assert_close(p.detach(), -1e-3 * factor * p.grad.sign(), rtol=1e-12, atol=0)
    assert round(factor, 3) in (4.472, 0.447)


# --- the three implementations agree ----------------------------------------------------------

SHAPES = [(7, 5), (13,), (64, 32), (1,), (3, 4, 5), (260, 256)]  # the last one is big enough for a fused kernel


def run_steps(make, dtype, n=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    params = [nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in SHAPES]
    opt = make(params)
    for _ in range(n):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(dtype)
        opt.step()
    return params, opt


@pytest.mark.parametrize("cls", [AdamS, Lion])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_loop_foreach_fused_agree(cls, dtype, monkeypatch):
    from adams_optim import _cpu_fused
    from adams_optim._momentum_only import MomentumOnlyOptimizer

    assert _cpu_fused.kernels() is not None, "the C++ kernels should build here (a compiler and ninja are installed)"
    results = {name: run_steps(lambda ps, kw=kw: cls(ps, lr=1e-2, weight_decay=0.1, **kw), dtype) for name, kw in IMPLS.items()}
    monkeypatch.setattr(MomentumOnlyOptimizer, "_compiled_on_cpu", True)  # and the torch.compile kernel (CUDA's)
    results["compiled"] = run_steps(lambda ps: cls(ps, lr=1e-2, weight_decay=0.1, fused=True), dtype)
    ref_params, ref_opt = results["loop"]
    for name in ("foreach", "fused", "compiled"):
        params, opt = results[name]
        for p, q in zip(ref_params, params):
            assert q.dtype == dtype
            for ours, ref in ((q, p), (opt.state[q]["exp_avg"], ref_opt.state[p]["exp_avg"])):
                if dtype == torch.float32:
                    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
                else:
                    # fp32 math in every path but with ops in different orders: a one-ulp fp32
                    # difference can round to a bf16 ulp and carry into later steps, so bf16 agrees
                    # to a couple of bf16 ulps (2^-8) at the tensor's scale
                    scale = ref.float().abs().max().item()
                    torch.testing.assert_close(ours.float(), ref.float(), rtol=2**-7, atol=2**-7 * scale)


@pytest.mark.parametrize("betas", [(0.9, 0.95), (0.9, 0.999), (0.5, 0.0), (0.0, 0.5)])
@pytest.mark.parametrize("eps", [1e-8, 0.0])
def test_fused_cpu_adams_matches_the_formula_in_float64(betas, eps):
    # The C++ kernel folds lr, the bias correction, beta2 and eps into three constants (dividing by
    # sqrt(1 - beta2)); check it against the paper's formula in float64 at betas far from the default,
    # over gradients spanning nine decades, at steps 1-5 where the bias correction is largest.
    from adams_optim import _cpu_fused

    assert _cpu_fused.kernels() is not None, "the C++ kernels should build here (a compiler and ninja are installed)"
    gen = torch.Generator().manual_seed(0)
    n, lr, wd = 4099, 1e-2, 0.1  # vector body and scalar tail
    p = nn.Parameter(torch.randn(n, generator=gen))
    opt = AdamS([p], lr=lr, betas=betas, eps=eps, weight_decay=wd, fused=True)
    b1, b2 = betas
    for t in range(1, 6):  # each step from the kernel's own fp32 state, so that errors do not pile up
        x = p.detach().double().clone()
        m = opt.state[p]["exp_avg"].double() if t > 1 else torch.zeros(n, dtype=torch.float64)
        g = torch.randn(n, generator=gen) * 10.0 ** (torch.rand(n, generator=gen) * 9 - 6)
        p.grad = g
        opt.step()
        bc = 1 - b1**t
        x = x * (1 - lr * wd)
        v = b2 * (m / bc) ** 2 + (1 - b2) * g.double() ** 2
        terms = m.abs() + g.double().abs()  # m + (1 - b1)(g - m) in fp32 rounds relative to these, not to its result
        m = b1 * m + (1 - b1) * g.double()
        x = x - lr * (m / bc) / (v.sqrt() + eps)
        torch.testing.assert_close(p.detach().double(), x, rtol=1e-5, atol=1e-6)
        assert ((opt.state[p]["exp_avg"].double() - m).abs() <= 1e-6 * terms).all(), f"momentum off at step {t}"


def test_fused_cpu_bf16_rounds_as_torch_does():
    # On AVX2 and AVX-512 the kernels load and store bf16 by hand (even- and odd-indexed halves, their own
    # rounding). p + g through the no-math kernel must be fp32's sum rounded by torch, bit for bit:
    # over sixty decades, exact ties (both ways), overflow, inf, a zero sum, across body and tail.
    from adams_optim import _cpu_fused

    assert _cpu_fused.kernels() is not None, "the C++ kernels should build here (a compiler and ninja are installed)"
    gen = torch.Generator().manual_seed(0)
    n = (1 << 16) + 13
    scale = 10.0 ** (torch.rand(n, generator=gen) * 60 - 30)
    a = (torch.randn(n, generator=gen) * scale).to(torch.bfloat16)
    b = (torch.randn(n, generator=gen) * scale).to(torch.bfloat16)
    _, e = torch.frexp(a[:2000].float())  # |a| = f 2^e, f in [0.5, 1): half a bf16 ulp of a is 2^(e - 9)
    b[:2000] = (torch.sign(a[:2000].float()) * torch.ldexp(torch.ones(2000), e - 9)).to(torch.bfloat16)
    b[2000:2100] = float("nan")
    a[2100:2200] = float("inf")
    a[2200:2300], b[2200:2300] = 3.38e38, 3.38e38  # the sum overflows bf16
    b[2300:2400] = -a[2300:2400]
    want = (a.float() + b.float()).to(torch.bfloat16)
    rounded_up = want[:2000] != a[:2000]
    assert 500 < rounded_up.sum() < 1500, "ties should round both ways (to even)"
    p, m = a.clone(), a.clone()
    from scripts.bench_optim import floor_kernels

    floor_kernels().no_math_step([p], [b], [m])
    for got in (p, m):
        assert torch.equal(got.isnan(), want.isnan())
        same = got.view(torch.int16) == want.view(torch.int16)
        assert (same | want.isnan()).all(), f"{(~same & ~want.isnan()).sum().item()} elements rounded unlike torch"


@pytest.mark.parametrize("cls", [AdamS, Lion])
def test_fused_cpu_bf16_nans_as_the_reference(cls):
    # torch's NaN check is left out of the kernels' bf16 rounding, and Lion's sign is built from two
    # comparisons: NaN gradients must come out where the reference update puts them (a NaN momentum;
    # a NaN parameter for AdamS, while Lion's sign(NaN) is 0, as torch.sign's), and nowhere else.
    from adams_optim import _cpu_fused

    assert _cpu_fused.kernels() is not None, "the C++ kernels should build here (a compiler and ninja are installed)"
    gen = torch.Generator().manual_seed(0)
    n = 1000
    g = torch.randn(n, generator=gen).to(torch.bfloat16)
    bad = torch.rand(n, generator=gen) < 0.1
    g[bad] = float("nan")
    p0 = torch.randn(n, generator=gen).to(torch.bfloat16)
    out = {}
    for name in ("fused", "loop"):
        p = nn.Parameter(p0.clone())
        p.grad = g.clone()
        opt = cls([p], lr=1e-3, weight_decay=0.1, **IMPLS[name])
        opt.step()
        out[name] = p.detach(), opt.state[p]["exp_avg"]
    for got, ref in zip(out["fused"], out["loop"]):
        torch.testing.assert_close(got.float(), ref.float(), rtol=2**-7, atol=2**-7, equal_nan=True)
    fused_p, fused_m = out["fused"]
    assert torch.equal(fused_m.isnan(), bad)
    assert torch.equal(fused_p.isnan(), bad if cls is AdamS else torch.zeros_like(bad))


def test_low_precision_uses_fp32_math():
    # lr·update far below bf16's resolution at 1.0 must still change nothing *wrongly*:
    # the result equals the fp32 computation rounded once to bf16.
    for kw in IMPLS.values():
        p32 = torch.full((8,), 1.0) + torch.arange(8) * 0.01
        p = nn.Parameter(p32.to(torch.bfloat16))
        p.grad = torch.linspace(-1, 1, 8).to(torch.bfloat16)
        ref = nn.Parameter(p.detach().float().clone())
        ref.grad = p.grad.float()
        AdamS([p], lr=0.05, **kw).step()
        AdamS([ref], lr=0.05, foreach=False).step()
        torch.testing.assert_close(p.detach(), ref.detach().to(torch.bfloat16), rtol=0, atol=0)


def test_fused_does_not_recompile_when_lr_changes(compiled_on_cpu):
    import torch._dynamo.utils as dutils

    params = [nn.Parameter(torch.randn(300, 300)), nn.Parameter(torch.randn(5))]
    opt = AdamS(params, fused=True)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    before = dutils.counters["stats"]["unique_graphs"]
    assert before > 0, "the 300x300 tensor should have gone through a compiled kernel"
    for lr in (1e-3, 2e-3, 5e-4):
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    assert dutils.counters["stats"]["unique_graphs"] == before


# --- the reference packages ------------------------------------------------------------------

def test_adamw_is_torch_adamw():
    assert OPTIMIZERS["adamw"].factory is torch.optim.AdamW
    opt = build_optimizer("adamw", nn.Linear(4, 4), lr=1e-3)
    assert type(opt) is torch.optim.AdamW
    assert opt.defaults["fused"] is True  # fused AdamW runs on CPU too


@pytest.mark.parametrize("impl", IMPLS)
def test_lion_matches_lion_pytorch(impl):
    from lion_pytorch import Lion as ReferenceLion

    ours = run_steps(lambda ps: Lion(ps, lr=3e-3, betas=(0.95, 0.98), weight_decay=0.5, **IMPLS[impl]), torch.float32, n=10)[0]
    theirs = run_steps(lambda ps: ReferenceLion(ps, lr=3e-3, betas=(0.95, 0.98), weight_decay=0.5), torch.float32, n=10)[0]
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


class LlamaNamed(nn.Module):
    """A tiny transformer-shaped module using the names the official adam-mini package knows."""

    def __init__(self, vocab=11, dim=8, n_heads=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.q_proj = nn.Linear(dim, dim, bias=True)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.n_heads = n_heads

    def forward(self, idx):
        x = self.embed(idx)
        B, T, C = x.shape
        q, k, v = (f(x).view(B, T, self.n_heads, -1).transpose(1, 2) for f in (self.q_proj, self.k_proj, self.v_proj))
        x = x + self.o_proj(nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C))
        x = x + self.mlp(self.norm(x))
        return self.output(x)


def test_adam_mini_matches_official_package():
    from adam_mini import Adam_mini

    torch.manual_seed(0)
    ref_model = LlamaNamed()
    our_model = copy.deepcopy(ref_model)
    hp = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    ref = Adam_mini(ref_model.named_parameters(), dim=8, n_heads=2, verbose=False, **hp)
    # the package decays every tensor whose name lacks norm/ln/bias; so do these groups
    named = list(our_model.named_parameters())
    no_decay = [(n, p) for n, p in named if any(s in n for s in ("norm", "ln", "bias"))]
    decay = [(n, p) for n, p in named if (n, p) not in no_decay]
    ours = AdamMini([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], n_head=2, **hp)
    assert {n: r for n, r, _ in ours.partition()}["q_proj.weight"] == "head"
    gen = torch.Generator().manual_seed(1)
    for _ in range(8):
        idx = torch.randint(0, 11, (3, 6), generator=gen)
        for model, opt in ((ref_model, ref), (our_model, ours)):
            opt.zero_grad()
            nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten()).backward()
            opt.step()
        for (name, p), q in zip(ref_model.named_parameters(), our_model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)


def test_adam_mini_gpt2_fused_qkv_partition_by_hand():
    C, n_head = 8, 2
    hs = C // n_head
    w = nn.Parameter(torch.zeros(3 * C, C))
    blocks = partition([("h.0.attn.c_attn.weight", w)], n_head=n_head)
    assert blocks[0].rule == "qkv" and blocks[0].n_blocks == 2 * n_head + C
    g = torch.randn(3 * C, C)
    w.grad = g
    opt = AdamMini([("h.0.attn.c_attn.weight", w)], n_head=n_head, betas=(0.9, 0.5))
    opt.step()
    g2 = g * g
    want = [g2[h * hs:(h + 1) * hs].mean() for h in range(n_head)]            # Q heads
    want += [g2[C + h * hs:C + (h + 1) * hs].mean() for h in range(n_head)]   # K heads
    want += [g2[2 * C + r].mean() for r in range(C)]                         # V neurons
    torch.testing.assert_close(opt.state[w]["exp_avg_sq"], 0.5 * torch.stack(want))


def test_adam_mini_partition_of_gpt2_names():
    names = {
        "transformer.wte.weight": ((50, 8), "row"), "transformer.wpe.weight": ((16, 8), "whole"),
        "transformer.h.0.ln_1.weight": ((8,), "whole"), "transformer.h.0.ln_1.bias": ((8,), "adam"),
        "transformer.h.0.attn.c_attn.weight": ((24, 8), "qkv"), "transformer.h.0.attn.c_attn.bias": ((24,), "adam"),
        "transformer.h.0.attn.c_proj.weight": ((8, 8), "row"), "transformer.h.0.mlp.c_fc.weight": ((32, 8), "row"),
        "transformer.h.0.mlp.c_proj.weight": ((8, 32), "row"), "transformer.ln_f.weight": ((8,), "whole"),
        "lm_head.weight": ((50, 8), "row"),
    }
    blocks = partition([(n, torch.empty(s)) for n, (s, _) in names.items()], n_head=2)
    assert {b.name: b.rule for b in blocks} == {n: r for n, (_, r) in names.items()}


def test_adam_mini_unknown_parameter_is_an_error_or_an_explicit_logged_default(caplog):
    with pytest.raises(ValueError, match="cannot classify parameter 'mystery'"):
        AdamMini([("mystery", nn.Parameter(torch.zeros(3, 3)))])
    with caplog.at_level("WARNING"):
        opt = AdamMini([("mystery", nn.Parameter(torch.zeros(3, 3)))], default_rule="whole")
    assert opt.partition() == [("mystery", "whole", 1)]
    assert "mystery" in caplog.text


# --- registry-wide: every optimizer gets every check below ----------------------------------------
# Each check is a plain function of the optimizer's name, parametrized over the registry, so that
# test_a_new_optimizer_is_one_file_and_one_entry can run all of them on an optimizer it registers.

# learning rates that suit each optimizer on the toy problems below (a new one gets the default)
TOY_LR = {"adamw": 0.05, "adams": 0.05, "lion": 0.02, "adam_mini": 0.05, "sgd": 0.002, "adagrad": 0.3, "rmsprop": 0.01}


def toy_kwargs(name):
    kw = {"lr": TOY_LR.get(name, 0.05)}
    if "default_rule" in hyperparameters(name):
        kw["default_rule"] = "adam"  # the toy models' names are not GPT-2's
    return kw


class Tiny(nn.Module):
    """GPT-2-named tiny model: an embedding, a linear with bias, a norm."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(10, 6)
        self.c_fc = nn.Linear(6, 6)
        self.ln_f = nn.LayerNorm(6)
        self.unused = nn.Linear(6, 6)  # never receives a gradient

    def forward(self, idx):
        return self.ln_f(self.c_fc(self.wte(idx))) @ self.wte.weight.T


def test_registry_errors_name_the_choices():
    with pytest.raises(ValueError, match="Unknown optimizer 'adamz'; choose one of: adamw, adams"):
        build_optimizer("adamz", Tiny())
    with pytest.raises(ValueError, match="does not take betas"):
        build_optimizer("sgd", Tiny(), betas=(0.9, 0.95))
    with pytest.raises(ValueError, match="has no 'fused' implementation"):
        build_optimizer("adam_mini", Tiny(), implementation="fused", default_rule="adam")


def check_implementations_are_what_the_entry_says(name):
    entry = OPTIMIZERS[name]
    for impl in entry.implementations:
        opt = build_optimizer(name, Tiny(), implementation=impl, **toy_kwargs(name))
        if impl != "loop":
            assert opt.defaults[impl] is True, (name, impl)
        else:
            assert opt.defaults["foreach"] is False and opt.defaults.get("fused") in (None, False)
    build_optimizer(name, Tiny(), implementation="auto", **toy_kwargs(name))


def check_build_optimizer_groups(name):
    model = Tiny()
    opt = build_optimizer(name, model, weight_decay=0.1, **toy_kwargs(name))
    decayed, not_decayed = opt.param_groups
    assert decayed["weight_decay"] == 0.1 and not_decayed["weight_decay"] == 0.0
    assert {id(p) for p in decayed["params"]} == {id(p) for p in model.parameters() if p.dim() >= 2}
    assert {id(p) for p in not_decayed["params"]} == {id(p) for p in model.parameters() if p.dim() < 2}


def train_tiny(model, opt, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, 10, (4, 5), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def check_state_dict_round_trip_is_bit_identical(name):
    torch.manual_seed(0)
    model = Tiny()
    opt = build_optimizer(name, model, weight_decay=0.1, **toy_kwargs(name))
    train_tiny(model, opt, 3)
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    want = train_tiny(model, opt, 4, seed=1)

    fresh = Tiny()
    fresh.load_state_dict(saved_model)
    fresh_opt = build_optimizer(name, fresh, weight_decay=0.1, **toy_kwargs(name))
    fresh_opt.load_state_dict(saved_opt)
    assert train_tiny(fresh, fresh_opt, 4, seed=1) == want
    for p, q in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(p, q)


def check_params_without_grad_are_untouched(name):
    torch.manual_seed(0)
    model = Tiny()
    before = model.unused.weight.detach().clone()
    opt = build_optimizer(name, model, weight_decay=0.1, **toy_kwargs(name))
    train_tiny(model, opt, 3)
    assert torch.equal(model.unused.weight, before)
    # some torch optimizers (Adagrad) create state eagerly; it must still be untouched zeros
    for value in opt.state.get(model.unused.weight, {}).values():
        assert not isinstance(value, torch.Tensor) or not value.any()


class Problem(nn.Module):
    def __init__(self, start):
        super().__init__()
        self.x = nn.Parameter(torch.tensor(start, dtype=torch.float64))


def quadratic(x):
    return 0.5 * (torch.arange(1, x.numel() + 1, dtype=x.dtype) * x * x).sum()


def rosenbrock(x):
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


PROBLEMS = [(quadratic, [1.0, -1.0, 0.5, 2.0], 300, 1e-2), (rosenbrock, [-1.2, 1.0], 2000, 0.1)]


def check_decreases(name, f, start, steps, factor):
    model = Problem(start)
    kw = toy_kwargs(name)
    if f is rosenbrock and name == "sgd":
        kw["lr"] = 2e-4  # curvature up to ~1000 near the start
    params = [("x", model.x)] if OPTIMIZERS[name].named else model.parameters()
    opt = OPTIMIZERS[name].factory(params, **kw)
    initial = f(model.x).item()
    for _ in range(steps):
        opt.zero_grad()
        loss = f(model.x)
        loss.backward()
        opt.step()
    assert math.isfinite(f(model.x).item())
    assert f(model.x).item() < factor * initial, f"{name}: {initial:.3g} -> {f(model.x).item():.3g}"


REGISTRY_CHECKS = (check_implementations_are_what_the_entry_says, check_build_optimizer_groups,
                   check_state_dict_round_trip_is_bit_identical, check_params_without_grad_are_untouched)


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("check", REGISTRY_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_registry_wide(check, name):
    check(name)


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("f, start, steps, factor", PROBLEMS, ids=["quadratic", "rosenbrock"])
def test_decreases_quadratic_and_rosenbrock(name, f, start, steps, factor):
    check_decreases(name, f, start, steps, factor)


class SignMomentum(torch.optim.Optimizer):
    """A toy optimizer in the shape a new one would have: momentum, then a step along its sign."""

    def __init__(self, params, lr=1e-3, beta=0.9, weight_decay=0.0, *, foreach=None):
        super().__init__(params, dict(lr=lr, beta=beta, weight_decay=weight_decay, foreach=foreach))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                m.lerp_(p.grad, 1 - group["beta"])
                p.mul_(1 - group["lr"] * group["weight_decay"]).add_(m.sign(), alpha=-group["lr"])


@pytest.mark.parametrize("module", ["optim", "train"])
def test_importing_leaves_torch_distributed_tensor_and_fsdp_unimported(module):
    # they cost ~45% of `import optim` and a third of `train.py --help`; the optimizers recognise a
    # DTensor without them (is_dtensor), train.py imports FSDP when it shards, and the FSDP tests check
    # that both still work
    import subprocess
    import sys
    from pathlib import Path

    heavy = ("torch.distributed.tensor", "torch.distributed.fsdp", "torch.distributed.checkpoint")
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr[-2000:]


def test_a_new_optimizer_is_one_file_and_one_entry(monkeypatch, data_dir, tmp_path):
    from adams_optim import Entry

    import train
    from tests.helpers import tiny_config

    monkeypatch.setitem(OPTIMIZERS, "toy", Entry(SignMomentum, ("loop", "foreach")))
    for check in REGISTRY_CHECKS:
        check("toy")
    for problem in PROBLEMS:
        check_decreases("toy", *problem)
    summary = train.main(tiny_config(data_dir, tmp_path / "toy", optimizer="toy", learning_rate=3e-3, min_lr=3e-4))
    assert summary["val_loss"] < 5.0  # from ln(256) = 5.5 at the start


def test_adams_and_lion_hold_half_of_adamws_state():
    sizes = {}
    for name in ("adamw", "adams", "lion", "adam_mini"):
        model = Tiny()
        opt = build_optimizer(name, model, **toy_kwargs(name))
        train_tiny(model, opt, 1)
        sizes[name] = state_bytes(opt)
    n_trained = sum(p.numel() for n, p in Tiny().named_parameters() if not n.startswith("unused"))
    assert sizes["adamw"] == 2 * 4 * n_trained
    assert sizes["adams"] * 2 == sizes["adamw"]
    assert sizes["lion"] * 2 == sizes["adamw"]
    assert sizes["adams"] < sizes["adam_mini"] < sizes["adamw"]


# --- validation ----------------------------------------------------------------------------------

BAD_VALUES = [
    (dict(lr=-1e-3), "learning rate"), (dict(betas=(1.0, 0.9)), "beta parameter at index 0"),
    (dict(betas=(0.9, -0.1)), "beta parameter at index 1"), (dict(weight_decay=-0.1), "weight_decay"),
    (dict(eps=-1e-8), "epsilon"),
]


@pytest.mark.parametrize("cls, bad, match", [
    (cls, bad, match) for cls in (AdamS, Lion, AdamMini) for bad, match in BAD_VALUES if not (cls is Lion and "eps" in bad)
])
def test_invalid_hyperparameters_raise_value_error(cls, bad, match):
    params = [("wte.weight", nn.Parameter(torch.zeros(2, 2)))] if cls is AdamMini else [nn.Parameter(torch.zeros(2))]
    with pytest.raises(ValueError, match=match):
        cls(params, **bad)


def test_step_returns_closure_loss():
    p = nn.Parameter(torch.ones(3))
    opt = AdamS([p])

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 3.0
    assert p.grad is not None and torch.all(p < 1)


# --- the per-coordinate step bound ---------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def one_step_from(m, g, b1, b2):
    """|Δp|/lr of one AdamS step (no bias correction, no decay, ε = 0) from momentum m and grad g."""
    p = nn.Parameter(torch.zeros(1, dtype=torch.float64))
    p.grad = torch.tensor([g], dtype=torch.float64)
    opt = AdamS([p], lr=1.0, betas=(b1, b2), eps=0.0, weight_decay=0.0, bias_correction=False, foreach=False)
    opt.state[p] = {"step": 7, "exp_avg": torch.tensor([m], dtype=torch.float64)}
    opt.step()
    return abs(p.item())


def tight_bound(b1, b2):
    return math.sqrt(b1**2 / b2 + (1 - b1) ** 2 / (1 - b2))


nonzero = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False).filter(lambda x: abs(x) > 1e-4)


@settings(max_examples=400, deadline=None)
@given(m=nonzero, g=nonzero, b1=st.floats(0.0, 0.999), b2=st.floats(0.001, 0.999))
def test_adams_step_never_exceeds_the_tight_bound(m, g, b1, b2):
    assert one_step_from(m, g, b1, b2) <= tight_bound(b1, b2) * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(g=nonzero, b1=st.floats(0.01, 0.999), b2=st.floats(0.001, 0.999))
def test_adams_tight_bound_is_attained(g, b1, b2):
    m = g * b1 * (1 - b2) / (b2 * (1 - b1))  # the Cauchy-Schwarz equality case
    assert one_step_from(m, g, b1, b2) == pytest.approx(tight_bound(b1, b2), rel=1e-9)


def test_papers_lemma_bound_is_violated():
    b1, b2 = 0.9, 0.95
    lemma = max(b1 / math.sqrt(b2), (1 - b1) / math.sqrt(1 - b2))
    assert lemma == pytest.approx(0.923, abs=1e-3)
    assert tight_bound(b1, b2) == pytest.approx(1.026, abs=1e-3)
    step = one_step_from(1.0, 1.0, b1, b2)  # m = g: a step of exactly lr
    assert step == pytest.approx(1.0, rel=1e-12) and step > lemma


@pytest.mark.parametrize("impl", IMPLS)
def test_torch_lr_schedulers_drive_adams(impl):
    p = nn.Parameter(torch.zeros(300, 300))  # large enough for the fused kernel
    opt = AdamS([p], lr=1.0, eps=0.0, weight_decay=0.0, bias_correction=False, **IMPLS[impl])
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5**step)
    for step in range(3):
        before = p.detach().clone()
        p.grad = torch.ones_like(p)
        opt.step()
        schedule.step()
        # gradient 1, no bias correction: m_t = 1 - 0.9^t = 0.1 * sum(0.9^k, k < t), and the step is
        # lr_t * m_t / sqrt(0.95 * m_{t-1}^2 + 0.05), with lr_t halving each step
        want = 0.5**step * (0.1 / math.sqrt(0.05) if step == 0 else
                            (0.1 * sum(0.9**k for k in range(step + 1))) /
                            math.sqrt(0.95 * (0.1 * sum(0.9**k for k in range(step))) ** 2 + 0.05))
        torch.testing.assert_close(before - p.detach(), torch.full_like(p, want), rtol=1e-5, atol=0)


def test_token_embeddings_are_found_by_role_not_by_shape():
    # width == vocab, so shape alone would also catch the square matrices and the norms
    from adams_optim.groups import token_embeddings

    from model import GPT, GPTConfig
    from model_llama import Llama, LlamaConfig

    gpt = GPT(GPTConfig(vocab_size=64, n_embd=64, n_head=2, n_layer=1, block_size=8))  # head tied to wte
    assert token_embeddings(gpt) & {n for n, _ in gpt.named_parameters()} == {"transformer.wte.weight"}
    llama = Llama(LlamaConfig(vocab_size=64, n_embd=64, n_head=2, n_layer=1, block_size=8, multiple_of=16))  # untied
    assert token_embeddings(llama) & {n for n, _ in llama.named_parameters()} == {"model.embed_tokens.weight",
                                                                                   "lm_head.weight"}


def test_embedding_lr_scale_scales_exactly_the_embeddings_step():
    from model import GPT, GPTConfig

    torch.manual_seed(0)
    base = GPT(GPTConfig(vocab_size=64, n_embd=32, n_head=2, n_layer=1, block_size=8))
    idx = torch.randint(0, 64, (2, 8))
    steps = {}
    for scale in (1.0, 2.5):
        model = copy.deepcopy(base)
        opt = build_optimizer("adams", model, lr=1e-2, weight_decay=0.1, embedding_lr_scale=scale)
        assert len(opt.param_groups) == (2 if scale == 1 else 3)
        model(idx, idx)[1].backward()
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt.step()
        steps[scale] = {n: before[n] - p.detach() for n, p in model.named_parameters()}
    for name, step in steps[2.5].items():  # lr and decoupled decay both scale with the group's lr
        factor = 2.5 if name == "transformer.wte.weight" else 1.0
        assert torch.allclose(step, factor * steps[1.0][name], rtol=1e-5, atol=1e-9), name
    with pytest.raises(ValueError, match="needs a model with token embeddings"):
        build_optimizer("adams", nn.Linear(3, 3), lr=1e-3, embedding_lr_scale=2.0)


# --- as a library: every value checked as the defaults are, all-or-nothing steps, what AdamW takes -----------


def _named(cls, params, **kwargs):
    """``cls`` over ``params`` (a list, or groups of dicts); Adam-mini gets (name, parameter) pairs."""
    if cls is not AdamMini:
        return cls(params, **kwargs)
    def named(ps):
        return [(f"h{i}.mlp.c_fc.{'weight' if p.dim() == 2 else 'bias'}", p) for i, p in enumerate(ps)]
    groups = params if isinstance(params[0], dict) else [{"params": params}]
    return cls([dict(g, params=named(g["params"])) for g in groups], n_head=1, **kwargs)


LIBRARY = [AdamS, Lion, AdamMini]


@pytest.mark.parametrize("cls", LIBRARY)
@pytest.mark.parametrize("override, match", [
    (dict(lr=-1e-3), "Invalid learning rate"), (dict(lr=float("nan")), "Invalid learning rate"),
    (dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1"), (dict(betas=(0.9,)), "Invalid betas"),
    (dict(weight_decay=float("inf")), "Invalid weight_decay"), (dict(lr=torch.tensor([1e-3, 2e-3])), "one real number"),
    (dict(lr=torch.tensor(-1.0)), "Invalid learning rate"), (dict(betas=(torch.tensor(1.5), 0.9)), "index 0"),
    (dict(lr="0.1"), "must be a number"),
])
def test_a_groups_own_values_are_checked_as_the_defaults_are(cls, override, match):
    w, b = nn.Parameter(torch.randn(3, 4)), nn.Parameter(torch.randn(3))
    with pytest.raises(ValueError, match=match):  # as a default
        _named(cls, [w, b], **override)
    with pytest.raises(ValueError, match=match):  # as one group's own value
        _named(cls, [{"params": [w]}, {"params": [b], **override}])
    opt = _named(cls, [w])
    with pytest.raises(ValueError, match=match):  # as a group added later
        opt.add_param_group({"params": [("h1.mlp.c_fc.bias", b)] if cls is AdamMini else [b], **override})
    assert len(opt.param_groups) == 1
    if cls is AdamS and "eps" not in override:
        with pytest.raises(ValueError, match="Invalid epsilon"):
            AdamS([{"params": [w], "eps": -1.0}])


@pytest.mark.parametrize("cls", LIBRARY)
def test_a_tensor_learning_rate_steps_as_its_float(cls):
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(3, 4))
    twin = nn.Parameter(w.detach().clone())
    a, b = _named(cls, [w], lr=torch.tensor(3e-2)), _named(cls, [twin], lr=3e-2)
    for _ in range(3):
        w.grad = torch.randn(3, 4)
        twin.grad = w.grad.clone()
        a.step()
        b.step()
    torch.testing.assert_close(w.detach(), twin.detach(), rtol=1e-6, atol=0)  # (the tensor's 3e-2 is a float32)


@pytest.mark.parametrize("cls", LIBRARY)
@pytest.mark.parametrize("bad", ["sparse", "shape"])
def test_a_step_that_fails_changes_no_parameter_and_no_state(cls, bad):
    torch.manual_seed(0)
    ws = [nn.Parameter(torch.randn(3, 4)) for _ in range(3)]
    opt = _named(cls, ws, lr=1e-2)
    for w in ws:
        w.grad = torch.randn(3, 4)
    opt.step()  # one good step, so there is state to keep
    before = copy.deepcopy((opt.state_dict(), [w.detach().clone() for w in ws]))
    if bad == "sparse":
        ws[2].grad = torch.randn(3, 4).to_sparse()
    else:  # (autograd never makes one; code that sets .grad.data by hand can)
        ws[2].grad.data = torch.randn(4, 3)
    with pytest.raises(RuntimeError, match="sparse gradients" if bad == "sparse" else "does not fit its parameter"):
        opt.step()
    state, params = opt.state_dict(), [w.detach() for w in ws]
    assert all(torch.equal(a, b) for a, b in zip(params, before[1]))
    assert [s["step"] for s in state["state"].values()] == [s["step"] for s in before[0]["state"].values()]
    assert all(torch.equal(state["state"][i]["exp_avg"], before[0]["state"][i]["exp_avg"]) for i in state["state"])


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("impl", ["auto", "loop", "foreach", "fused"])
def test_non_contiguous_parameters_and_gradients_step_as_contiguous_ones(name, impl):
    # what torch.optim.AdamW takes: a parameter that is a transposed view, a gradient with other strides
    if impl != "auto" and impl not in OPTIMIZERS[name].implementations:
        pytest.skip(f"{name} has no {impl} implementation")
    torch.manual_seed(0)
    model, twin = nn.ModuleDict(dict(c_fc=nn.Linear(4, 6))), nn.ModuleDict(dict(c_fc=nn.Linear(4, 6)))  # (Adam-mini's names)
    model.c_fc.weight = nn.Parameter(torch.randn(4, 6).t())  # non-contiguous, (6, 4)
    assert not model.c_fc.weight.is_contiguous()
    twin.load_state_dict(model.state_dict())
    a = build_optimizer(name, model, lr=1e-2, weight_decay=0.1, implementation=impl)
    b = build_optimizer(name, twin, lr=1e-2, weight_decay=0.1, implementation=impl)
    for _ in range(3):
        grad = torch.randn(4, 6)
        model.c_fc.weight.grad, twin.c_fc.weight.grad = grad.t(), grad.t().contiguous()  # (6, 4), other strides
        model.c_fc.bias.grad = twin.c_fc.bias.grad = torch.randn(6)
        a.step()
        b.step()
    torch.testing.assert_close(model.c_fc.weight.detach(), twin.c_fc.weight.detach(), rtol=1e-6, atol=1e-7)
