"""Training configuration: one typed dataclass of defaults, config files, command-line overrides.

    python train.py [config/file.py ...] [--key=value ...]
    python train.py [config/file.py ...] [--key=value ...] --plan=KIND [--plan_gpus=N] [--plan_json=FILE]

--plan trains nothing: it plans the run's memory and time on N GPUs of KIND (h100-80gb, h200-141gb,
a100-40gb, a100-80gb) on this CPU (plan.py).

Config files are plain Python assignments, as in nanoGPT. Precedence: defaults < files (in order)
< command line. Every key is checked: an unknown key is an error that suggests the closest valid
one, and a value is coerced only where that is safe (an int for a float, 1e5 for an int).

The defaults are the embedded run: `python train.py` with no arguments trains a small GPT with
AdamS on the Python standard library's own source, on any machine, offline, in a few minutes.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import functools
import json
import math
import os
import re
import runpy
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated

import cli
from errors import UserError

# The kind of each key (cli.Kind: its type and range), declared once, where the key is: the command line, a config
# file and a TrainConfig built in code are all checked against it (``coerce``, ``check``).
Count = Annotated[int, cli.count]  # at least 1
Natural = Annotated[int, cli.natural]  # at least 0
Seed = Annotated[int, cli.seed]
Rate = Annotated[float, cli.nonnegative]  # finite, at least 0
Unit = Annotated[float, cli.beta]  # in [0, 1)
Text = Annotated[str, cli.text()]
Keep = Annotated[int, cli.integer(2, says="an integer >= 2 (one checkpoint may be mid-write)")]
Architecture = Annotated[str, cli.choice("gpt2", "llama")]
Optimizer = Annotated[str, cli.choice(lazily=lambda: __import__("adams_optim").OPTIMIZERS)]
Implementation = Annotated[str, cli.choice("auto", "loop", "foreach", "fused")]
Shape = Annotated[str, cli.choice("cosine", "linear")]
Gelu = Annotated[str, cli.choice("tanh", "exact")]
Backend = Annotated[str, cli.choice("auto", "nccl", "gloo")]
Device = Annotated[str, cli.Kind("auto, cpu, cuda, cuda:N or mps", str,
                                 lambda v: re.fullmatch(r"auto|cpu|mps|cuda(:\d{1,3})?", v) is not None, str)]
Dtype = Annotated[str, cli.choice("auto", "float32", "bfloat16", "float16")]


@dataclass
class TrainConfig:
    # I/O
    out_dir: Text = "out"  # checkpoints, config.json and metrics.jsonl go here
    eval_interval: Count = 200  # iterations between evaluations (and checkpoints)
    log_interval: Count = 10  # iterations between log lines; 1 logs every iteration
    eval_iters: Count = 20  # batches per evaluation (the same batches every time)
    eval_only: bool = False  # evaluate once and exit
    sample_tokens: Natural = 300  # tokens of text printed at the end of a run, to see what the model learned; 0: none
    always_save_checkpoint: bool = True  # save at every eval, not only when val loss improves
    init_from: Text = "scratch"  # 'scratch', 'resume' (out_dir's latest checkpoint), 'auto' (resume if there is one), or a GPT-2 name / local HF directory
    keep_checkpoints: Keep = 2  # how many of the newest checkpoints to keep in out_dir/checkpoints
    overwrite: bool = False  # let a fresh run replace the run already in out_dir (once it has taken its first step)
    # wandb
    wandb_log: bool = False  # also log to Weights & Biases (honours WANDB_MODE=offline)
    wandb_project: Text = "adams-gpt"  # wandb project name
    wandb_run_name: Text = "run"  # wandb run name
    # data
    dataset: Text = "pystdlib"  # folder under data_dir holding train.bin and val.bin
    data_dir: Text = "data"  # relative paths are taken from the repository root
    gradient_accumulation_steps: Count = 1  # micro-steps per iteration, summed over all ranks
    batch_size: Count = 16  # sequences per micro-step per rank
    block_size: Count = 128  # tokens per sequence
    # model
    model: Architecture = "gpt2"  # 'gpt2' (model.py) or 'llama' (model_llama.py: RMSNorm, rotary, SwiGLU, no biases)
    n_layer: Count = 4  # transformer blocks
    n_head: Count = 4  # attention heads per block
    n_embd: Count = 128  # width of the residual stream
    dropout: Unit = 0.0  # 0 for pretraining; try 0.1+ for fine-tuning
    bias: bool = False  # biases in Linear and LayerNorm layers (GPT-2 has them; Llama has none)
    gelu: Gelu = "tanh"  # GPT-2's GELU: 'tanh' (OpenAI's, gelu_new) or 'exact' (erf: nanoGPT's and the paper authors')
    activation_checkpointing: bool = False  # recompute each block's activations in backward: less memory, ~1/3 more compute
    # optimizer
    optimizer: Optimizer = "adams"  # a name from adams_optim.OPTIMIZERS
    learning_rate: Rate = 1e-3  # peak; AdamS's best was ~1/4 of AdamW's best at 2K-32K tokens per step (README)
    max_iters: Natural = 1200  # total iterations
    weight_decay: Rate = 0.1  # decoupled; matrices and embeddings only
    beta1: Unit = 0.9  # momentum coefficient (AdamW, AdamS, Adam-mini, Lion)
    beta2: Unit = 0.95  # second-moment coefficient; AdamS: the old momentum's weight in v (0.99 worth a try, 0.999 fragile)
    eps: Rate = 1e-8  # for optimizers that take one
    bias_correction: bool = True  # AdamS: divide the momentum by 1 - beta1^t (the authors' code)
    embedding_lr_scale: Rate = 1.0  # the token embedding's and output head's lr, as a multiple of the schedule's
    implementation: Implementation = "auto"  # 'auto', 'loop', 'foreach' or 'fused' where the optimizer has them
    grad_clip: Rate = 1.0  # clip the gradient's global norm to this; 0 disables
    max_consecutive_skips: Natural = 10  # a NaN/Inf loss or gradient skips the step; stop after this many in a row (0: at the first)
    # learning rate schedule: linear warmup, then cosine (or linear) decay to min_lr
    decay_lr: bool = True  # False keeps learning_rate constant
    decay_shape: Shape = "cosine"  # 'cosine' (GPT-2 runs) or 'linear' (the paper's Llama runs)
    warmup_iters: Natural = 100  # linear warmup from ~0 to learning_rate
    lr_decay_iters: Natural = 1200  # ~ max_iters, per Chinchilla
    min_lr: Rate = 1e-4  # ~ learning_rate / 10, per Chinchilla and the AdamS paper
    # system
    backend: Backend = "auto"  # DDP backend: 'nccl', 'gloo', or 'auto' (nccl on CUDA, gloo on CPU)
    device: Device = "auto"  # 'cpu', 'cuda', 'cuda:N', 'mps', or 'auto'
    dtype: Dtype = "auto"  # 'float32', 'bfloat16', 'float16', or 'auto' (bf16 on GPUs that have it, else fp32)
    compile: bool = False  # torch.compile the model (worth it on GPUs, slow to start on CPUs)
    fsdp: bool = False  # shard parameters, gradients and optimizer state across ranks (FSDP2's fully_shard)
    seed: Seed = 1337  # model init and every batch derive from it
    allow_new_data: bool = False  # resume even though the dataset's token files changed since the run began (said)
    smoke: bool = False  # shrink any config to a CPU run of a minute or two (SMOKE); keys on the command line still win

    @property
    def tokens_per_iter(self) -> int:
        """Tokens in one iteration, summed over its micro-steps on every rank."""
        return self.gradient_accumulation_steps * self.batch_size * self.block_size


def documented_fields() -> list[tuple[str, str, str]]:
    """(key, default as written, comment) for each TrainConfig field, read from this file's source."""
    source = Path(__file__).read_text()
    body = source[source.index("class TrainConfig"):source.index("def documented_fields")]
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


@functools.cache
def kinds() -> dict[str, tuple[type, cli.Kind | None]]:
    """Each key's (type, kind), as TrainConfig declares them."""
    hints = typing.get_type_hints(TrainConfig, include_extras=True)
    out = {}
    for f in fields(TrainConfig):
        hint = hints[f.name]
        base, *extra = typing.get_args(hint) if typing.get_origin(hint) is Annotated else (hint,)
        out[f.name] = (base, extra[0] if extra else None)
    return out


def _field_types() -> dict[str, type]:
    return {key: base for key, (base, _) in kinds().items()}


def _closest(key: str) -> str:
    match = difflib.get_close_matches(key, _field_types(), n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def coerce(key: str, value, source: str):
    """``value`` as the type of field ``key`` within its kind's range, or a UserError naming the key and source."""
    if key not in kinds():
        raise UserError(f"unknown config key '{key}' in {source}{_closest(key)}")
    want, kind = kinds()[key]
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    elif want is int and isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, want) or (want is not bool and isinstance(value, bool)) or (kind and not kind.check(value)):
        raise UserError(f"config key '{key}' in {source} must be {kind.says if kind else want.__name__}, got {value!r}")
    return value


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


class _ShowUsage(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        print(usage())
        parser.exit()


def _reader(key: str):
    """argparse's ``type=`` for key: the text as a Python value of the key's type and kind (or a UserError)."""
    def read(text: str):
        return coerce(key, parse_cli_value(key, text), "the command line")

    read.__name__ = key
    return read


def parser() -> cli.Parser:
    """train.py's command line: config files, then ``--key=value`` for every TrainConfig key (its kind)."""
    p = cli.Parser(prog="train.py", description=__doc__.split("\n\n")[0], add_help=False,
                   usage="python train.py [config/file.py ...] [--key=value ...]")
    p.add_argument("-h", "--help", action=_ShowUsage, nargs=0, default=argparse.SUPPRESS, help="every key with its default")
    p.add_argument("configs", nargs="*", metavar="CONFIG", help="config files (Python assignments), in order")
    for key, default, comment in documented_fields():
        p.add_argument(f"--{key}", type=_reader(key), default=argparse.SUPPRESS, metavar="VALUE",
                       help=f"{comment} (default: {default})")
    return p


def load_explicit(argv: list[str]) -> tuple[TrainConfig, set[str]]:
    """``load``'s config and the keys that a config file or the command line set (the rest are defaults)."""
    for arg in argv:  # an unknown key is named, with the closest known one, before anything else is read
        key = arg[2:].partition("=")[0].replace("-", "_")
        if arg.startswith("--") and key not in kinds() and key != "help":
            raise UserError(f"unknown config key '{key}' in the command line{_closest(key)}")
    given = vars(parser().parse_intermixed_args(argv))
    values: dict = {}
    for path in given.pop("configs"):
        values.update(read_config_file(path))
    values.update(given)
    if values.get("smoke"):
        values = smoke(values, keep=set(given))
    return TrainConfig(**values), set(values)


# --smoke=True: any config (a paper run included) scaled down together, so it finishes in a minute or two on a
# laptop's CPU: a 2-layer model on the embedded corpus, a short schedule with its warmup inside, a few
# evaluations. The optimizer and its hyperparameters stay as configured; what the command line sets wins.
SMOKE = dict(dataset="pystdlib", data_dir="data", n_layer=2, n_head=2, n_embd=64, block_size=64, batch_size=8,
             gradient_accumulation_steps=1, max_iters=60, warmup_iters=6, lr_decay_iters=60, eval_interval=20,
             eval_iters=5, log_interval=10, sample_tokens=100, device="cpu", dtype="float32", compile=False,
             fsdp=False, activation_checkpointing=False, wandb_log=False)


def smoke(values: dict, keep: set[str]) -> dict:
    """``values`` shrunk by SMOKE, except the keys in ``keep``; out_dir gains a ``_smoke`` suffix so a smoke
    run never lands in a real run's folder. Prints what it changed (rank 0)."""
    defaults = TrainConfig()
    changes = {k: v for k, v in SMOKE.items() if k not in keep and values.get(k, getattr(defaults, k)) != v}
    if "out_dir" not in keep:
        changes["out_dir"] = f"{values.get('out_dir', defaults.out_dir).rstrip('/')}_smoke"
    if os.environ.get("RANK", "0") == "0":
        said = ", ".join(f"{k}={v}" for k, v in changes.items())
        print(f"smoke run: {said or 'nothing to shrink'} (the command line's keys kept)", flush=True)
    return {**values, **changes}


# What a resumed run takes from the run itself and may not change: the model, what it trains on, how its
# optimizer's state is laid out. Everything else (length, schedule, logging, device, ...) may be overridden.
MODEL_SHAPE = ("model", "n_layer", "n_head", "n_embd", "block_size", "bias", "gelu")  # what a checkpoint's weights fix
FIXED_ON_RESUME = (*MODEL_SHAPE, "optimizer", "dataset", "embedding_lr_scale")
# Not taken from the run: where it is, how this invocation treats it, and the machine it runs on.
PER_INVOCATION = ("out_dir", "init_from", "overwrite", "eval_only", "device", "backend", "allow_new_data")


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
    """A config file's settings: a Python file's top-level assignments (nanoGPT's configs), or a JSON object of
    keys. Whatever it holds is checked like the command line; a file that sets nothing, stops the program or fails
    is one error line naming it."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file '{path}' does not exist; pass a path like config/train_gpt2_small_adams.py")
    if p.suffix == ".json":
        try:
            namespace = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
            raise UserError(f"config file '{path}' is not readable JSON ({type(e).__name__}); write it as one JSON "
                            "object of keys, or as a Python file of assignments") from None
        if not isinstance(namespace, dict):
            raise UserError(f"config file '{path}' holds a JSON {type(namespace).__name__}, not an object of keys")
    else:
        try:
            namespace = runpy.run_path(str(p))
        except SystemExit as e:  # a config that ends the program would end train.py with its code and no word
            raise UserError(f"config file '{path}' called exit({e.code}) while it was read; a config file only "
                            "assigns settings") from None
        except Exception as e:  # a config file is user code: report its error in one line
            raise UserError(f"config file '{path}' failed to run: {type(e).__name__}: {e}") from e
    out = {}
    for key, value in namespace.items():
        if key.startswith("_") or isinstance(value, (types.ModuleType, types.FunctionType, type)):
            continue
        out[key] = coerce(key, value, f"config file '{path}'")
    if not out:
        raise UserError(f"config file '{path}' sets no key; write assignments such as batch_size = 8 (a Python file) "
                        "or {\"batch_size\": 8} (a .json file)")
    return out


def per_process(cfg: TrainConfig, world_size: int, explicit: set[str] | None, announce: bool) -> TrainConfig:
    """Under torchrun, a gradient_accumulation_steps that nobody set (the default's 1) becomes one micro-step a
    process, said; one that was set must divide by the processes (``check``)."""
    given = explicit if explicit is not None else {k for k, v in vars(cfg).items() if v != getattr(TrainConfig(), k)}
    steps = cfg.gradient_accumulation_steps
    if world_size == 1 or steps % world_size == 0 or "gradient_accumulation_steps" in given:
        return cfg
    fitted = world_size * -(-steps // world_size)
    if announce:
        print(f"note: gradient_accumulation_steps={steps} (the default) is not divisible by the {world_size} processes: "
              f"{fitted}, one micro-step a process, so an iteration has {fitted * cfg.batch_size} sequences")
    return dataclasses.replace(cfg, gradient_accumulation_steps=fitted)


def check(cfg: TrainConfig, world_size: int = 1) -> None:
    """Cross-field checks, before anything is built; each failure names the fields and a fix."""
    for key, value in as_dict(cfg).items():  # a TrainConfig built in code is held to what the fields declare
        coerce(key, value, "the config")
    mode = os.environ.get("WANDB_MODE")
    if cfg.wandb_log and mode is not None and mode not in WANDB_MODES:
        raise UserError(f"WANDB_MODE={mode!r} is not a mode wandb knows; set it to one of {', '.join(WANDB_MODES)}, or "
                        "unset it")
    if cfg.model == "llama" and cfg.bias:
        raise UserError("model='llama' has no biases; drop --bias=True")
    if cfg.model == "llama" and cfg.gelu != "tanh":
        raise UserError("model='llama' has no GELU (its MLP is SwiGLU); drop --gelu")
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


WANDB_MODES = ("online", "offline", "disabled", "shared", "dryrun", "run")


def as_dict(cfg: TrainConfig) -> dict:
    return dataclasses.asdict(cfg)
