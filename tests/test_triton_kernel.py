"""The CUDA multi-tensor kernel (optim/_triton_fused.py) on a CPU: run by Triton's interpreter, and
compiled for an H100 to read the instructions it would run.

    python -m pytest tests/test_triton_kernel.py

Triton comes with the dev extra (torchtitan needs it) but not with the plain install, so these skip
where it is missing; tests/test_cuda.py runs the same kernel on a GPU. The interpreter
(TRITON_INTERPRET=1, read when the kernel is defined) needs a fresh process, and so does compiling
without it.
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
    from adams_optim import _triton_fused as tf
    from adams_optim.adams import AdamSStep
    from adams_optim.lion import LionStep

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


PTX = textwrap.dedent("""
    import re
    import torch
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from adams_optim import _triton_fused as tf
    from adams_optim._triton_kernels import multi_tensor_kernel

    types = dict(addresses="*i64", numels="*i64", block_tensor="*i32", block_index="*i32", n_tensors="i32",
                 **{f"s{i}": "fp32" for i in range(6)})
    for name, dtype in (("float32", tl.float32), ("bfloat16", tl.bfloat16)):
        block = tf._block(getattr(torch, name))
        consts = dict(DTYPE=dtype, ADAMS=True, BLOCK=block, ALIGN=tf._ALIGN)
        signature = {a: types.get(a, "constexpr") for a in multi_tensor_kernel.arg_names}
        kernel = triton.compile(ASTSource(multi_tensor_kernel, signature, consts), target=GPUTarget("cuda", 90, 32),
                                options=dict(num_warps=tf._warps(getattr(torch, name))))
        ptx = kernel.asm["ptx"]
        print(name, len(re.findall(r"ld\\.global\\.v4\\.b32", ptx)), len(re.findall(r"st\\.global\\.v4\\.b32", ptx)))
""")


def test_full_blocks_load_and_store_128_bits_at_a_time(tmp_path):
    """The kernel compiled for an H100 (sm_90; no GPU needed), read in its PTX: a full block's loads and
    stores must be 128 bits wide. An address read from the pointer table carries no alignment the
    compiler can see; until the kernel said so (tl.multiple_of), every access was one element wide,
    2 bytes for bf16, in the kernel whose bf16 step ran at a third of copy bandwidth on the H100."""
    pytest.importorskip("triton.backends.nvidia", reason="this triton has no CUDA backend to compile for")
    from adams_optim import _triton_fused as tf

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path), TRITON_DEFAULT_FP_FUSION="1")
    result = subprocess.run([sys.executable, "-c", PTX], cwd=Path(__file__).resolve().parents[1], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["float32", "bfloat16"], result.stdout
    for line, itemsize in zip(lines, (4, 2)):
        name, loads, stores = line.split()
        vectors = tf.SETTINGS[itemsize][1] * itemsize // 16  # per thread, per tensor: p, g, m read; p, m written
        assert (int(loads), int(stores)) == (3 * vectors, 2 * vectors), line
