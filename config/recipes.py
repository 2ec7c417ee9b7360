"""The two recipes behind the experiment files in config/: the AdamS paper's GPT-2 runs, and their
reproduction at CPU scale. Every number and its source is here, once.

An experiment file is a config file like any other (its top-level names are the settings) that
adopts a recipe in one line and may override settings below it:

    from config.recipes import gpt2_paper

    globals().update(gpt2_paper("small", "adams"))
    learning_rate = 3e-4  # a variant

``python train.py config/FILE.py`` prints the resolved settings when it starts.
"""

from __future__ import annotations

# How each optimizer's hyperparameters follow from AdamW's, by the paper's rules (Section 4.1 and
# the appendix): (lr multiplier, weight decay, (beta1, beta2) or None for the optimizer's own).
RULES = {
    "adamw": (1, 0.1, (0.9, 0.95)),  # the baseline: beta (0.9, 0.95), weight decay 0.1
    "adams": (1, 0.1, (0.9, 0.95)),  # AdamW's hyperparameters unchanged
    "adam_mini": (1, 0.1, (0.9, 0.95)),  # AdamW's hyperparameters
    "lion": (0.1, 1.0, (0.95, 0.98)),  # Chen et al. (2023): 0.1x lr, 10x weight decay, beta (0.95, 0.98)
    "adagrad": (1, 0.0, None),  # appendix: AdamW's lr and schedule, torch's defaults otherwise
    "rmsprop": (1, 0.0, None),  # appendix: as Adagrad
}

# GPT-2 sizes (OpenAI, 2019), the paper's peak AdamW learning rates, and the split of its 480
# sequences per step into micro-batches on 8 GPUs (micro-batch x micro-steps x GPUs = 480).
GPT2_SIZES = {
    "small": dict(n_layer=12, n_head=12, n_embd=768, learning_rate=6e-4, batch_size=12, micro_steps=5),  # 124M
    "medium": dict(n_layer=24, n_head=16, n_embd=1024, learning_rate=3e-4, batch_size=6, micro_steps=10),  # 355M
    "large": dict(n_layer=36, n_head=20, n_embd=1280, learning_rate=3e-4, batch_size=4, micro_steps=15),  # 774M
}


def scaled(value: float, factor: float) -> float:
    """value x factor, rounded to 12 significant digits: 0.1 x 3e-3 is then the 3e-4 a person writes."""
    return float(f"{value * factor:.12g}")


def optimizer_settings(optimizer: str, adamw_lr: float) -> dict:
    lr_scale, weight_decay, betas = RULES[optimizer]
    learning_rate = scaled(adamw_lr, lr_scale)
    out = dict(optimizer=optimizer, learning_rate=learning_rate, min_lr=scaled(learning_rate, 0.1),
               weight_decay=weight_decay)  # min_lr: cosine to 0.1x the peak (Rae et al., 2021)
    if betas:
        out.update(beta1=betas[0], beta2=betas[1])
    return out


def gpt2_paper(size: str, optimizer: str, iters: int = 100_000) -> dict:
    """The paper's GPT-2 run (Section 4.1, nanoGPT on OpenWebText): context 1024, 480 sequences
    (491,520 tokens) per step, warmup 2000, cosine to 0.1x lr, clip 1.0, float16."""
    model = dict(GPT2_SIZES[size])
    micro_steps, adamw_lr = model.pop("micro_steps"), model.pop("learning_rate")
    name = f"train_gpt2_{size}_{optimizer}{'' if iters == 100_000 else f'_{iters // 1000}k'}"
    return dict(
        out_dir=f"out/{name}", wandb_run_name=name, dataset="openwebtext",
        block_size=1024, bias=True, dropout=0.0, **model,
        gradient_accumulation_steps=micro_steps * 8,  # summed over all ranks; divided by the world size at launch
        **optimizer_settings(optimizer, adamw_lr),
        grad_clip=1.0, max_iters=iters, lr_decay_iters=iters, warmup_iters=2000,
        eval_interval=1000, eval_iters=200, log_interval=10,
        # The paper trained in float16 (with a GradScaler). On Ampere or Hopper GPUs, bfloat16 is
        # the better choice: same speed, no loss scaling, no overflow: pass --dtype=bfloat16.
        dtype="float16", compile=True,
    )


def cpu_repro(optimizer: str) -> dict:
    """The paper's recipe scaled to a 2-core CPU (results/README.md): a 0.82M-parameter GPT
    (4 layers, width 128; --n_embd=256 gives 3.2M) on the embedded corpus, 16 x 128 = 2,048 byte
    tokens per step for 600 steps, warmup 60, cosine to 0.1x lr, clip 1.0, AdamW's lr 3e-3."""
    return dict(
        dataset="pystdlib", n_layer=4, n_head=4, n_embd=128, block_size=128, batch_size=16,
        gradient_accumulation_steps=1, **optimizer_settings(optimizer, 3e-3),
        grad_clip=1.0, max_iters=600, lr_decay_iters=600, warmup_iters=60,
        eval_interval=50, eval_iters=20,  # the same 20 x 16 validation windows at every evaluation, for every run
        log_interval=10, device="cpu", dtype="float32",
    )
