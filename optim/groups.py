"""nanoGPT's parameter groups: which tensors decay, and the token embedding's own lr multiple.

A module of its own so that the optimizers (Adam-mini's ``from_model``) and the registry both use it
without importing each other.
"""

from __future__ import annotations

import logging

from torch import nn

log = logging.getLogger(__name__)


def token_embeddings(model: nn.Module) -> set[str]:
    """Names of the parameters that map tokens to vectors or back: every embedding with a row per
    token (``model.config.vocab_size``) and the output head ``lm_head`` where there is one. GPT-2
    ties its head to the embedding; named_parameters lists that tensor once, as the embedding."""
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    out = {f"{prefix}.weight" for prefix, module in model.named_modules()
           if isinstance(module, nn.Embedding) and module.num_embeddings == vocab}
    if isinstance(getattr(model, "lm_head", None), nn.Linear):
        out.add("lm_head.weight")
    return out


def param_groups(model: nn.Module, weight_decay: float, named: bool = False, embedding_lr_scale: float = 1.0) -> list[dict]:
    """nanoGPT's groups: tensors with dim >= 2 (matmul weights, embeddings) decay; biases and norms don't.

    With ``embedding_lr_scale`` != 1 the token embedding and output head get a third group whose
    ``lr_scale`` key says what multiple of the schedule's lr it takes (train.py honours it)."""
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    embed = token_embeddings(model) if embedding_lr_scale != 1 else set()
    decay = [(n, p) for n, p in params if p.dim() >= 2 and n not in embed]
    no_decay = [(n, p) for n, p in params if p.dim() < 2]
    embedding = [(n, p) for n, p in params if n in embed]
    if embedding_lr_scale != 1 and not embedding:
        raise ValueError("embedding_lr_scale needs a model with token embeddings (nn.Embedding with "
                         "config.vocab_size rows, or an lm_head); this one has none")
    labelled = [("decayed", decay), ("not decayed", no_decay)]
    labelled += [(f"token embeddings (decayed, lr x{embedding_lr_scale:g})", embedding)] if embedding else []
    for label, items in labelled:
        log.info("%s: %d tensors, %s parameters", label, len(items), f"{sum(p.numel() for _, p in items):,}")
    pick = (lambda items: items) if named else (lambda items: [p for _, p in items])
    groups = [
        {"params": pick(decay), "weight_decay": weight_decay},
        {"params": pick(no_decay), "weight_decay": 0.0},
    ]
    if embedding:
        groups.append({"params": pick(embedding), "weight_decay": weight_decay, "lr_scale": embedding_lr_scale})
    return groups
