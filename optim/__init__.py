"""Drop-in ``torch.optim`` optimizers: AdamS, Lion, Adam-mini, and a registry of them all.

Installed, this package is ``adams_optim`` (``pip install ./optim`` needs torch alone; the whole
project, ``pip install -e .``, installs it too), the name the repository's own code imports it by.

    from adams_optim import AdamS
    optimizer = AdamS(model.parameters(), lr=1.5e-4, betas=(0.9, 0.95), weight_decay=0.1)
    # a quarter of a tuned AdamW lr, for a run under ~200 tokens per parameter; from ~400 on, half of
    # it; then a x2 scan both ways (adams-gpt's README, "AdamS in your own code")
"""

from __future__ import annotations

import torch

from .adam_mini import AdamMini
from .adams import AdamS, AdamSStep, adams_update
from .lion import Lion, LionStep, lion_update
from .registry import IMPLEMENTATIONS, OPTIMIZERS, Entry, build_optimizer, hyperparameters, param_groups


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's state buffers (tensors with at least one dimension).

    Scalar step counters are left out: torch's AdamW keeps them as 0-d tensors, ours as ints.
    """
    return sum(
        v.numel() * v.element_size()
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    )


__all__ = [
    "AdamS", "Lion", "AdamMini", "OPTIMIZERS", "Entry", "IMPLEMENTATIONS", "build_optimizer", "hyperparameters",
    "param_groups", "state_bytes", "adams_update", "lion_update", "AdamSStep", "LionStep",
]
