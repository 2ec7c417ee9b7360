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
    r"""AdamS (Algorithm 1 of the AdamS paper), a drop-in for ``torch.optim.AdamW`` whose state is one
    tensor a parameter (the momentum), half of AdamW's.

    At step t = 1, 2, … with bc = 1 − β1^t (``bias_correction=True``) or bc = 1 (``False``),
    and m the momentum before this step:

    .. math::
        p &\leftarrow p\,(1 - \eta\lambda) \\
        v &\leftarrow \beta_2\,(m/bc)^2 + (1 - \beta_2)\,g^2 \\
        m &\leftarrow \beta_1\,m + (1 - \beta_1)\,g \\
        p &\leftarrow p - \eta\,\frac{m/bc}{\sqrt{v} + \epsilon}

    Learning rate: start lower than AdamW's (a quarter to half of a tuned AdamW lr), then scan (adams-gpt's
    README, "AdamS in your own code"; the step bound, bias correction and stability are in optim/README.md).

    Args:
        params: parameters or parameter groups, as for any ``torch.optim`` optimizer.
        lr: learning rate η.
        betas: (β1, β2): momentum coefficient and the weight of the old momentum in v (0.95 is safe; near 1
            destabilises AdamS).
        eps: ε added to √v.
        weight_decay: decoupled weight decay λ (AdamW-style, multiplied by lr).
        bias_correction: divide the momentum by 1 − β1^t (the authors' code; ``False`` is the paper's
            Algorithm 1 verbatim).
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
