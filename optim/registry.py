"""Every optimizer the project trains with, by name, and nanoGPT's parameter groups for them.

Adding an optimizer is one entry in ``OPTIMIZERS``; the registry tests then cover it.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable

import torch
from torch import nn
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from .adam_mini import AdamMini
from .adams import AdamS
from .lion import Lion

log = logging.getLogger(__name__)

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adamw": torch.optim.AdamW,
    "adams": AdamS,
    "lion": Lion,
    "adam_mini": AdamMini,
    "sgd": functools.partial(torch.optim.SGD, momentum=0.9),  # the paper's SGD with momentum
    "adagrad": torch.optim.Adagrad,
    "rmsprop": torch.optim.RMSprop,
}

IMPLEMENTATIONS = ("auto", "loop", "foreach", "fused")


def hyperparameters(name: str) -> set[str]:
    """The keyword arguments the optimizer ``name`` accepts (besides its parameters)."""
    signature = inspect.signature(_lookup(name))
    return {k for k, p in signature.parameters.items() if k != "params" and p.kind is not p.VAR_KEYWORD}


def _lookup(name: str):
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer '{name}'; choose one of: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name]


def _implementation_kwargs(name: str, implementation: str, params: list[torch.Tensor]) -> dict:
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"Unknown implementation '{implementation}'; choose one of: {', '.join(IMPLEMENTATIONS)}")
    accepted = hyperparameters(name)
    if implementation == "auto":
        on_cuda = all(p.is_cuda for p in params)
        if name == "adamw":
            fused_devices = _get_fused_kernels_supported_devices()
            supported = all(p.device.type in fused_devices and p.is_floating_point() for p in params)
            return {"fused": True} if supported else {}
        if name in ("adams", "lion"):
            # The fused kernel is compiled on first use: worth it on a GPU, a wait on a CPU.
            return {"fused": True} if on_cuda else {"foreach": True}
        return {}
    flag = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[implementation]
    missing = set(flag) - accepted
    if missing:
        raise ValueError(f"Optimizer '{name}' has no '{implementation}' implementation; use implementation='auto'")
    if implementation == "loop" and "fused" in accepted:
        flag["fused"] = False
    return flag


def param_groups(model: nn.Module, weight_decay: float, named: bool = False) -> list[dict]:
    """nanoGPT's groups: tensors with dim >= 2 (matmul weights, embeddings) decay; biases and norms don't."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [(n, p) for n, p in params if p.dim() >= 2]
    no_decay = [(n, p) for n, p in params if p.dim() < 2]
    for label, items in (("decayed", decay), ("not decayed", no_decay)):
        log.info("%s: %d tensors, %s parameters", label, len(items), f"{sum(p.numel() for _, p in items):,}")
    pick = (lambda items: items) if named else (lambda items: [p for _, p in items])
    return [
        {"params": pick(decay), "weight_decay": weight_decay},
        {"params": pick(no_decay), "weight_decay": 0.0},
    ]


def build_optimizer(name: str, model: nn.Module, implementation: str = "auto", **hyperparams) -> torch.optim.Optimizer:
    """The optimizer ``name`` over ``model``'s parameters in nanoGPT's two weight-decay groups.

    ``hyperparams`` go to the optimizer's constructor (``lr``, ``betas``, ``weight_decay``, ...);
    ``weight_decay`` applies to the decayed group only. ``implementation`` picks the loop,
    foreach or fused code path where the optimizer has them ("auto" picks the fastest sensible
    one). Adam-mini receives parameter names and, if not given, ``n_head`` from ``model.config``.
    """
    factory = _lookup(name)
    accepted = hyperparameters(name)
    unknown = set(hyperparams) - accepted
    if unknown:
        raise ValueError(
            f"Optimizer '{name}' does not take {', '.join(sorted(unknown))}; it takes: {', '.join(sorted(accepted))}"
        )
    weight_decay = hyperparams.pop("weight_decay", 0.0)
    is_adam_mini = factory is AdamMini
    if is_adam_mini and "n_head" not in hyperparams and hasattr(getattr(model, "config", None), "n_head"):
        hyperparams["n_head"] = model.config.n_head
    groups = param_groups(model, weight_decay, named=is_adam_mini)
    flat = [p for g in groups for p in (g["params"] if not is_adam_mini else [p for _, p in g["params"]])]
    kwargs = _implementation_kwargs(name, implementation, flat)
    optimizer = factory(groups, **hyperparams, **kwargs)
    log.info("optimizer: %s %s", name, ", ".join(f"{k}={v}" for k, v in {**hyperparams, **kwargs}.items()))
    return optimizer
