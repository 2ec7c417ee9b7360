"""The AdamS paper's Llama 2 runs (Section 4.2, Figure 1; 13B: the appendix) as torchtitan configs,
with our optimizers plugged into torchtitan's own container (optim/torchtitan.py).

    pip install -e ".[titan]"       # torchtitan 0.3.0 (in the dev extra too)
    torchrun --standalone --nproc_per_node=8 -m torchtitan.train \\
        --module config.torchtitan_llama2 --config llama2_7b_adams \\
        --hf_assets_path path/to/Llama-2-7b-hf       # a folder with Llama 2's tokenizer.json (gated)

Each function returns torchtitan's ``Trainer.Config``; its fields can be overridden on the command
line as torchtitan documents (``--training.steps 100``). The numbers are the ones train.py's
configs use, from config/recipes.py (``llama2_paper``): Llama 2's AdamW (β (0.9, 0.95), ε 1e-5,
weight decay 0.1, peak lr 3e-4 at 7B and the appendix's 1e-4 at 13B, decay to 10%), the paper's batch, context, warmup, linear decay,
clip 1.0 and length, and the paper's transfer rules for AdamS and Lion. torchtitan's recipe for the
rest: FSDP2 over all GPUs, bf16 parameters in compute with fp32 reduction, full activation
checkpointing, torch.compile, C4 streamed from the Hub, and weight decay on every tensor (its recipes'
choice; train.py's configs exempt norms).

The model is Llama 2 expressed with torchtitan's Llama 3 building blocks (no Llama 2 ships with
torchtitan 0.3): multi-head attention (no grouped queries), SwiGLU hidden size from multiple_of=256,
RoPE θ = 10,000 without Llama 3's scaling, vocabulary 32,000, untied output: 6,738,415,616
parameters at 7B and 13,015,864,320 at 13B, as Meta's checkpoints (tests/test_torchtitan.py).
It uses torchtitan helpers whose names start with an underscore; a torchtitan release other than
0.3.0 may move them.
"""

from __future__ import annotations

from adams_optim.torchtitan import optimizer_config
from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.metrics import MetricsProcessor
from torchtitan.components.optimizer import LRSchedulersContainer
from torchtitan.config import CompileConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.distributed.pipeline_parallel import pipeline_llm
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm, compute_ffn_hidden_dim
from torchtitan.models.llama3 import (
    _EMBEDDING_INIT,
    _NORM_INIT,
    Llama3Model,
    Llama3StateDictAdapter,
    _build_llama3_layers,
    _output_linear_init,
    parallelize_llama,
)
from torchtitan.protocols.model_spec import ModelSpec
from torchtitan.trainer import Trainer

from config.recipes import LLAMA2_RUNS, llama2_paper

# Our names for the optimizers -> torchtitan's (its own AdamW, our AdamS and Lion).
NAMES = {"adamw": "AdamW", "adams": "AdamS", "lion": "Lion"}


def llama2_model(n_layer: int, n_head: int, n_embd: int, vocab_size: int = 32_000, max_seq_len: int = 4096,
                 attn_backend: str = "flex") -> ModelSpec:
    """Llama 2's architecture (Touvron et al., 2023) in torchtitan's Llama 3 model."""
    model = Llama3Model.Config(
        dim=n_embd,
        vocab_size=vocab_size,
        tok_embeddings=Embedding.Config(num_embeddings=vocab_size, embedding_dim=n_embd, param_init=_EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=n_embd, param_init=_NORM_INIT),
        lm_head=Linear.Config(in_features=n_embd, out_features=vocab_size, param_init=_output_linear_init(n_embd)),
        layers=_build_llama3_layers(
            n_layers=n_layer, dim=n_embd, n_heads=n_head, n_kv_heads=None,
            hidden_dim=compute_ffn_hidden_dim(n_embd, multiple_of=256),
            rope=ComplexRoPE.Config(dim=n_embd // n_head, max_seq_len=max_seq_len, theta=10_000.0, scaling="none"),
            attn_backend=attn_backend,
        ),
    )
    return ModelSpec(name="llama3", flavor=f"llama2_{n_layer}x{n_embd}", model=model, parallelize_fn=parallelize_llama,
                     pipelining_fn=pipeline_llm, post_optimizer_build_fn=None, state_dict_adapter=Llama3StateDictAdapter)


def optimizer(name: str, settings: dict):
    """torchtitan's optimizer config for one of ours, from train.py's settings (``llama2_paper``)."""
    kwargs = dict(lr=settings["learning_rate"], betas=(settings["beta1"], settings["beta2"]),
                  weight_decay=settings["weight_decay"])
    if "eps" in settings:
        kwargs["eps"] = settings["eps"]
    return optimizer_config(NAMES[name], **kwargs)


def llama2_paper_run(size: str, name: str) -> Trainer.Config:
    """The paper's run of Llama 2 ``size`` ('7b', '13b') with optimizer ``name`` on 8 GPUs."""
    s = llama2_paper(size, name)
    micro_steps = LLAMA2_RUNS[size]["micro_steps"]
    model = llama2_model(s["n_layer"], s["n_head"], s["n_embd"], max_seq_len=s["block_size"])
    return Trainer.Config(
        model_spec=model,
        hf_assets_path="./assets/hf/Llama-2-7b-hf",
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=32_000)),
        optimizer=optimizer(name, s),
        lr_scheduler=LRSchedulersContainer.Config(
            warmup_steps=s["warmup_iters"], decay_type="linear", min_lr_factor=s["min_lr"] / s["learning_rate"]),
        training=TrainingConfig(
            local_batch_size=s["batch_size"], global_batch_size=s["batch_size"] * micro_steps * 8,
            seq_len=s["block_size"], max_norm=s["grad_clip"], steps=s["max_iters"]),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        activation_checkpoint=FullAC.Config(),
        compile=CompileConfig(enable=True),
        checkpoint=CheckpointManager.Config(interval=500),
        metrics=MetricsProcessor.Config(log_freq=10),
        dump_folder=f"./outputs/torchtitan_llama2_{size}_{name}",
    )


def llama2_7b_adamw() -> Trainer.Config:
    return llama2_paper_run("7b", "adamw")


def llama2_7b_adams() -> Trainer.Config:
    return llama2_paper_run("7b", "adams")


def llama2_7b_lion() -> Trainer.Config:
    return llama2_paper_run("7b", "lion")


def llama2_13b_adamw() -> Trainer.Config:
    return llama2_paper_run("13b", "adamw")


def llama2_13b_adams() -> Trainer.Config:
    return llama2_paper_run("13b", "adams")


def llama2_13b_lion() -> Trainer.Config:
    return llama2_paper_run("13b", "lion")
