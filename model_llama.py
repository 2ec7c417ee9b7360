"""Llama 2 in one file (Touvron et al., 2023): the AdamS paper's second architecture (its Figure 1).

Pre-norm transformer blocks with RMSNorm, rotary position embeddings (θ = 10,000), a SwiGLU MLP
whose hidden size follows Llama's rule (2/3 · 4 · n_embd, rounded up to a multiple of 256:
11,008 at 7B, 13,824 at 13B), no biases, and an output layer not tied to the embedding. Names
follow Hugging Face's LlamaForCausalLM (model.embed_tokens, model.layers.N.self_attn.q_proj, ...,
mlp.gate_proj, input_layernorm, model.norm, lm_head), so its weights load one to one; rotary
embeddings use its convention (the two halves of each head rotate together).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from errors import UserError, require
from model import LanguageModel


@dataclass
class LlamaConfig:
    block_size: int = 4096  # longest sequence, in tokens
    vocab_size: int = 32000  # Llama 2's sentencepiece vocabulary
    n_layer: int = 32
    n_head: int = 32
    n_embd: int = 4096
    multiple_of: int = 256  # the MLP's hidden size is rounded up to a multiple of this
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    dropout: float = 0.0  # on attention probabilities (Llama 2 trained with none)


# Llama 2 (Touvron et al., 2023, Table 1 and the released configs): n_layer, n_head, n_embd.
SIZES = {
    "7b": dict(n_layer=32, n_head=32, n_embd=4096),  # 6,738,415,616 parameters
    "13b": dict(n_layer=40, n_head=40, n_embd=5120),  # 13,015,864,320
}


def mlp_hidden(n_embd: int, multiple_of: int) -> int:
    """Llama's SwiGLU hidden size: 2/3 of 4·n_embd (as many weights as a 4x GELU MLP), rounded up."""
    hidden = int(2 * 4 * n_embd / 3)
    return multiple_of * -(-hidden // multiple_of)


class RMSNorm(nn.Module):
    """x / rms(x) · weight, computed in fp32 (Zhang and Sennrich, 2019)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotary(head_dim: int, length: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, (length, head_dim): position t turns the pair
    (i, i + head_dim/2) by t · θ^(−2i/head_dim)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=device) / head_dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float, device=device), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    """x (B, nh, T, hs) with each (i, i + hs/2) pair turned by its position's angle."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(f"n_embd={config.n_embd} is not divisible by n_head={config.n_head}")
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            nn.Linear(config.n_embd, config.n_embd, bias=False) for _ in range(4))
        self.n_head = config.n_head
        self.dropout = config.dropout

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = (proj(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))  # (B, nh, T, hs)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.o_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    """SwiGLU (Shazeer, 2020): down(silu(gate(x)) · up(x))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        hidden = mlp_hidden(config.n_embd, config.multiple_of)
        self.gate_proj = nn.Linear(config.n_embd, hidden, bias=False)
        self.up_proj = nn.Linear(config.n_embd, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, config.n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.n_embd, config.norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.n_embd, config.norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(LanguageModel):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.model = nn.ModuleDict(dict(
            embed_tokens=nn.Embedding(config.vocab_size, config.n_embd),
            layers=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            norm=RMSNorm(config.n_embd, config.norm_eps),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)  # not tied
        for name, p in self.named_parameters():
            if p.dim() == 2:  # GPT-2's init: N(0, 0.02), the residual projections scaled by depth
                std = 0.02 / (2 * config.n_layer) ** 0.5 if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    @property
    def blocks(self) -> nn.ModuleList:
        return self.model.layers

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; by default without the input embedding (a lookup, not a matmul)."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.model.embed_tokens.weight.numel() if non_embedding else n

    def forward(self, idx, targets=None):
        T = self.check_length(idx)
        x = self.model.embed_tokens(idx)  # (B, T, C)
        cos, sin = rotary(self.config.n_embd // self.config.n_head, T, self.config.rope_theta, idx.device)
        return self.head(self.model.norm(self.run_blocks(x, cos.to(x.dtype), sin.to(x.dtype))), targets)

    def crop_block_size(self, block_size: int):
        """Shorten the context: rotary embeddings have no table to cut, only the limit changes."""
        self.config.block_size = min(block_size, self.config.block_size)

    @classmethod
    def from_pretrained(cls, path: str, dropout: float = 0.0) -> Llama:
        """Weights of a Hugging Face LlamaForCausalLM (a local directory written by save_pretrained,
        or a Hub name where the Hub is reachable). Multi-head attention only (no grouped KV heads)."""
        require("transformers", "hf")
        from transformers import LlamaForCausalLM

        hf = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
        hc = hf.config
        if hc.num_key_value_heads != hc.num_attention_heads:
            raise UserError(f"{path} uses grouped-query attention ({hc.num_key_value_heads} KV heads for "
                            f"{hc.num_attention_heads} query heads); model_llama.py has one KV head per query head, as "
                            "Llama 2 7B and 13B: use a multi-head Llama, or train it with Hugging Face's own code")
        theta = (getattr(hc, "rope_parameters", None) or {}).get("rope_theta", getattr(hc, "rope_theta", 10000.0))
        config = LlamaConfig(block_size=hc.max_position_embeddings, vocab_size=hc.vocab_size,
                             n_layer=hc.num_hidden_layers, n_head=hc.num_attention_heads, n_embd=hc.hidden_size,
                             norm_eps=hc.rms_norm_eps, rope_theta=theta, dropout=dropout)
        model = cls(config)
        if model.model.layers[0].mlp.up_proj.out_features != hc.intermediate_size:
            raise UserError(f"{path} has an MLP of {hc.intermediate_size}, not Llama 2's size rule for n_embd="
                            f"{hc.hidden_size}; model_llama.py cannot hold it")
        missing, unexpected = model.load_state_dict(hf.state_dict(), strict=False)
        if missing or [k for k in unexpected if not k.endswith("rotary_emb.inv_freq")]:
            raise KeyError(f"{path} does not match this Llama: missing {missing}, unexpected {unexpected}")
        return model

    def to_hf(self, vocab_size: int):
        """A transformers LlamaForCausalLM computing what this model computes on token ids < vocab_size. The
        parameter names are the same; rotary embeddings follow the same convention."""
        from transformers import LlamaConfig, LlamaForCausalLM

        c = self.config
        if vocab_size > c.vocab_size:
            raise ValueError(f"vocab_size={vocab_size} is larger than the model's {c.vocab_size}")
        config = LlamaConfig(vocab_size=vocab_size, hidden_size=c.n_embd, num_hidden_layers=c.n_layer,
                             intermediate_size=self.model.layers[0].mlp.up_proj.out_features, num_attention_heads=c.n_head,
                             num_key_value_heads=c.n_head, max_position_embeddings=c.block_size, rms_norm_eps=c.norm_eps,
                             rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta}, tie_word_embeddings=False,
                             attention_bias=False, mlp_bias=False, attention_dropout=c.dropout)
        hf = LlamaForCausalLM(config)
        ours = self.state_dict()
        with torch.no_grad():
            for key, target in hf.state_dict().items():
                if key not in ours:
                    raise KeyError(f"no weight for Hugging Face's {key}")
                target.copy_(ours[key][:vocab_size] if key in ("model.embed_tokens.weight", "lm_head.weight") else ours[key])
        return hf.eval()
