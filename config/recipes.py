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
# the appendix): (lr multiplier, weight decay, (beta1, beta2) or None for the optimizer's own,
# eps or None for an optimizer without one).
RULES = {
    "adamw": (1, 0.1, (0.9, 0.95), 1e-8),  # the baseline: beta (0.9, 0.95), weight decay 0.1, torch's eps
    "adams": (1, 0.1, (0.9, 0.95), 1e-8),  # AdamW's hyperparameters unchanged (the authors' AdamS: eps 1e-8)
    "adam_mini": (1, 0.1, (0.9, 0.95), 1e-8),  # AdamW's hyperparameters
    "lion": (0.1, 1.0, (0.95, 0.98), None),  # Chen et al. (2023): 0.1x lr, 10x weight decay, beta (0.95, 0.98)
    # appendix B: "the same learning rate and learning rate decay schedule as those of AdamW, and other
    # hyperparameters as default", i.e. torch's: no weight decay, Adagrad's eps 1e-10, RMSprop's 1e-8
    # (alpha 0.99). The authors' released code has no Adagrad or RMSprop to read them from.
    "adagrad": (1, 0.0, None, 1e-10),
    "rmsprop": (1, 0.0, None, 1e-8),
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
    lr_scale, weight_decay, betas, eps = RULES[optimizer]
    learning_rate = scaled(adamw_lr, lr_scale)
    out = dict(optimizer=optimizer, learning_rate=learning_rate, min_lr=scaled(learning_rate, 0.1),
               weight_decay=weight_decay)  # min_lr: cosine to 0.1x the peak (Rae et al., 2021)
    if betas:
        out.update(beta1=betas[0], beta2=betas[1])
    if eps is not None:
        out.update(eps=eps)
    return out


# The authors' released code (github.com/pku-huzhang/AdamS, nanoGPT/train.py and config/train_gpt2*.py)
# fixes what the paper leaves unstated: a GPT-2 without biases (nanoGPT's bias=False), a cosine over
# max_iters = lr_decay_iters = 600,000 iterations, and an evaluation every 1,000 iterations over 200
# batches. The 600K cosine is an inference, and the paper reads two ways. (a) Its runs were launched
# with the released configs and stopped at 100K or 300K iterations (Figure 4, Tables 3-4): the lr is
# then still 94.2% of the peak at 100K (55.2% at 300K) and never reaches the "final learning rate
# 0.1 x lr" the paper states. (b) The stated final lr is what its runs reached: a cosine that ends with
# the run. The default here is (a), because the released configs are the only record of the runs
# and nothing in the paper says they were edited; ``decay_iters=iters`` gives (b) (the ``_cosine100k``
# variant files), also the better choice for a run of fixed length. The released configs are not a
# record of every run, though: the released configure_optimizers builds AdamS when opt == 'Lion', and
# the released train.py reads ``learning_rate`` where the Lion config sets ``lr``, so the Lion config
# as released trains AdamS at the default lr. For Lion, the settings here follow the paper (Section 4.1:
# Chen et al.'s 0.1x lr and 10x weight decay, beta (0.95, 0.98)), not that file.
AUTHORS_DECAY_ITERS = 600_000


def gpt2_paper(size: str, optimizer: str, iters: int = 100_000, decay_iters: int = AUTHORS_DECAY_ITERS) -> dict:
    """The paper's GPT-2 run (Section 4.1, nanoGPT on OpenWebText): context 1024, 480 sequences
    (491,520 tokens) per step, warmup 2000, cosine to 0.1x lr, clip 1.0, float16; no biases and a
    cosine over ``decay_iters`` iterations (600K) as in the authors' code, stopped at ``iters``."""
    model = dict(GPT2_SIZES[size])
    micro_steps, adamw_lr = model.pop("micro_steps"), model.pop("learning_rate")
    suffix = "" if iters == 100_000 else f"_{iters // 1000}k"
    suffix += "" if decay_iters == AUTHORS_DECAY_ITERS else f"_cosine{decay_iters // 1000}k"
    name = f"train_gpt2_{size}_{optimizer}{suffix}"
    return dict(
        out_dir=f"out/{name}", wandb_run_name=name, dataset="openwebtext",
        block_size=1024, bias=False, dropout=0.0, **model,
        gradient_accumulation_steps=micro_steps * 8,  # summed over all ranks; divided by the world size at launch
        **optimizer_settings(optimizer, adamw_lr),
        grad_clip=1.0, max_iters=iters, lr_decay_iters=decay_iters, warmup_iters=2000,
        eval_interval=1000, eval_iters=200, log_interval=10,
        # The paper trained in float16 (with a GradScaler). On Ampere or Hopper GPUs, bfloat16 is
        # the better choice: same speed, no loss scaling, no overflow: pass --dtype=bfloat16.
        dtype="float16", compile=True,
    )


def cpu_repro(optimizer: str) -> dict:
    """The paper's recipe scaled to a 2-core CPU (study/README.md): a 0.82M-parameter GPT
    (4 layers, width 128; --n_embd=256 gives 3.2M) on the embedded corpus, 16 x 128 = 2,048 byte
    tokens per step for 600 steps, warmup 60, cosine to 0.1x lr, clip 1.0, AdamW's lr 3e-3."""
    return dict(
        dataset="pystdlib", n_layer=4, n_head=4, n_embd=128, block_size=128, batch_size=16,
        gradient_accumulation_steps=1, **optimizer_settings(optimizer, 3e-3),
        grad_clip=1.0, max_iters=600, lr_decay_iters=600, warmup_iters=60,
        eval_interval=50, eval_iters=20,  # the same 20 x 16 validation windows at every evaluation, for every run
        log_interval=10, device="cpu", dtype="float32",
    )


# Llama 2 (Touvron et al., 2023): AdamW beta (0.9, 0.95), eps 1e-5, weight decay 0.1, clip 1.0, peak lr 3e-4
# for 7B and 13B, warmup 2000, the lr decaying to 10% of the peak. The AdamS paper keeps these for 7B and
# decays linearly (Section 4.2): 1,024 sequences of 4,096 tokens (4M tokens) per step for 8K steps.
# The paper says only "linear decay"; the configs decay linearly to 0.1x the peak, Llama 2's floor, which
# the paper's "same hyperparameters as Llama 2" implies. torchtitan's own default decays to 0: pass
# --min_lr=0 to follow it instead.
# Its 13B run (appendix) follows Adam-mini's setting instead: 2 x 8 sequences of 2,048 tokens, warmup
# 100, 30K steps, and a peak lr of 1e-4.
LLAMA2_RUNS = {
    # n_layer, n_head, n_embd; context; micro-batch per GPU x micro-steps x 8 GPUs; steps, warmup
    "7b": dict(n_layer=32, n_head=32, n_embd=4096, block_size=4096, batch_size=4, micro_steps=32, max_iters=8000,
               warmup_iters=2000, learning_rate=3e-4),  # 4 x 32 x 8 = 1,024 sequences x 4,096 = 4,194,304 tokens per step
    "13b": dict(n_layer=40, n_head=40, n_embd=5120, block_size=2048, batch_size=2, micro_steps=1, max_iters=30000,
                warmup_iters=100, learning_rate=1e-4),  # 2 x 1 x 8 = 16 sequences x 2,048 = 32,768 tokens per step
}


def llama2_paper(size: str, optimizer: str) -> dict:
    """The paper's Llama 2 run on C4 (Section 4.2; 13B: its appendix), on one node of 8 GPUs: FSDP2,
    bf16, activation checkpointing, torch.compile. The data must be C4 tokenised with Llama 2's
    tokenizer (python -m data.c4.prepare --tokenizer .../tokenizer.model): its vocabulary is 32,000."""
    run = dict(LLAMA2_RUNS[size])
    micro_steps, iters, adamw_lr = run.pop("micro_steps"), run["max_iters"], run.pop("learning_rate")
    name = f"train_llama2_{size}_{optimizer}"
    settings = optimizer_settings(optimizer, adamw_lr)
    if optimizer in ("adamw", "adams", "adam_mini"):
        settings["eps"] = 1e-5  # Llama 2's
    return dict(
        out_dir=f"out/{name}", wandb_run_name=name, dataset="c4", model="llama", bias=False, dropout=0.0, **run,
        gradient_accumulation_steps=micro_steps * 8, **settings, grad_clip=1.0, lr_decay_iters=iters,
        decay_shape="linear", eval_interval=200, eval_iters=40, log_interval=10,
        dtype="bfloat16", fsdp=True, activation_checkpointing=True, compile=True,
    )
