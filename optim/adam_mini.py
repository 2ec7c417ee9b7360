"""Adam-mini (Zhang et al., 2024, "Adam-mini: Use Fewer Learning Rates To Gain More").

Adam with one second-moment scalar per *block* of a parameter instead of one per coordinate,
the blocks following the Hessian's dense sub-blocks. The partition here is explicit: every
parameter name is matched against an ordered list of (regex, rule) pairs, the first match wins,
and a name that matches nothing is an error (or, only when asked, an explicit logged default).
``AdamMini.partition()`` lists the result.

Rules (all block rules cut a 2-D weight along its output dimension: dim 0 of ``nn.Linear`` and
the token dimension of ``nn.Embedding``; dim 1 of the weights named in ``transposed``, such as
Hugging Face GPT-2's ``Conv1D``, stored (in, out): ``AdamMini.from_model`` finds those itself):

- ``adam``:  one v per coordinate (plain Adam), used for biases.
- ``row``:   one v per row: per token for embeddings and the output head, per output neuron
             for value, attention output and MLP weights.
- ``head``:  one v per attention head (groups of width / n_head rows): query and key weights, so
             a grouped-query key (fewer KV heads) gets one v per KV head.
- ``qkv``:   GPT-2's fused ``c_attn`` weight, rows [Q; K; V]: Q and K per head, V per row.
- ``whole``: one v for the whole tensor: norm weights, the position embedding.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.optim import Optimizer

from ._momentum_only import (
    check_gradients,
    check_group,
    check_hyperparameters,
    check_state_dict,
    is_dtensor,
    local,
    upcast,
)
from .groups import param_groups

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

log = logging.getLogger(__name__)

RULES = ("adam", "row", "head", "qkv", "whole")

# Our GPT-2's names first, then the names the official adam-mini package recognises.
GPT2_RULES: tuple[tuple[str, str], ...] = (
    (r"bias$", "adam"),
    (r"(^|\.)c_attn\.weight$", "qkv"),
    (r"(^|\.)(q_proj|k_proj|wq|wk|query|key)\.weight$", "head"),
    (r"(^|\.)(wte|embed|embd|embed_tokens|lm_head|output|final_layer)\.weight$", "row"),
    (r"(^|\.)(c_proj|c_fc|v_proj|wv|value|o_proj|wo)\.weight$", "row"),
    (r"(^|\.)(mlp|feed_forward)\.", "row"),
    (r"(^|\.)(ln_\w+|\w*norm\w*|wpe)\.weight$", "whole"),
)


@dataclass(frozen=True)
class Block:
    """How one parameter is cut: ``segments`` are (rows per block, number of blocks) along the
    output dimension: dim 0, or dim 1 if ``transposed``."""

    name: str
    rule: str
    segments: tuple[tuple[int, int], ...]
    transposed: bool = False

    @property
    def n_blocks(self) -> int:
        return sum(n for _, n in self.segments)


def _segments(name: str, rule: str, shape: torch.Size, n_head: int | None) -> tuple[tuple[int, int], ...]:
    if rule in ("adam", "whole"):
        return ((1, 1),) if rule == "whole" else ()
    if len(shape) != 2:
        raise ValueError(f"Adam-mini rule '{rule}' needs a 2-D weight, but {name} has shape {tuple(shape)}")
    rows = shape[0]
    if rule == "row":
        return ((1, rows),)
    if n_head is None:
        raise ValueError(f"Adam-mini rule '{rule}' for {name} needs n_head: pass AdamMini(..., n_head=...)")
    if rule == "head":
        # a head is the model's width over n_head rows (the official package's dim * dim / n_heads
        # elements): the query's n_head heads, and a grouped-query key's fewer KV heads alike
        if shape[1] % n_head or rows % (shape[1] // n_head):
            raise ValueError(f"{name} of shape {tuple(shape)} does not split into heads of {shape[1]} / n_head={n_head} rows")
        head_rows = shape[1] // n_head
        return ((head_rows, rows // head_rows),)
    if rows % (3 * n_head):
        raise ValueError(f"fused qkv weight {name} has {rows} rows, not 3 × a multiple of n_head={n_head}")
    head_rows = rows // (3 * n_head)
    return ((head_rows, n_head), (head_rows, n_head), (1, rows // 3))


def partition(
    named_parameters: Iterable[tuple[str, torch.Tensor]],
    n_head: int | None = None,
    rules: Sequence[tuple[str, str]] = GPT2_RULES,
    default_rule: str | None = None,
    transposed: Collection[str] = (),
) -> list[Block]:
    """Classify each named parameter into an Adam-mini block rule (first matching regex wins).
    Weights named in ``transposed`` are stored (in, out) and cut along dim 1."""
    blocks = []
    for name, p in named_parameters:
        rule = next((r for pattern, r in rules if re.search(pattern, name)), None)
        if rule is None:
            if default_rule is None:
                raise ValueError(
                    f"Adam-mini cannot classify parameter '{name}' (shape {tuple(p.shape)}): add a "
                    f"(regex, rule) pair to rules= with a rule from {RULES}, or pass default_rule='whole'"
                )
            log.warning("Adam-mini: no rule matches '%s'; using default_rule='%s'", name, default_rule)
            rule = default_rule
        if rule not in RULES:
            raise ValueError(f"Unknown Adam-mini rule '{rule}' for {name}; choose from {RULES}")
        flip = name in transposed and p.dim() == 2 and rule not in ("adam", "whole")
        shape = p.shape[::-1] if flip else p.shape
        blocks.append(Block(name, rule, _segments(name, rule, shape, n_head), transposed=flip))
    return blocks


def block_means(row_means: torch.Tensor, block: Block) -> torch.Tensor:
    """Mean per block from the mean of every row (all rows of a tensor have the same length)."""
    out, start = [], 0
    for rows_per_block, n in block.segments:
        out.append(row_means[start : start + rows_per_block * n].view(n, rows_per_block).mean(dim=1))
        start += rows_per_block * n
    return torch.cat(out) if len(out) > 1 else out[0]


def block_mean(x: torch.Tensor, block: Block) -> torch.Tensor:
    """Mean of x over each block of ``block``: a vector of length ``block.n_blocks``."""
    if block.transposed:
        x = x.t()
    rows = x.reshape(1, -1) if block.rule == "whole" else x.reshape(x.shape[0], -1)
    return block_means(rows.mean(dim=1), block)


def _sharded_block_mean(g2_local: torch.Tensor, block: Block, p: DTensor) -> tuple[torch.Tensor, slice]:
    """``block_mean`` of a tensor sharded by rows (FSDP2's Shard(0)), exact, on every rank.

    Returns the block means (replicated) and this rank's rows. Only the row means travel:
    one float per row (an all-gather), or one float per tensor for the 'whole' rule.
    """
    from torch.distributed.tensor import DTensor, Shard  # imported here: see _momentum_only.is_dtensor

    if len(p.placements) != 1 or not isinstance(p.placements[0], Shard) or p.placements[0].dim != 0:
        raise NotImplementedError(f"Adam-mini supports parameters sharded by rows (Shard(0)), got {p.placements}")
    # Shard(0) cuts the rows as torch.chunk does: ceil(rows / ranks) each, the last ranks' shorter or empty
    chunk = -(-p.shape[0] // p.device_mesh.size())
    start = min(p.device_mesh.get_local_rank() * chunk, p.shape[0])
    rows = slice(start, min(start + chunk, p.shape[0]))
    local_shape = (rows.stop - rows.start, *p.shape[1:])
    group = p.device_mesh.get_group()
    if block.rule == "whole":
        total = g2_local.sum().reshape(1)
        dist.all_reduce(total, group=group)
        return total / p.numel(), slice(None)
    local_means = g2_local.reshape(local_shape[0], -1).mean(dim=1) if local_shape[0] else g2_local.new_zeros(0)
    full = DTensor.from_local(local_means, p.device_mesh, p.placements, run_check=False,
                              shape=torch.Size([p.shape[0]]), stride=(1,)).full_tensor()
    return block_means(full, block), rows


def expand_blocks(values: torch.Tensor, block: Block, ndim: int) -> torch.Tensor:
    """One value per block, broadcastable against the tensor: shape (rows, 1, ...), or all ones for 'whole'."""
    if block.rule == "whole":
        return values.reshape((1,) * ndim)
    repeats = torch.tensor([r for r, n in block.segments for _ in range(n)], device=values.device)
    # the output's length given: repeat_interleave would otherwise read the repeats back from the GPU (a sync)
    expanded = torch.repeat_interleave(values, repeats, output_size=sum(r * n for r, n in block.segments))
    return expanded.view(1, -1) if block.transposed else expanded.view(-1, *([1] * (ndim - 1)))


def adam_mini_update(p, grad, m, v, block: Block, step: int, lr, wd, beta1, beta2, eps) -> None:
    """One Adam-mini step on one tensor, in place, fp32 math; exact on FSDP2-sharded (DTensor) tensors.

    With mean_B the mean over each block B (per coordinate for the ``adam`` rule)::

        p ← p · (1 − lr·wd)
        m ← β1 · m + (1 − β1) · g
        v ← β2 · v + (1 − β2) · mean_B(g²)
        p ← p − lr · (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + ε)
    """
    g = upcast(local(grad))
    x = upcast(local(p))
    m32 = upcast(local(m)).lerp_(g, 1 - beta1)
    rows = slice(None)
    if block.rule == "adam":
        g2 = g * g
    elif is_dtensor(p):
        if block.transposed:
            raise NotImplementedError(f"Adam-mini on a sharded (in, out) weight ({block.name}) is not supported")
        g2, rows = _sharded_block_mean(g * g, block, p)
    else:
        g2 = block_mean(g * g, block)
    v_local = local(v)
    v32 = upcast(v_local).mul_(beta2).add_(g2, alpha=1 - beta2)
    denom = (v32 / (1 - beta2**step)).sqrt_().add_(eps)
    if block.rule != "adam":
        denom = expand_blocks(denom, block, x.dim())[rows]  # this rank's rows of the full tensor
    x.mul_(1 - lr * wd).addcdiv_(m32, denom, value=-lr / (1 - beta1**step))
    local(p).copy_(x)
    local(m).copy_(m32)
    v_local.copy_(v32)


class AdamMini(Optimizer):
    r"""Adam-mini: Adam with one second-moment scalar per parameter block.

    .. math::
        p &\leftarrow p\,(1 - \eta\lambda) \\
        m &\leftarrow \beta_1 m + (1 - \beta_1) g \\
        v_B &\leftarrow \beta_2 v_B + (1 - \beta_2)\,\mathrm{mean}_{i \in B}(g_i^2) \\
        p &\leftarrow p - \eta\,\frac{m / (1 - \beta_1^t)}{\sqrt{v_B / (1 - \beta_2^t)} + \epsilon}

    The blocks are described in this module's docstring; see ``partition()`` for the result on
    a model. State per parameter: ``exp_avg`` (like p) and ``exp_avg_sq`` (one float per block).

    Args:
        params: ``model.named_parameters()``, or groups ``{"params": [(name, p), ...], ...}``.
        lr, betas, eps, weight_decay: as for AdamW.
        n_head: attention heads, for the ``head`` and ``qkv`` rules.
        rules: ordered (regex, rule) pairs; the first regex found in a name decides its rule.
        default_rule: rule for names no regex matches; None (default) makes that an error.
        transposed: names of 2-D weights stored (in, out), like Hugging Face GPT-2's Conv1D.

    For any ``nn.Module`` with a ``config`` (ours, or a Hugging Face model), ``AdamMini.from_model``
    finds the names, the head count and the (in, out) weights itself.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        n_head: int | None = None,
        rules: Sequence[tuple[str, str]] = GPT2_RULES,
        default_rule: str | None = None,
        transposed: Collection[str] = (),
    ):
        check_hyperparameters(lr, betas, weight_decay, eps)
        self._blocks: dict[torch.Tensor, Block] = {}
        self._partition_args = (n_head, tuple(rules), default_rule, frozenset(transposed))
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        super().__init__(groups, defaults)  # (each group through add_param_group, which partitions it)
        counts: dict[str, int] = {}
        for block in self._blocks.values():
            counts[block.rule] = counts.get(block.rule, 0) + 1
        log.info("Adam-mini partition: %s", ", ".join(f"{n} tensors '{rule}'" for rule, n in sorted(counts.items())))

    @classmethod
    def from_model(cls, model: torch.nn.Module, weight_decay: float = 0.0, **kwargs) -> AdamMini:
        """Adam-mini over ``model``: its named parameters in nanoGPT's two weight-decay groups, its
        head count from ``model.config`` (``n_head``, or ``num_attention_heads`` in Hugging Face
        configs), and every ``Conv1D`` weight marked (in, out). Other arguments as for AdamMini.

            optimizer = AdamMini.from_model(hf_gpt2, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
        """
        config = getattr(model, "config", None)
        heads = getattr(config, "n_head", None) or getattr(config, "num_attention_heads", None)
        if "n_head" not in kwargs and heads is not None:
            kwargs["n_head"] = heads
        kwargs.setdefault("transposed", {f"{name}.weight" for name, module in model.named_modules()
                                         if type(module).__name__ == "Conv1D"})
        return cls(param_groups(model, weight_decay, named=True), **kwargs)

    def add_param_group(self, param_group: dict) -> None:
        """A group of (name, parameter) pairs, partitioned by the rules the optimizer was built with."""
        named = param_group["params"]
        named = [named] if isinstance(named, tuple) and len(named) == 2 and isinstance(named[0], str) else list(named)
        if not all(isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) for item in named):
            raise ValueError("AdamMini needs parameter names: pass model.named_parameters(), or groups of (name, param) "
                             "pairs, to AdamMini and to add_param_group")
        blocks = partition(named, *self._partition_args)
        for name, p in named:
            if p.is_complex():
                raise ValueError(f"AdamMini does not support complex parameters ({name} is {p.dtype}): its block "
                                 "statistics are defined for real tensors; use AdamW or AdamS for this model")
        check_group({**self.defaults, **param_group})  # a group's own values are held to the rules of the defaults
        super().add_param_group({**param_group, "params": [p for _, p in named]})
        self._blocks.update((p, block) for block, (_, p) in zip(blocks, named))

    def __getstate__(self) -> dict:  # copy.deepcopy and pickle keep the partition with the parameters it names
        return {**super().__getstate__(), "_blocks": self._blocks, "_partition_args": self._partition_args}

    def load_state_dict(self, state_dict: dict) -> None:
        def shapes(p):
            block = self._blocks[p]
            v = tuple(p.shape) if block.rule == "adam" else (block.n_blocks,)
            return {"step": None, "exp_avg": tuple(p.shape), "exp_avg_sq": v}

        check_state_dict(self, state_dict, shapes)
        super().load_state_dict(state_dict)

    def partition(self) -> list[tuple[str, str, int]]:
        """(parameter name, rule, number of second-moment scalars) for every parameter."""
        return [(b.name, b.rule, b.n_blocks if b.rule != "adam" else p.numel()) for p, b in self._blocks.items()]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        pairs = [(p, p.grad) for group in self.param_groups for p in group["params"] if p.grad is not None]
        check_gradients("AdamMini", pairs)
        for p, _ in pairs:
            if self._blocks[p].transposed and is_dtensor(p):
                raise NotImplementedError(f"Adam-mini on a sharded (in, out) weight ({self._blocks[p].name}) is not supported")
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                block = self._blocks[p]
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    # p's dtype, as torch.optim keeps state (load_state_dict casts to it); per-block
                    # statistics are small and the same on every rank, so never sharded
                    if block.rule == "adam":
                        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    else:
                        state["exp_avg_sq"] = torch.zeros(block.n_blocks, dtype=p.dtype, device=local(p).device)
                state["step"] += 1
                adam_mini_update(
                    p, p.grad, state["exp_avg"], state["exp_avg_sq"], block, state["step"],
                    group["lr"], group["weight_decay"], beta1, beta2, group["eps"],
                )
        return loss
