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
        model = checkpoint.model_of(resume)
    elif cfg.init_from in ("scratch", "auto"):  # auto with no checkpoint yet starts from scratch
        model_cls, config_cls = architecture(cfg.model)
        shape = dict(block_size=cfg.block_size, vocab_size=dataset.model_vocab(data_vocab), n_layer=cfg.n_layer,
                     n_head=cfg.n_head, n_embd=cfg.n_embd, dropout=cfg.dropout)
        model = model_cls(config_cls(**shape, **(dict(bias=cfg.bias, gelu=cfg.gelu) if cfg.model == "gpt2" else {})))
    else:
        cfg.model = hf_model_type(cfg.init_from)
        try:
            model = architecture(cfg.model)[0].from_pretrained(cfg.init_from, dropout=cfg.dropout)
        except Exception as e:  # transformers' errors on a path that is not a model, whatever their class
            raise UserError(f"init_from='{cfg.init_from}' is neither 'scratch', 'resume', nor a GPT-2 name or local "
                            f"Hugging Face directory that can be loaded here ({e.__class__.__name__})") from e
        if cfg.block_size < model.config.block_size:
            model.crop_block_size(cfg.block_size)
        for key in ("n_layer", "n_head", "n_embd", "bias", "gelu"):
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


def skips_on_device(optimizer) -> bool:
    """Whether ``optimizer`` can skip a step from a flag on the device, as torch's fused optimizers do for
    GradScaler (``found_inf``): then a step makes the host wait for nothing."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


class Guard:
    """The non-finite guard of every step and the bookkeeping of the steps between two reads, kept on the device.

    A step whose mean loss or gradient norm is not finite is skipped: the parameters and the optimizer's state,
    step count included, stay as they were. With float16 the GradScaler owns overflowing gradients (it skips
    those steps itself, uncounted, and lowers its scale); a non-finite loss is added to its flag, so that step
    is skipped and counted. The flag never leaves the device when the optimizer takes it (``skips_on_device``:
    torch's fused AdamW, Adam, SGD); any other optimizer needs the host to decide, one sync a step (GradScaler
    does the same for it). ``read`` brings the last step's loss and
    norm, the skips and clips since the last read, and the first step that ran past ``max_skips`` skips in a
    row: the one wait on the GPU, at log intervals and before evaluations."""

    def __init__(self, optimizer, scaler, grad_clip: float, max_skips: int, device: torch.device):
        self.optimizer, self.scaler, self.grad_clip, self.max_skips = optimizer, scaler, grad_clip, max_skips
        self.on_device = skips_on_device(optimizer)
        zero = torch.zeros((), device=device)
        self.last = torch.zeros(2, device=device)  # the last step's (mean loss, gradient norm)
        self.in_a_row, self.skipped, self.clipped = zero.clone(), zero.clone(), zero.clone()
        self.over = torch.full((3,), -1.0, device=device, dtype=torch.float64)  # (iteration, loss, norm) | -1

    def step(self, it: int, loss: torch.Tensor, norm: torch.Tensor) -> None:
        """Take iteration ``it``'s optimizer step unless its loss or norm (0-d tensors) is not finite."""
        # (with float16, overflowing gradients are the scaler's own: it skips those steps uncounted)
        bad = ~torch.isfinite(loss) if self.scaler.is_enabled() else ~(torch.isfinite(loss) & torch.isfinite(norm))
        if self.scaler.is_enabled():  # float16: the scaler skips the step on its flag, made to say the loss's too
            for found in self.scaler._per_optimizer_states[id(self.optimizer)]["found_inf_per_device"].values():
                torch.maximum(found, bad.to(found), out=found)  # 1 or 0: the fused kernels skip on exactly 1
            self.scaler.step(self.optimizer)
        elif self.on_device:
            self.optimizer.grad_scale, self.optimizer.found_inf = None, bad.float()
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.grad_scale, self.optimizer.found_inf
        elif not bad.item():  # the host decides: this optimizer cannot skip from a device flag
            self.optimizer.step()
        self.scaler.update()
        self.last = torch.stack([loss.float(), norm.float()])
        self.in_a_row = torch.where(bad, self.in_a_row + 1, 0.0)
        self.skipped += bad
        if self.grad_clip > 0:
            self.clipped += norm > self.grad_clip
        first = (self.in_a_row > self.max_skips) & (self.over[0] < 0)
        at = torch.full((), float(it), device=loss.device, dtype=torch.float64)  # a fill: no copy from the host
        self.over = torch.where(first, torch.stack([at, loss.double(), norm.double()]), self.over)

    def read(self) -> dict:
        """The values since the last read (one wait on the device), and the counters started again."""
        loss, norm, in_a_row, skipped, clipped, over_it, over_loss, over_norm = torch.cat(
            [self.last.double(), torch.stack([self.in_a_row, self.skipped, self.clipped]).double(), self.over]).tolist()
        self.skipped.zero_()
        self.clipped.zero_()
        return dict(loss=loss, norm=norm, in_a_row=int(in_a_row), skipped=int(skipped), clipped=int(clipped),
                    over=None if over_it < 0 else (int(over_it), over_loss, over_norm))
