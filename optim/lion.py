"""Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms")."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._momentum_only import MomentumOnlyOptimizer, check_hyperparameters, upcast


class LionStep(NamedTuple):
    """The scalars of one Lion step: floats, or 0-d tensors in the compiled path."""

    lr: float
    weight_decay: float
    beta1: float
    beta2: float


def lion_update(p: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, hp: LionStep) -> None:
    """One Lion step on one tensor, in place, in at least fp32 whatever the storage dtype::

        c ← β1 · m + (1 − β1) · g
        p ← p · (1 − lr·weight_decay) − lr · sign(c)
        m ← β2 · m + (1 − β2) · g
    """
    x, g, m = upcast(p), upcast(grad), upcast(exp_avg)
    c = m * hp.beta1 + g * (1 - hp.beta1)
    p.copy_(x * (1 - hp.lr * hp.weight_decay) - hp.lr * torch.sign(c))
    exp_avg.copy_(m * hp.beta2 + g * (1 - hp.beta2))


def lion_update_foreach(ps: list, grads: list, exp_avgs: list, hp: LionStep) -> None:
    """`lion_update` over lists of fp32 tensors with ``torch._foreach_*`` ops."""
    if hp.weight_decay != 0:
        torch._foreach_mul_(ps, 1 - hp.lr * hp.weight_decay)
    c = torch._foreach_mul(exp_avgs, hp.beta1)
    torch._foreach_add_(c, grads, alpha=1 - hp.beta1)
    torch._foreach_sign_(c)
    torch._foreach_add_(ps, c, alpha=-hp.lr)
    torch._foreach_mul_(exp_avgs, hp.beta2)
    torch._foreach_add_(exp_avgs, grads, alpha=1 - hp.beta2)


class Lion(MomentumOnlyOptimizer):
    r"""Lion: the sign of an interpolated momentum (Chen et al., 2023).

    .. math::
        c &\leftarrow \beta_1 m + (1 - \beta_1) g \\
        p &\leftarrow p\,(1 - \eta\lambda) - \eta\,\mathrm{sign}(c) \\
        m &\leftarrow \beta_2 m + (1 - \beta_2) g

    Every coordinate moves by exactly lr (plus decay), so Lion wants a learning rate 3–10×
    smaller than AdamW's and a weight decay as much larger; the AdamS paper uses 0.1× lr,
    10× weight decay and β = (0.95, 0.98). State: one momentum tensor, like AdamS.

    Args:
        params: parameters or parameter groups.
        lr: learning rate η.
        betas: (β1, β2): interpolation for the update direction, and the momentum's EMA.
        weight_decay: decoupled weight decay λ (multiplied by lr).
        foreach: use ``torch._foreach_*`` ops (default unless fused or ``foreach=False``).
        fused: one pass over memory: on CUDA one Triton kernel launch for all tensors, on CPU
            a C++ kernel built at first use (with ninja); ``torch.compile`` of the same update
            where neither is available.
    """

    update = staticmethod(lion_update)
    cpu_kernel = "lion_step"
    triton_kernel = "lion"
    update_foreach = staticmethod(lion_update_foreach)

    def __init__(
        self,
        params,
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        *,
        foreach: bool | None = None,
        fused: bool | None = None,
    ):
        check_hyperparameters(lr, betas, weight_decay)
        defaults = dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay)
        super().__init__(params, defaults, foreach=foreach, fused=fused)

    def _hyperparameters(self, group, step) -> LionStep:
        beta1, beta2 = group["betas"]
        return LionStep(group["lr"], group["weight_decay"], beta1, beta2)
