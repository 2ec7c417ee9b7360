"""The Triton kernels behind optim/_triton_fused.py (which explains them). Imported only at the first
CUDA step: importing Triton loads its compiler, which a CPU-only run has no use for."""

import triton
import triton.language as tl


@triton.jit
def _adams_math(x, g, m, lr, weight_decay, beta1, beta2, eps, inv_bc):
    m_hat = m * inv_bc
    v = beta2 * m_hat * m_hat + (1 - beta2) * g * g
    m = m + (1 - beta1) * (g - m)
    x = x * (1 - lr * weight_decay) - (lr * inv_bc) * m / (tl.sqrt(v) + eps)
    return x, m


@triton.jit
def _lion_math(x, g, m, lr, weight_decay, beta1, beta2):
    c = m * beta1 + g * (1 - beta1)
    sign = tl.where(c > 0, 1.0, tl.where(c < 0, -1.0, 0.0))
    x = x * (1 - lr * weight_decay) - lr * sign
    m = m * beta2 + g * (1 - beta2)
    return x, m


@triton.jit
def _update_block(p_ptr, g_ptr, m_ptr, offs, mask, s0, s1, s2, s3, s4, s5, ADAMS: tl.constexpr):
    x = tl.load(p_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    m = tl.load(m_ptr + offs, mask=mask).to(tl.float32)
    if ADAMS:
        x, m = _adams_math(x, g, m, s0, s1, s2, s3, s4, s5)
    else:
        x, m = _lion_math(x, g, m, s0, s1, s2, s3)
    tl.store(p_ptr + offs, x.to(p_ptr.dtype.element_ty), mask=mask)
    tl.store(m_ptr + offs, m.to(m_ptr.dtype.element_ty), mask=mask)


@triton.jit
def multi_tensor_kernel(addresses, numels, block_tensor, block_index, n_tensors, s0, s1, s2, s3, s4, s5,
                         DTYPE: tl.constexpr, ADAMS: tl.constexpr, BLOCK: tl.constexpr, ALIGN: tl.constexpr):
    pid = tl.program_id(0)
    t = tl.load(block_tensor + pid)
    start = tl.load(block_index + pid).to(tl.int64) * BLOCK
    n = tl.load(numels + t)
    # An address read from memory tells the compiler nothing of its alignment; without multiple_of
    # every load and store is one element wide (scalar ld.global.b16 for bf16, see tests/test_triton_kernel.py).
    p_ptr = tl.multiple_of(tl.load(addresses + t).to(tl.pointer_type(DTYPE)), ALIGN)
    g_ptr = tl.multiple_of(tl.load(addresses + n_tensors + t).to(tl.pointer_type(DTYPE)), ALIGN)
    m_ptr = tl.multiple_of(tl.load(addresses + 2 * n_tensors + t).to(tl.pointer_type(DTYPE)), ALIGN)
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n:  # a full block: no mask, so loads and stores can be vectorised
        _update_block(p_ptr, g_ptr, m_ptr, offs, None, s0, s1, s2, s3, s4, s5, ADAMS)
    else:
        _update_block(p_ptr, g_ptr, m_ptr, offs, offs < n, s0, s1, s2, s3, s4, s5, ADAMS)
