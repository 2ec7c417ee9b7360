"""How much memory a GRPO run (scripts/grpo.py) needs on each GPU, counted before any weight is loaded.

    python -m scripts.grpo Qwen2.5-3B-config-only/ --preset tinyzero --plan h100-80gb      # one GPU
    python -m scripts.grpo R1-Distill-8B/ --preset tinyzero --plan h100-80gbx8              # 8 GPUs, FSDP

A count by hand, not a simulation (the policy is a Hugging Face model trained by TRL, whose step train.py's
plan cannot run): the parameters are counted exactly, by building the model from its config.json on the meta
device (no memory, no weights); each term below is bytes a process holds at the peak of a training micro-step.

- the policy's fp32 weights, their fp32 gradients and the optimizer's state (AdamW 8 bytes a parameter, AdamS and
  Lion 4), each divided over the processes under FSDP;
- the reference model for the KL term (``--beta`` > 0): TRL copies the policy (fp32), sharded like it under FSDP;
- vLLM's colocated share (``--vllm``: 40% of the GPU, TinyZero's), or else the KV cache of the policy's own
  generation (fp32, as its weights) for the process's prompts of a rollout;
- activations of one micro-batch of completions (prompt + completion tokens each) in bf16 autocast: with
  activation checkpointing, each layer's fp32 input and one layer recomputed (about 34 values a token and width,
  Korthikanti et al., 2022; the attention kernel keeps no scores); without it, every layer's;
- the logits of the completion tokens (bf16, an fp32 copy for the log-softmax, its fp32 gradient);
- under FSDP, the parameters of two decoder layers gathered in bf16 (one computing, one prefetched) when the
  model is wrapped per decoder layer; the whole model gathered when it is one unit (accelerate's default).

Not counted: the CUDA context and NCCL (the plan's usable memory leaves them out), the allocator's slack
(the GPT-2 simulations here put it at 5-20% of the peak), and optimizer temporaries (none for a fused step).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from errors import UserError

GiB = 1 << 30
STATE_BYTES = {"adamw": 8, "adams": 4, "lion": 4}
VLLM_SHARE = 0.4  # of the GPU (grpo.py's vllm_gpu_memory_utilization, TinyZero's gpu_memory_utilization)


def parse_target(text: str) -> tuple[str, int]:
    """'h100-80gb' or 'h100-80gbx8' as (kind, processes)."""
    import plan

    kind, sep, count = text.rpartition("x")
    if not sep or not count.isdigit():
        kind, count = text, "1"
    if kind not in plan.KINDS or int(count) < 1:
        raise UserError(f"--plan {text}: give a GPU kind ({', '.join(plan.KINDS)}), optionally x the number of GPUs "
                        "(h100-80gbx8)")
    return kind, int(count)


@dataclass(frozen=True)
class Shape:
    parameters: int
    layers: int
    width: int
    vocab: int
    kv_width: int  # key/value width a token (grouped-query attention shrinks it)
    layer_class: str  # the decoder layer's class: what FSDP should wrap

    @property
    def layer_parameters(self) -> float:
        return self.parameters / self.layers  # (the embeddings spread over the layers: an upper bound)


def shape(model: str) -> Shape:
    """The policy's shape from its config.json (a local folder or a Hub name in the cache), on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as e:  # (load_policy's words: the same model, the same failure)
        where = "a folder here" if Path(model).exists() else "a local folder, and the Hub cannot give it here"
        raise UserError(f"{model} is not a Hugging Face model that can be loaded: not {where} "
                        f"({str(e).splitlines()[0][:160]}). A folder holding its config.json is enough for --plan") from None
    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(config)
    heads = getattr(config, "num_attention_heads", None) or config.n_head
    width = getattr(config, "hidden_size", None) or config.n_embd
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    layers = getattr(config, "num_hidden_layers", None) or config.n_layer
    no_split = sorted(getattr(meta, "_no_split_modules", None) or ["?"])
    return Shape(sum(p.numel() for p in meta.parameters()), layers, width, config.vocab_size,
                 2 * kv_heads * (width // heads), no_split[0])


def estimate(s: Shape, gpu_bytes: int, processes: int, optimizer: str, beta: float, vllm: bool, micro_batch: int,
             prompt_tokens: int, completion_tokens: int, generation_prompts: int, generations: int,
             checkpointing: bool, fsdp: bool, wrapped_per_layer: bool) -> dict[str, float]:
    """Bytes of each term on one process (see the module's docstring)."""
    shards = processes if fsdp else 1
    n, tokens = s.parameters, micro_batch * (prompt_tokens + completion_tokens)
    terms = dict(weights=4 * n / shards, gradients=4 * n / shards, optimizer_state=STATE_BYTES[optimizer] * n / shards)
    if beta > 0:
        terms["reference_model"] = 4 * n / shards
    if vllm:
        terms["vllm_share"] = VLLM_SHARE * gpu_bytes
    else:  # the KV cache of this process's share of a rollout's completions, fp32 like the weights
        sequences = generation_prompts * generations / processes
        terms["generation_kv_cache"] = sequences * (prompt_tokens + completion_tokens) * s.layers * s.kv_width * 4
    per_layer = 34 * tokens * s.width * 2
    terms["activations"] = s.layers * tokens * s.width * 4 + per_layer if checkpointing else s.layers * per_layer
    terms["logits"] = micro_batch * completion_tokens * s.vocab * (2 + 4 + 4)
    if fsdp:
        terms["gathered_parameters"] = 2 * 2 * s.layer_parameters if wrapped_per_layer else 2 * n
    return terms


def lines(terms: dict[str, float], usable: int | None, where: str) -> list[str]:
    """The estimate in words: each term, the total, and whether it fits ``usable`` bytes (None: not said)."""
    total = sum(terms.values())
    unit, size = ("GiB", GiB) if total >= GiB else ("MiB", 1 << 20)
    parts = ", ".join(f"{k.replace('_', ' ')} {v / size:,.1f}" for k, v in terms.items())
    out = [f"GRPO memory per process, counted ({unit}): {parts}; total {total / size:,.1f}"]
    if usable is not None:
        verdict = "fits" if total <= usable else "DOES NOT FIT"
        out.append(f"{verdict} {where} ({usable / GiB:,.1f} GiB usable a GPU; the allocator's slack, 5-20%, not counted)")
    return out


def prompt_length(text: str, tokenizer=None) -> int:
    """Tokens of a prompt: counted where there is a tokenizer, else a third of its characters (an over-count
    for English BPE vocabularies)."""
    return len(tokenizer(text)["input_ids"]) if tokenizer is not None else -(-len(text) // 3)


def launch_sharding() -> tuple[bool, bool]:
    """(FSDP on, wrapped per decoder layer), as ``accelerate launch`` tells its processes."""
    import os

    fsdp = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    policy = os.environ.get("FSDP_AUTO_WRAP_POLICY", "NO_WRAP").upper()
    return fsdp, policy == "TRANSFORMER_BASED_WRAP"


def check_sharding(s: Shape) -> None:
    """Refuse an FSDP launch whose model would be one unit: gathered whole on every GPU, it saves nothing."""
    fsdp, per_layer = launch_sharding()
    if fsdp and not per_layer:
        raise UserError(f"accelerate launch --use_fsdp without an auto-wrap policy makes the whole model one FSDP unit, "
                        f"gathered whole on every GPU; add --fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP (it wraps each "
                        f"{s.layer_class})")
