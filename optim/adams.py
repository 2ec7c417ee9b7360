"""AdamS: Adam whose second moment is built from the momentum itself.

Reference: "AdamS: Momentum Itself Can Be A Normalizer for LLM Pretraining and Post-training"
(Algorithm 1). The state is one tensor per parameter (the momentum), half of AdamW's.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._momentum_only import MomentumOnlyOptimizer, check_hyperparameters, upcast


class AdamSStep(NamedTuple):
    """The scalars of one AdamS step: floats, or 0-d tensors in the compiled path."""

    lr: float
    weight_decay: float
    beta1: float
    beta2: float
    eps: float
    inv_bc: float  # 1 / (1 - beta1^t) with bias correction, else 1


def adams_update(p: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, hp: AdamSStep) -> None:
    """One AdamS step on one tensor, in place, in at least fp32 whatever the storage dtype.

    With bc = 1/hp.inv_bc and m the momentum *before* this step::

        p ← p · (1 − lr·weight_decay)
        v ← β2 · (m/bc)² + (1 − β2) · g²
        m ← β1 · m + (1 − β1) · g
        p ← p − lr · (m/bc) / (√v + ε)
    """
    x, g, m = upcast(p), upcast(grad), upcast(exp_avg)
    m_hat = m * hp.inv_bc
    v = hp.beta2 * m_hat * m_hat + (1 - hp.beta2) * g * g
    m = m + (1 - hp.beta1) * (g - m)
    x = x * (1 - hp.lr * hp.weight_decay) - (hp.lr * hp.inv_bc) * m / (v.sqrt() + hp.eps)
    p.copy_(x)
    exp_avg.copy_(m)


def adams_update_foreach(ps: list, grads: list, exp_avgs: list, hp: AdamSStep) -> None:
    """`adams_update` over lists of fp32 tensors with ``torch._foreach_*`` ops."""
    if hp.weight_decay != 0:
        torch._foreach_mul_(ps, 1 - hp.lr * hp.weight_decay)
    v = torch._foreach_mul(exp_avgs, hp.inv_bc)
    torch._foreach_mul_(v, v)
    torch._foreach_mul_(v, hp.beta2)
    torch._foreach_addcmul_(v, grads, grads, value=1 - hp.beta2)
    torch._foreach_sqrt_(v)
    torch._foreach_add_(v, hp.eps)
    torch._foreach_lerp_(exp_avgs, grads, 1 - hp.beta1)
    torch._foreach_addcdiv_(ps, exp_avgs, v, value=-hp.lr * hp.inv_bc)


class AdamS(MomentumOnlyOptimizer):
    r"""AdamS (Algorithm 1 of the AdamS paper), a drop-in for ``torch.optim.AdamW``.

    AdamS replaces Adam's second-moment EMA with a normaliser built from the momentum it keeps
    anyway, so its state is one tensor the size of the parameter (``exp_avg``), the footprint of
    SGD with momentum and half of AdamW's.

    Learning rate: the paper runs AdamS at AdamW's hyperparameters. In the adams-gpt project's
    scans (models of 10K-7.2M parameters on a CPU and GPT-2 Small on one GPU; its README's "AdamS
    in your own code" and study/report/lr_advice.md) AdamS's steps were about 4x longer than AdamW's at
    the same lr, and its best lr was lower: start at a quarter of a tuned AdamW lr on runs of up to
    about 200 tokens per parameter and at half of it from about 400 on, then scan x2 both ways.

    At step t = 1, 2, … with bc = 1 − β1^t (``bias_correction=True``) or bc = 1 (``False``),
    and m the momentum before this step:

    .. math::
        p &\leftarrow p\,(1 - \eta\lambda) \\
        v &\leftarrow \beta_2\,(m/bc)^2 + (1 - \beta_2)\,g^2 \\
        m &\leftarrow \beta_1\,m + (1 - \beta_1)\,g \\
        p &\leftarrow p - \eta\,\frac{m/bc}{\sqrt{v} + \epsilon}

    ``bias_correction=True`` (the default) is what the authors' released code does and what
    produced the paper's results. ``bias_correction=False`` is the paper's Algorithm 1 verbatim.
    They differ most at the start: at β = (0.9, 0.95) the first step moves every coordinate by
    lr·sign(g)/√0.05 ≈ 4.47·lr with correction, and by 0.1·lr/√0.05 ≈ 0.447·lr without.

    Stability: β2 close to 1 destabilises AdamS. The denominator then leans on the old momentum
    and reacts slowly to a gradient outlier (the paper's Figure 3); in its β sweep on GPT-2 Small,
    (β1, β2) = (0.95, 0.999) ended at validation loss 3.46 against 2.89 at (0.95, 0.98). AdamW's
    LLM default, 0.95, is the safe choice.

    Step size: with ``bias_correction=False``, no weight decay and ε ≥ 0, every coordinate moves
    by at most lr·√(β1²/β2 + (1−β1)²/(1−β2)) (≈ 1.026·lr at (0.9, 0.95)), by Cauchy–Schwarz,
    and that bound is attained when m/g = β1(1−β2) / (β2(1−β1)). The paper's lemma states the
    smaller max(β1/√β2, (1−β1)/√(1−β2)) (≈ 0.923·lr), which does not hold: m = g already gives
    a step of exactly lr.

    Args:
        params: parameters or parameter groups, as for any ``torch.optim`` optimizer.
        lr: learning rate η.
        betas: (β1, β2): momentum coefficient and the weight of the old momentum in v.
        eps: ε added to √v.
        weight_decay: decoupled weight decay λ (AdamW-style, multiplied by lr).
        bias_correction: divide the momentum by 1 − β1^t (see above).
        foreach: use ``torch._foreach_*`` ops (default unless fused or ``foreach=False``).
        fused: one pass over memory: on CUDA one Triton kernel launch for all tensors, on CPU
            a C++ kernel built at first use (with ninja); ``torch.compile`` of the same update
            where neither is available.
    """

    update = staticmethod(adams_update)
    cpu_kernel = "adams_step"
    triton_kernel = "adams"
    update_foreach = staticmethod(adams_update_foreach)

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        bias_correction: bool = True,
        *,
        foreach: bool | None = None,
        fused: bool | None = None,
    ):
        check_hyperparameters(lr, betas, weight_decay, eps)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, bias_correction=bias_correction)
        super().__init__(params, defaults, foreach=foreach, fused=fused)

    def _hyperparameters(self, group, step) -> AdamSStep:
        beta1, beta2 = group["betas"]
        bc = 1.0 - beta1**step if group["bias_correction"] else 1.0
        return AdamSStep(group["lr"], group["weight_decay"], beta1, beta2, group["eps"], 1.0 / bc)
