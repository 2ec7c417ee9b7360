"""The CUDA multi-tensor kernel (optim/_triton_fused.py), run on the CPU by Triton's interpreter.

    pip install triton && python -m pytest tests/test_triton_kernel.py

Triton is not part of the CPU install (it is large, and CPU torch does not need it), so this
skips where it is missing, as in CI; tests/test_cuda.py runs the same kernel on a GPU. The
interpreter (TRITON_INTERPRET=1, read when the kernel is defined) needs a fresh process.
"""

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="needs the triton package (pip install triton; the dev extra has it)")

CHECK = textwrap.dedent("""
    import torch
    from optim import _triton_fused as tf
    from optim.adams import AdamSStep
    from optim.lion import LionStep

    def adams_by_hand(p, g, m, lr, wd, b1, b2, eps, inv_bc):  # the paper's rule, float64
        v = b2 * (m * inv_bc) ** 2 + (1 - b2) * g * g
        m = b1 * m + (1 - b1) * g
        return p * (1 - lr * wd) - lr * (m * inv_bc) / (v.sqrt() + eps), m

    def lion_by_hand(p, g, m, lr, wd, b1, b2):
        return p * (1 - lr * wd) - lr * torch.sign(b1 * m + (1 - b1) * g), b2 * m + (1 - b2) * g

    gen = torch.Generator().manual_seed(0)
    # sizes below, at and above one block (2048 fp32, 4096 bf16 elements), with and without a partial last block
    shapes = [(3000,), (17,), (2048,), (4101,), (64, 33), (4096,), (2, 4099)]
    cases = [("adams", adams_by_hand, AdamSStep(1e-2, 0.1, 0.9, 0.95, 1e-8, 1 / (1 - 0.9**3))),
             ("lion", lion_by_hand, LionStep(1e-2, 0.1, 0.9, 0.99))]
    for dtype in (torch.float32, torch.bfloat16):
        for kind, by_hand, hp in cases:
            ps, gs, ms = ([torch.randn(s, generator=gen).to(dtype) for s in shapes] for _ in range(3))
            gs[1][::3] = float("nan")  # NaN momentum; NaN parameter for AdamS, Lion's sign(NaN) 0 as torch.sign's
            want = [by_hand(p.double(), g.double(), m.double(), *hp) for p, g, m in zip(ps, gs, ms)]
            assert all(tf.fits(p, g, m) for p, g, m in zip(ps, gs, ms))
            tf.step(kind, ps, gs, ms, hp)
            for p, m, (want_p, want_m) in zip(ps, ms, want):
                for got, ref in ((p, want_p), (m, want_m)):
                    if dtype == torch.float32:
                        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-6, equal_nan=True)
                    else:  # fp32 math, one rounding to bf16 (2**-8 relative), Lion's sign steps exact
                        scale = ref.nan_to_num().abs().max().item()
                        torch.testing.assert_close(got.double(), ref.to(dtype).double(), rtol=2**-7, atol=2**-7 * scale, equal_nan=True)
            print(kind, dtype, "ok")

    # One call with tensors the kernel cannot take (misaligned, not contiguous) and two dtypes: those
    # come back untouched for the caller's foreach path, the others are updated (one launch per dtype).
    hp = cases[0][2]
    ps = [torch.randn(4100, generator=gen)[1:], torch.randn(40, 30, generator=gen).t(),
          torch.randn(3000, generator=gen), torch.randn(2500, generator=gen).bfloat16()]
    gs, ms = ([torch.randn(p.shape, generator=gen).to(p.dtype) for p in ps] for _ in range(2))
    assert [tf.fits(p, g, m) for p, g, m in zip(ps, gs, ms)] == [False, False, True, True]
    before = [(p.clone(), m.clone()) for p, m in zip(ps, ms)]
    want = [by_hand(p.double(), g.double(), m.double(), *hp) for p, g, m, by_hand in zip(ps, gs, ms, [adams_by_hand] * 4)]
    rest = tf.step("adams", ps, gs, ms, hp)
    assert [[t.data_ptr() for t in ts] for ts in rest] == [[t.data_ptr() for t in ts[:2]] for ts in (ps, gs, ms)]
    for p, m, (p0, m0) in zip(ps[:2], ms[:2], before):
        assert torch.equal(p, p0) and torch.equal(m, m0)
    for p, m, (want_p, want_m) in zip(ps[2:], ms[2:], want[2:]):
        for got, ref in ((p, want_p), (m, want_m)):
            torch.testing.assert_close(got.double(), ref.to(got.dtype).double(), rtol=2**-7, atol=2**-7 * ref.abs().max().item())
    print("mixed ok")
""")


def test_multi_tensor_kernel_matches_the_update_rules_by_hand():
    env = dict(os.environ, TRITON_INTERPRET="1")
    result = subprocess.run([sys.executable, "-c", CHECK], cwd=Path(__file__).resolve().parents[1], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count(" ok") == 5, result.stdout
