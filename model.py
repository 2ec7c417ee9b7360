"""GPT-2 in one file: the architecture, its initialisation, loading Hugging Face weights, sampling.
(Llama 2, the paper's other architecture, is model_llama.py, built on the same LanguageModel base.)

Parameter names follow GPT-2's (wte, wpe, h.N.attn.c_attn, c_proj, mlp.c_fc, ln_f, lm_head) so a
checkpoint maps onto Hugging Face's GPT-2 one to one. Linear layers are ``nn.Linear`` (weights
stored (out, in)); Hugging Face's GPT-2 uses ``Conv1D`` ((in, out)), so loading transposes those.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.utils.checkpoint
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 1024  # longest sequence, in tokens
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64 for faster matmuls
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True  # biases in Linear and LayerNorm layers, as GPT-2 has
    gelu: str = "tanh"  # 'tanh': GPT-2's approximation (Hugging Face's gelu_new); 'exact': the erf form (nanoGPT's)


# The four GPT-2 sizes (OpenAI, 2019): n_layer, n_head, n_embd.
SIZES = {
    "small": dict(n_layer=12, n_head=12, n_embd=768),  # 124M
    "medium": dict(n_layer=24, n_head=16, n_embd=1024),  # 350M
    "large": dict(n_layer=36, n_head=20, n_embd=1280),  # 774M
    "xl": dict(n_layer=48, n_head=25, n_embd=1600),  # 1558M
}


# Our GELU setting and Hugging Face's name for it (its "gelu_new" is GPT-2's tanh form, "gelu" the erf form)
HF_GELU = {"tanh": "gelu_new", "exact": "gelu"}
# Hugging Face's GPT-2 keeps these as Conv1D, weights stored (in, out): ours are nn.Linear, (out, in)
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


class LanguageModel(nn.Module):
    """What GPT and Llama (model_llama.py) share: sampling, the MFU estimate, and activation
    checkpointing. A subclass has ``config`` (block_size, n_layer, n_embd), ``blocks`` (its
    transformer blocks, which FSDP shards one by one) and ``num_params()``."""

    checkpointing = False  # recompute each block's activations in the backward pass instead of keeping them

    def check_length(self, idx) -> int:
        """The sequence length of ``idx`` (B, T), refused past the context."""
        T = idx.shape[1]
        if T > self.config.block_size:
            raise ValueError(f"sequence of length {T} is longer than block_size {self.config.block_size}")
        return T

    def head(self, x, targets=None):
        """(logits, loss) from the last hidden states: every position's logits and the mean cross entropy, or,
        without targets, only the last position's (all that sampling needs) and no loss."""
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)  # (B, T, vocab)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def run_blocks(self, x, *args):
        """x through every block, each checkpointed if ``checkpointing``."""
        for block in self.blocks:
            if self.checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, *args, use_reentrant=False)
            else:
                x = block(x, *args)
        return x

    def estimate_mfu(self, tokens_per_second: float, peak_flops: float) -> float:
        """Model FLOPs utilisation: achieved / peak, with PaLM's 6N + 12·L·H·Q·T FLOPs per token
        (Chowdhery et al., 2022, appendix B)."""
        cfg = self.config
        flops_per_token = 6 * self.num_params() + 12 * cfg.n_layer * cfg.n_embd * cfg.block_size
        return flops_per_token * tokens_per_second / peak_flops

    @torch.no_grad()
    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None, generator=None,
                 vocab_size: int | None = None):
        """Sample ``max_new_tokens`` tokens after ``idx`` (B, T); returns (B, T + max_new_tokens).

        ``temperature=0`` picks the most likely token every time (greedy). ``vocab_size`` leaves
        out the padding of a padded vocabulary (ids at or above it are never sampled).
        """
        for _ in range(max_new_tokens):
            context = idx[:, -self.config.block_size :]
            logits, _ = self(context)
            logits = logits[:, -1, :vocab_size].float()
            if temperature == 0:
                next_token = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("inf")
                next_token = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1, generator=generator)
            idx = torch.cat((idx, next_token), dim=1)
        return idx


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # rows: [q; k; v]
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.dropout = config.dropout

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        # flash attention where the device has it
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU(approximate="tanh" if config.gelu == "tanh" else "none")
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(LanguageModel):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying (one tensor, named wte)
        self.apply(self._init_weights)
        # GPT-2: residual projections scaled by 1/sqrt(2 * n_layer), one per residual add
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def blocks(self) -> nn.ModuleList:
        return self.transformer.h

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; by default without position embeddings (token embeddings are tied
        to the output head, so they count as the head's weights)."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def forward(self, idx, targets=None):
        pos = torch.arange(self.check_length(idx), dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)
        return self.head(self.transformer.ln_f(self.run_blocks(x)), targets)

    def crop_block_size(self, block_size: int):
        """Shorten the context (e.g. to fine-tune GPT-2's 1024 at 256)."""
        assert block_size <= self.config.block_size
        self.config.block_size = block_size
        self.transformer.wpe.weight = nn.Parameter(self.transformer.wpe.weight[:block_size])

    @classmethod
    def from_pretrained(cls, name_or_path: str, dropout: float = 0.0) -> GPT:
        """GPT-2 weights from Hugging Face: ``gpt2`` … ``gpt2-xl``, or a local directory written by
        ``transformers``' ``save_pretrained`` (which works offline)."""
        from transformers import GPT2LMHeadModel

        hf = GPT2LMHeadModel.from_pretrained(name_or_path)
        hc = hf.config
        gelu = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "exact"}.get(hc.activation_function)
        if gelu is None:
            raise ValueError(f"{name_or_path} uses the activation {hc.activation_function!r}; this GPT-2 has GELU "
                             "(gelu_new, gelu_pytorch_tanh or gelu)")
        config = GPTConfig(
            block_size=hc.n_positions, vocab_size=hc.vocab_size, n_layer=hc.n_layer, n_head=hc.n_head,
            n_embd=hc.n_embd, dropout=dropout, bias=True,
            gelu=gelu,
        )
        model = cls(config)
        ours = model.state_dict()
        theirs = hf.state_dict()
        with torch.no_grad():
            for key, value in ours.items():
                if key not in theirs:
                    raise KeyError(f"{name_or_path} has no weight {key}; is it a GPT-2 checkpoint?")
                source = theirs[key].t() if key.endswith(CONV1D) else theirs[key]
                if source.shape != value.shape:
                    raise ValueError(f"{key}: {name_or_path} has shape {tuple(source.shape)}, expected {tuple(value.shape)}")
                value.copy_(source)
        return model

    def to_hf(self, vocab_size: int):
        """A transformers GPT2LMHeadModel computing what this model computes on token ids < vocab_size (a padded
        vocabulary is cropped: the padding rows were never a target). No biases (``bias=False``) are zero biases,
        which Hugging Face's GPT-2 always has."""
        from transformers import GPT2Config, GPT2LMHeadModel

        c = self.config
        if vocab_size > c.vocab_size:
            raise ValueError(f"vocab_size={vocab_size} is larger than the model's {c.vocab_size}")
        end = vocab_size - 1 if vocab_size == 50257 else None  # GPT-2's <|endoftext|>
        config = GPT2Config(vocab_size=vocab_size, n_positions=c.block_size, n_embd=c.n_embd, n_layer=c.n_layer,
                            n_head=c.n_head, activation_function=HF_GELU[c.gelu], layer_norm_epsilon=1e-5,
                            resid_pdrop=c.dropout, embd_pdrop=c.dropout, attn_pdrop=c.dropout,
                            bos_token_id=end, eos_token_id=end)
        hf = GPT2LMHeadModel(config)
        ours = self.state_dict()
        with torch.no_grad():
            for key, target in hf.state_dict().items():
                if key in ours:
                    value = ours[key].t() if key.endswith(CONV1D) else ours[key]
                    target.copy_(value[:vocab_size] if key in ("transformer.wte.weight", "lm_head.weight") else value)
                elif key.endswith(".bias"):
                    target.zero_()  # bias=False: the layer has none, which is a zero bias
                else:
                    raise KeyError(f"no weight for Hugging Face's {key}")
        return hf.eval()
