"""The CUDA paths, checked on a GPU: skipped (with the reason) on machines without one, like CI's.

    python -m pytest tests/test_cuda.py -v       # on a machine with a CUDA GPU

On CUDA, ``fused=True`` runs AdamS's and Lion's update as one Triton kernel launch over all
tensors (optim/_triton_fused.py), or through ``torch.compile`` where Triton is missing; on CPU the
same option runs a C++ kernel. These tests hold the CUDA kernels to
the hand-written closed form and to the for-loop implementation, and run train.py on the GPU.
"""

import math

import pytest
import torch
from adams_optim import AdamS, Lion, build_optimizer
from torch import nn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")

# big enough (>= 2**16 elements) for the compiled kernel, plus small ones for the foreach path
SHAPES = [(300, 260), (768, 768), (13,), (64, 32), (3, 4, 5)]


def adams_reference(p, grads, lr, b1, b2, eps, wd):
    """AdamS in float64 on the CPU, written from the paper's update rule (bias-corrected momentum)."""
    p, m = p.double().clone(), torch.zeros_like(p, dtype=torch.float64)
    for t, g in enumerate(grads, start=1):
        g = g.double()
        bc = 1 - b1**t
        p = p * (1 - lr * wd)
        v = b2 * (m / bc) ** 2 + (1 - b2) * g * g
        m = b1 * m + (1 - b1) * g
        p = p - lr * (m / bc) / (v.sqrt() + eps)
    return p, m


@pytest.mark.parametrize("impl", [dict(foreach=False), dict(foreach=True), dict(fused=True)], ids=["loop", "foreach", "fused"])
def test_adams_cuda_matches_float64_reference(impl):
    gen = torch.Generator().manual_seed(0)
    p0 = [torch.randn(s, generator=gen) for s in SHAPES]
    grads = [[torch.randn(s, generator=gen) for s in SHAPES] for _ in range(5)]
    params = [nn.Parameter(p.cuda()) for p in p0]
    opt = AdamS(params, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **impl)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.cuda()
        opt.step()
    for i, p in enumerate(params):
        want_p, want_m = adams_reference(p0[i], [g[i] for g in grads], 1e-2, 0.9, 0.95, 1e-8, 0.1)
        torch.testing.assert_close(p.detach().cpu().double(), want_p, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(opt.state[p]["exp_avg"].cpu().double(), want_m, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel", ["triton", "compiled"])
@pytest.mark.parametrize("cls", [AdamS, Lion])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_cuda_matches_loop_on_cpu(cls, dtype, kernel, monkeypatch):
    """The fused CUDA step (the Triton multi-tensor kernel, or torch.compile's kernels without it)
    against the eager for-loop on the CPU, same inputs, 6 steps."""
    if kernel == "compiled":
        monkeypatch.setattr(cls, "triton_kernel", None)
    def run(device, **kw):
        gen = torch.Generator().manual_seed(1)
        params = [nn.Parameter(torch.randn(s, generator=gen).to(dtype).to(device)) for s in SHAPES]
        opt = cls(params, lr=1e-2, weight_decay=0.1, **kw)
        for _ in range(6):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen).to(dtype).to(device)
            opt.step()
        return [p.detach().cpu().float() for p in params], [opt.state[p]["exp_avg"].cpu().float() for p in params]

    ref_p, ref_m = run("cpu", foreach=False)
    got_p, got_m = run("cuda", fused=True)
    for ours, ref in zip(got_p + got_m, ref_p + ref_m):
        if dtype == torch.float32:
            torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
        else:  # fp32 math rounded once to bf16 in both, ops in different orders: a couple of bf16 ulps
            torch.testing.assert_close(ours, ref, rtol=2**-7, atol=2**-7 * ref.abs().max().item())


def test_lion_cuda_first_step_is_sign_of_gradient():
    # Lion's first step with zero momentum: p <- p(1 - lr*wd) - lr*sign((1 - b1) g)
    p = nn.Parameter(torch.randn(512, 256, device="cuda"))
    p0 = p.detach().clone()
    p.grad = torch.randn_like(p)
    Lion([p], lr=1e-3, betas=(0.9, 0.99), weight_decay=0.5, fused=True).step()
    torch.testing.assert_close(p.detach(), p0 * (1 - 1e-3 * 0.5) - 1e-3 * p.grad.sign(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["adamw", "adams", "lion", "adam_mini"])
def test_train_step_on_cuda_lowers_the_loss(name):
    """A small GPT on the GPU with bf16 autocast: 30 steps on a fixed batch lower its loss."""
    from model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=4, n_embd=128, block_size=64, vocab_size=256)).cuda()
    opt = build_optimizer(name, model, lr=3e-3 if name != "lion" else 3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    x = torch.randint(0, 256, (8, 65), device="cuda")
    losses = []
    for _ in range(30):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = model(x[:, :-1], x[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.7 * losses[0], losses
