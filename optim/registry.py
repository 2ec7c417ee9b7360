"""Every optimizer the project trains with, by name, and nanoGPT's parameter groups for them.

Adding an optimizer is one file (the optimizer) and one ``Entry`` in ``OPTIMIZERS``: train.py's
``--optimizer`` accepts it, ``build_optimizer`` builds it, and every registry-wide test runs on it.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .adam_mini import AdamMini
from .adams import AdamS
from .groups import param_groups
from .lion import Lion

log = logging.getLogger(__name__)

IMPLEMENTATIONS = ("auto", "loop", "foreach", "fused")


def torch_fused_where_supported(params: list[torch.Tensor]) -> str | None:
    """'fused' where torch has a fused kernel for every parameter's device, else the default."""
    try:  # a private helper of torch's: looked up when needed, with a fallback if a release moves it
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        devices = _get_fused_kernels_supported_devices()
    except ImportError:
        devices = ["cuda"]
    return "fused" if all(p.device.type in devices and p.is_floating_point() for p in params) else None


def compiled_on_cuda(params: list[torch.Tensor]) -> str:
    """'fused' on CUDA; 'foreach' elsewhere, where compiling the kernel costs more than it saves."""
    return "fused" if params and all(p.is_cuda for p in params) else "foreach"


@dataclass(frozen=True)
class Entry:
    """What train.py and the tests need to know of one optimizer.

    factory: called as ``factory(param_groups, **hyperparameters)``; its keyword arguments are the
        hyperparameters it takes (``hyperparameters(name)``).
    implementations: which of 'loop', 'foreach', 'fused' it offers, through torch.optim's
        ``foreach=`` and ``fused=`` arguments.
    auto: what implementation='auto' picks for a list of parameters (None: the optimizer's default).
    named: it takes (name, parameter) pairs instead of parameters (Adam-mini partitions by name);
        if it takes ``n_head``, build_optimizer passes ``model.config.n_head``.
    """

    factory: Callable[..., torch.optim.Optimizer]
    implementations: tuple[str, ...] = ()
    auto: Callable[[list[torch.Tensor]], str | None] = lambda params: None
    named: bool = False


OPTIMIZERS: dict[str, Entry] = {
    "adamw": Entry(torch.optim.AdamW, ("loop", "foreach", "fused"), auto=torch_fused_where_supported),
    "adams": Entry(AdamS, ("loop", "foreach", "fused"), auto=compiled_on_cuda),
    "lion": Entry(Lion, ("loop", "foreach", "fused"), auto=compiled_on_cuda),
    "adam_mini": Entry(AdamMini, named=True),
    "sgd": Entry(functools.partial(torch.optim.SGD, momentum=0.9), ("loop", "foreach")),  # the paper's SGD with momentum
    "adagrad": Entry(torch.optim.Adagrad, ("loop", "foreach")),
    "rmsprop": Entry(torch.optim.RMSprop, ("loop", "foreach")),
}


def _lookup(name: str) -> Entry:
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer '{name}'; choose one of: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name]


def hyperparameters(name: str) -> set[str]:
    """The keyword arguments the optimizer ``name`` accepts (besides its parameters)."""
    signature = inspect.signature(_lookup(name).factory)
    return {k for k, p in signature.parameters.items() if k != "params" and p.kind is not p.VAR_KEYWORD}


def implementation_kwargs(name: str, implementation: str, params: list[torch.Tensor]) -> dict:
    """The ``foreach=``/``fused=`` arguments that select ``implementation`` for optimizer ``name``."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"Unknown implementation '{implementation}'; choose one of: {', '.join(IMPLEMENTATIONS)}")
    entry = _lookup(name)
    if implementation == "auto":
        implementation = entry.auto(params)
        if implementation is None:
            return {}
    if implementation not in entry.implementations:
        offered = ", ".join(entry.implementations) or "none besides its default"
        raise ValueError(f"Optimizer '{name}' has no '{implementation}' implementation (it has: {offered}); "
                         "use implementation='auto'")
    if implementation == "loop":
        return {"foreach": False, **({"fused": False} if "fused" in entry.implementations else {})}
    return {implementation: True}


def build_optimizer(name: str, model: nn.Module, implementation: str = "auto", embedding_lr_scale: float = 1.0,
                    **hyperparams) -> torch.optim.Optimizer:
    """The optimizer ``name`` over ``model``'s parameters in nanoGPT's two weight-decay groups.

    ``hyperparams`` go to the optimizer's constructor (``lr``, ``betas``, ``weight_decay``, ...);
    ``weight_decay`` applies to the decayed group only. ``implementation`` picks the loop,
    foreach or fused code path where the optimizer has them ("auto" picks the fastest sensible
    one). An optimizer that takes ``n_head`` (Adam-mini) gets ``model.config.n_head`` unless given.
    ``embedding_lr_scale`` puts the token embedding and output head in a group of their own at that
    multiple of the lr (``param_groups``).
    """
    entry = _lookup(name)
    accepted = hyperparameters(name)
    unknown = set(hyperparams) - accepted
    if unknown:
        raise ValueError(
            f"Optimizer '{name}' does not take {', '.join(sorted(unknown))}; it takes: {', '.join(sorted(accepted))}"
        )
    weight_decay = hyperparams.pop("weight_decay", 0.0)
    if "n_head" in accepted and "n_head" not in hyperparams and hasattr(getattr(model, "config", None), "n_head"):
        hyperparams["n_head"] = model.config.n_head
    groups = param_groups(model, weight_decay, named=entry.named, embedding_lr_scale=embedding_lr_scale)
    for group in groups:
        if "lr" in hyperparams and "lr_scale" in group:
            group["lr"] = hyperparams["lr"] * group["lr_scale"]
    flat = [p for g in groups for p in g["params"]] if not entry.named else [p for g in groups for _, p in g["params"]]
    kwargs = implementation_kwargs(name, implementation, flat)
    optimizer = entry.factory(groups, **hyperparams, **kwargs)
    log.info("optimizer: %s %s", name, ", ".join(f"{k}={v}" for k, v in {**hyperparams, **kwargs}.items()))
    return optimizer
