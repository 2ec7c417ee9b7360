"""One training step as train.py takes it and plan.py simulates it: the model a run builds, the settings its
optimizer takes, and an iteration's micro-steps (forward, backward, accumulation, sync, clipping)."""

from __future__ import annotations

import torch
from adams_optim import hyperparameters

import checkpoint
import configurator
import data_parallel
import dataset
from architectures import architecture, hf_model_type
from configurator import TrainConfig
from errors import UserError
from model import LanguageModel


def build_model(cfg: TrainConfig, data_vocab: int, resume: dict | None) -> LanguageModel:
    """A new model, the one a checkpoint holds (weights loaded later, once it is wrapped), or
    Hugging Face GPT-2 or Llama weights. The last two decide the architecture; the config must agree."""
    if resume is not None:
        if resume["model_source"] == "scratch":
            checkpoint.check_shape(resume, configurator.as_dict(cfg), f"the checkpoint in {cfg.out_dir}")
        model_cls, config_cls = architecture(resume.get("model_type", "gpt2"))
        model = model_cls(config_cls(**resume["model_args"]))
    elif cfg.init_from in ("scratch", "auto"):  # auto with no checkpoint yet starts from scratch
        model_cls, config_cls = architecture(cfg.model)
        shape = dict(block_size=cfg.block_size, vocab_size=dataset.model_vocab(data_vocab), n_layer=cfg.n_layer,
                     n_head=cfg.n_head, n_embd=cfg.n_embd, dropout=cfg.dropout)
        model = model_cls(config_cls(**shape, **({"bias": cfg.bias} if cfg.model == "gpt2" else {})))
    else:
        cfg.model = hf_model_type(cfg.init_from)
        try:
            model = architecture(cfg.model)[0].from_pretrained(cfg.init_from, dropout=cfg.dropout)
        except Exception as e:  # transformers' errors on a path that is not a model, whatever their class
            raise UserError(f"init_from='{cfg.init_from}' is neither 'scratch', 'resume', nor a GPT-2 name or local "
                            f"Hugging Face directory that can be loaded here ({e.__class__.__name__})") from e
        if cfg.block_size < model.config.block_size:
            model.crop_block_size(cfg.block_size)
        for key in ("n_layer", "n_head", "n_embd", "bias"):
            if hasattr(model.config, key):
                setattr(cfg, key, getattr(model.config, key))  # the checkpoint decides the architecture
    if data_vocab > model.config.vocab_size:
        raise UserError(f"the dataset's vocabulary ({data_vocab}) is larger than the model's "
                        f"({model.config.vocab_size}); this checkpoint cannot read this data")
    if cfg.block_size > model.config.block_size:
        raise UserError(f"block_size={cfg.block_size} is longer than the checkpoint's {model.config.block_size}")
    model.checkpointing = cfg.activation_checkpointing
    return model


def optimizer_kwargs(cfg: TrainConfig, announce: bool) -> dict:
    """The config's optimizer settings that the chosen optimizer takes (SGD has no betas, ...).
    Settings it does not take are dropped, with a note when they differ from the defaults."""
    keys = dict(lr=("learning_rate",), betas=("beta1", "beta2"), weight_decay=("weight_decay",), eps=("eps",),
                bias_correction=("bias_correction",))
    accepted = hyperparameters(cfg.optimizer)
    defaults = TrainConfig()
    ignored = [k for arg, ks in keys.items() if arg not in accepted for k in ks if getattr(cfg, k) != getattr(defaults, k)]
    if ignored and announce:
        print(f"note: {cfg.optimizer} does not use {', '.join(ignored)}; those settings are ignored")
    values = {arg: tuple(getattr(cfg, k) for k in ks) if len(ks) > 1 else getattr(cfg, ks[0]) for arg, ks in keys.items()}
    return {arg: v for arg, v in values.items() if arg in accepted}


def gradients(model, batches, micro_steps: int, autocast, scaler, optimizer, params: list, grad_clip: float):
    """One iteration's forward and backward passes over its ``micro_steps`` micro-batches ``batches`` ((x, y)
    pairs), the gradients accumulated and then unscaled and clipped: (the mean loss, the gradient's norm before
    clipping), both still on the device. plan.py runs this very code on fake tensors."""
    loss_sum = None
    for micro, (x, y) in enumerate(batches):
        data_parallel.sync_gradients(model, micro == micro_steps - 1)
        with autocast:
            _, loss = model(x, y)
            loss = loss / micro_steps  # DDP averages the ranks' gradients
        scaler.scale(loss).backward()
        loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else float("inf"))
    return loss_sum, data_parallel.full(grad_norm)  # (FSDP2 returns this rank's part of the norm)
