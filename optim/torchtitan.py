"""AdamS and Lion inside torchtitan, the PyTorch-native engine the AdamS paper ran Llama 2 with.

torchtitan (0.3) builds its optimizers from ``Trainer.Config.optimizer``, an
``OptimizersContainer.Config`` whose parameter groups name an optimizer; the names come from a
fixed table (Adam, AdamW, DistMuon). ``OptimizersContainer`` here is its subclass with this
project's optimizers added to that table, and ``optimizer_config`` is the one-line way to ask
for one in a torchtitan config function::

    from optim.torchtitan import optimizer_config

    def llama2_7b_adams() -> Trainer.Config:
        return Trainer.Config(..., optimizer=optimizer_config("AdamS", lr=3e-4, betas=(0.9, 0.95),
                                                              eps=1e-5, weight_decay=0.1))

Everything else is torchtitan's own: FSDP2 hands our optimizers DTensor shards (they update the
local shard, which is all an elementwise rule needs), its ``implementation`` setting ("fused",
"foreach", "for-loop") selects our fused (C++ on CPU, Triton on CUDA), foreach or loop path, and
its checkpointer saves and reloads our ``exp_avg`` state by parameter name. config/torchtitan_llama2.py
has the paper's Llama 2 runs built this way.

Adam-mini is not offered here: its blocks are attention heads and whole rows, which under FSDP2
are split across ranks; the ``adam-mini`` package handles that case itself. torchtitan is an
optional dependency (it pins ``datasets<4.8``; see the project README, "Train Llama 2").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torchtitan.components.optimizer import OptimizersContainer as _TitanContainer
from torchtitan.components.optimizer import ParamGroupConfig

from .adams import AdamS
from .lion import Lion

OURS: dict[str, Callable[..., torch.optim.Optimizer]] = {"AdamS": AdamS, "Lion": Lion}


class OptimizersContainer(_TitanContainer):
    """torchtitan's container, with "AdamS" and "Lion" besides its own optimizer names."""

    @dataclass(kw_only=True, slots=True)
    class Config(_TitanContainer.Config):
        """torchtitan's fields unchanged; being this class's own, it builds this container."""

    @staticmethod
    def _resolve_optimizer_factory(name: str) -> Callable[..., torch.optim.Optimizer]:
        if name in OURS:
            return OURS[name]
        try:
            return _TitanContainer._resolve_optimizer_factory(name)
        except NotImplementedError:
            raise NotImplementedError(f"optimizer '{name}' is neither torchtitan's nor one of ours "
                                      f"({', '.join(OURS)})") from None


def optimizer_config(name: str, *, no_decay: str | None = None, **kwargs) -> OptimizersContainer.Config:
    """A container config with every parameter under optimizer ``name`` (``kwargs``: its
    hyperparameters, ``lr`` included). ``no_decay``: a regex of parameter names that get weight
    decay 0 in a group of their own (e.g. ``r"norm"``); torchtitan's own recipes decay every
    tensor, and so does the default here."""
    groups = []
    if no_decay is not None:
        groups.append(ParamGroupConfig(pattern=no_decay, optimizer_name=name,
                                       optimizer_kwargs=dict(kwargs, weight_decay=0.0)))
    groups.append(ParamGroupConfig(pattern=r".*", optimizer_name=name, optimizer_kwargs=dict(kwargs)))
    return OptimizersContainer.Config(param_groups=groups)
