"""Training configuration: one typed dataclass of defaults, config files, command-line overrides.

    python train.py [config/file.py ...] [--key=value ...]

Config files are plain Python assignments, as in nanoGPT. Precedence: defaults < files (in order)
< command line. Every key is checked: an unknown key is an error that suggests the closest valid
one, and a value is coerced only where that is safe (an int for a float, 1e5 for an int).

The defaults are the embedded run: `python train.py` with no arguments trains a small GPT with
AdamS on the Python standard library's own source, on any machine, offline, in a few minutes.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import math
import re
import runpy
import types
from dataclasses import dataclass, fields
from pathlib import Path

from errors import UserError


@dataclass
class TrainConfig:
    # I/O
    out_dir: str = "out"  # checkpoints, config.json and metrics.jsonl go here
    eval_interval: int = 200  # iterations between evaluations (and checkpoints)
    log_interval: int = 10  # iterations between log lines; 1 logs every iteration
    eval_iters: int = 20  # batches per evaluation (the same batches every time)
    eval_only: bool = False  # evaluate once and exit
    sample_tokens: int = 300  # tokens of text printed at the end of a run, to see what the model learned; 0: none
    always_save_checkpoint: bool = True  # save at every eval, not only when val loss improves
    init_from: str = "scratch"  # 'scratch', 'resume' (out_dir's latest checkpoint), 'auto' (resume if there is one), or a GPT-2 name / local HF directory
    keep_checkpoints: int = 2  # how many of the newest checkpoints to keep in out_dir/checkpoints
    overwrite: bool = False  # let a fresh run delete the run already in out_dir
    # wandb
    wandb_log: bool = False  # also log to Weights & Biases (honours WANDB_MODE=offline)
    wandb_project: str = "adams-gpt"  # wandb project name
    wandb_run_name: str = "run"  # wandb run name
    # data
    dataset: str = "pystdlib"  # folder under data_dir holding train.bin and val.bin
    data_dir: str = "data"  # relative paths are taken from the repository root
    gradient_accumulation_steps: int = 1  # micro-steps per iteration, summed over all ranks
    batch_size: int = 16  # sequences per micro-step per rank
    block_size: int = 128  # tokens per sequence
    # model
    model: str = "gpt2"  # 'gpt2' (model.py) or 'llama' (model_llama.py: RMSNorm, rotary, SwiGLU, no biases)
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 128  # width of the residual stream
    dropout: float = 0.0  # 0 for pretraining; try 0.1+ for fine-tuning
    bias: bool = False  # biases in Linear and LayerNorm layers (GPT-2 has them; Llama has none)
    activation_checkpointing: bool = False  # recompute each block's activations in backward: less memory, ~1/3 more compute
    # optimizer
    optimizer: str = "adams"  # a name from optim.OPTIMIZERS
    learning_rate: float = 1e-3  # peak; AdamS's best was ~1/4 of AdamW's best at 2K-32K tokens per step (README)
    max_iters: int = 1200  # total iterations
    weight_decay: float = 0.1  # decoupled; matrices and embeddings only
    beta1: float = 0.9  # momentum coefficient (AdamW, AdamS, Adam-mini, Lion)
    beta2: float = 0.95  # second-moment coefficient; AdamS: the old momentum's weight in v (0.99 worth a try, 0.999 fragile)
    eps: float = 1e-8  # for optimizers that take one
    bias_correction: bool = True  # AdamS: divide the momentum by 1 - beta1^t (the authors' code)
    embedding_lr_scale: float = 1.0  # the token embedding's and output head's lr, as a multiple of the schedule's
    implementation: str = "auto"  # 'auto', 'loop', 'foreach' or 'fused' where the optimizer has them
    grad_clip: float = 1.0  # clip the gradient's global norm to this; 0 disables
    max_consecutive_skips: int = 10  # a NaN/Inf loss or gradient skips the step; stop after this many in a row (0: at the first)
    # learning rate schedule: linear warmup, then cosine (or linear) decay to min_lr
    decay_lr: bool = True  # False keeps learning_rate constant
    decay_shape: str = "cosine"  # 'cosine' (GPT-2 runs) or 'linear' (the paper's Llama runs)
    warmup_iters: int = 100  # linear warmup from ~0 to learning_rate
    lr_decay_iters: int = 1200  # ~ max_iters, per Chinchilla
    min_lr: float = 1e-4  # ~ learning_rate / 10, per Chinchilla and the AdamS paper
    # system
    backend: str = "auto"  # DDP backend: 'nccl', 'gloo', or 'auto' (nccl on CUDA, gloo on CPU)
    device: str = "auto"  # 'cpu', 'cuda', 'cuda:N', 'mps', or 'auto'
    dtype: str = "auto"  # 'float32', 'bfloat16', 'float16', or 'auto' (bf16 on GPUs that have it, else fp32)
    compile: bool = False  # torch.compile the model (worth it on GPUs, slow to start on CPUs)
    fsdp: bool = False  # shard parameters, gradients and optimizer state across ranks (FSDP2's fully_shard)
    seed: int = 1337  # model init and every batch derive from it


CHOICES = {
    "optimizer": None,  # filled from the registry in check()
    "model": ("gpt2", "llama"),
    "decay_shape": ("cosine", "linear"),
    "implementation": ("auto", "loop", "foreach", "fused"),
    "backend": ("auto", "nccl", "gloo"),
    "dtype": ("auto", "float32", "bfloat16", "float16"),
}


def documented_fields() -> list[tuple[str, str, str]]:
    """(key, default as written, comment) for each TrainConfig field, read from this file's source."""
    source = Path(__file__).read_text()
    body = source[source.index("class TrainConfig"):source.index("CHOICES")]
    rows = []
    for line in body.splitlines():
        match = re.match(r"\s+(\w+): \w+ = (.+?)(?:\s+#\s*(.*))?$", line)
        if match:
            key, default, comment = match.groups()
            rows.append((key, default, comment or ""))
    return rows


def usage() -> str:
    """What `python train.py --help` prints: how to call it, then every key with its default."""
    keys = "\n".join(f"  --{key}={default}  {comment}" for key, default, comment in documented_fields())
    return __doc__.strip() + "\n\nkeys (default, meaning):\n" + keys


def _field_types() -> dict[str, type]:
    return {f.name: type(f.default) for f in fields(TrainConfig)}


def _closest(key: str) -> str:
    match = difflib.get_close_matches(key, _field_types(), n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def coerce(key: str, value, source: str):
    """``value`` as the type of field ``key``, or a UserError naming the key and the source."""
    types_ = _field_types()
    if key not in types_:
        raise UserError(f"unknown config key '{key}' in {source}{_closest(key)}")
    want = types_[key]
    if want is bool and isinstance(value, bool):
        return value
    if want is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if want is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if want is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if want is str and isinstance(value, str):
        return value
    raise UserError(f"config key '{key}' in {source} must be {want.__name__}, got {value!r}")


def parse_cli_value(key: str, text: str):
    """A command-line string as a Python value: literals where they parse, else the string."""
    want = _field_types().get(key)
    if want is bool and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if want is str:
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def load(argv: list[str]) -> TrainConfig:
    """Defaults, then each config file, then each --key=value, in the order given."""
    return load_explicit(argv)[0]


def load_explicit(argv: list[str]) -> tuple[TrainConfig, set[str]]:
    """``load``'s config and the keys that a config file or the command line set (the rest are defaults)."""
    values: dict = {}
    for arg in argv:
        if arg.startswith("--"):
            key, eq, text = arg[2:].partition("=")
            if not eq:
                raise UserError(f"command-line override '{arg}' needs a value: write --{key}=VALUE")
            key = key.replace("-", "_")
            values[key] = coerce(key, parse_cli_value(key, text), "the command line")
        else:
            values.update(read_config_file(arg))
    return TrainConfig(**values), set(values)


# What a resumed run takes from the run itself and may not change: the model, what it trains on, how its
# optimizer's state is laid out. Everything else (length, schedule, logging, device, ...) may be overridden.
FIXED_ON_RESUME = ("model", "n_layer", "n_head", "n_embd", "block_size", "bias", "optimizer", "dataset",
                   "embedding_lr_scale")
# Not taken from the run: where it is, how this invocation treats it, and the machine it runs on.
PER_INVOCATION = ("out_dir", "init_from", "overwrite", "eval_only", "device", "backend")


def resumed(saved: dict, cfg: TrainConfig, explicit: set[str], where: str) -> tuple[TrainConfig, dict]:
    """The config of a resumed run, as nanoGPT resumes: the run's own settings (``saved``, its
    checkpoint's config), with what this invocation set explicitly (``explicit`` keys of ``cfg``)
    on top; the keys in FIXED_ON_RESUME must agree. Returns it and {key: (run's, now)} for every
    setting the invocation changed."""
    current = as_dict(cfg)
    merged = {k: saved.get(k, current[k]) for k in current}
    for key in FIXED_ON_RESUME:
        if key in explicit and key in saved and current[key] != saved[key]:
            raise UserError(f"{where} holds a run with {key}={saved[key]!r}; {key}={current[key]!r} cannot continue it. "
                            f"Drop --{key} to continue it as it was, or start a new run in another out_dir")
    changed = {}
    for key in [k for k in current if k in explicit or k in PER_INVOCATION]:  # in the config's order
        if key in FIXED_ON_RESUME:
            continue
        if key in explicit and key not in PER_INVOCATION and merged[key] != current[key]:
            changed[key] = (merged[key], current[key])
        merged[key] = current[key]
    return TrainConfig(**merged), changed


def read_config_file(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file '{path}' does not exist; pass a path like config/train_gpt2_small_adams.py")
    try:
        namespace = runpy.run_path(str(p))
    except Exception as e:  # a config file is user code: report its error in one line
        raise UserError(f"config file '{path}' failed to run: {type(e).__name__}: {e}") from e
    out = {}
    for key, value in namespace.items():
        if key.startswith("_") or isinstance(value, (types.ModuleType, types.FunctionType, type)):
            continue
        out[key] = coerce(key, value, f"config file '{path}'")
    return out


def check(cfg: TrainConfig, world_size: int = 1) -> None:
    """Cross-field checks, before anything is built; each failure names the fields and a fix."""
    from optim import OPTIMIZERS

    choices = dict(CHOICES, optimizer=tuple(OPTIMIZERS))
    for key, allowed in choices.items():
        if getattr(cfg, key) not in allowed:
            raise UserError(f"{key}='{getattr(cfg, key)}' is not one of: {', '.join(allowed)}")
    positive = ("eval_interval", "log_interval", "eval_iters", "gradient_accumulation_steps", "batch_size",
                "block_size", "n_layer", "n_head", "n_embd")
    for key in positive:
        if getattr(cfg, key) < 1:
            raise UserError(f"{key} must be at least 1, got {getattr(cfg, key)}")
    if cfg.keep_checkpoints < 2:
        raise UserError(f"keep_checkpoints must be at least 2 (one may be mid-write), got {cfg.keep_checkpoints}")
    for key in ("max_iters", "warmup_iters", "lr_decay_iters", "max_consecutive_skips", "sample_tokens"):
        if getattr(cfg, key) < 0:
            raise UserError(f"{key} must be >= 0, got {getattr(cfg, key)}")
    for key in ("learning_rate", "min_lr", "weight_decay", "eps", "grad_clip"):
        value = getattr(cfg, key)
        if not (math.isfinite(value) and value >= 0):
            raise UserError(f"{key} must be a finite number >= 0, got {value}")
    for key in ("beta1", "beta2"):
        if not 0 <= getattr(cfg, key) < 1:
            raise UserError(f"{key} must be in [0, 1), got {getattr(cfg, key)}")
    if not 0 <= cfg.dropout < 1:
        raise UserError(f"dropout must be in [0, 1), got {cfg.dropout}")
    if cfg.model == "llama" and cfg.bias:
        raise UserError("model='llama' has no biases; drop --bias=True")
    if cfg.n_embd % cfg.n_head:
        raise UserError(f"n_embd={cfg.n_embd} is not divisible by n_head={cfg.n_head}; pick n_embd a multiple of n_head")
    if cfg.decay_lr and cfg.warmup_iters > cfg.lr_decay_iters:
        raise UserError(f"warmup_iters={cfg.warmup_iters} is longer than lr_decay_iters={cfg.lr_decay_iters}; "
                        "make warmup shorter than the decay")
    if cfg.min_lr > cfg.learning_rate:
        raise UserError(f"min_lr={cfg.min_lr} is above learning_rate={cfg.learning_rate}; set min_lr <= learning_rate")
    if cfg.fsdp and cfg.dtype == "float16":
        raise UserError("fsdp=True with dtype='float16' is not supported (it needs a sharded GradScaler); "
                        "use --dtype=bfloat16, or float32")
    if cfg.gradient_accumulation_steps % world_size:
        raise UserError(f"gradient_accumulation_steps={cfg.gradient_accumulation_steps} is not divisible by the "
                        f"world size {world_size}; make it a multiple of the number of processes")


def as_dict(cfg: TrainConfig) -> dict:
    return dataclasses.asdict(cfg)
