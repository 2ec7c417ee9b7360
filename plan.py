"""Plan a run's GPU memory and time on a CPU, before renting the GPU:

    python train.py config/train_gpt2_xl.py --plan=h100-80gb
    python train.py config/train_llama2_7b_adams.py --plan=h100-80gb --plan_gpus=8 --plan_json=plan.json

Nothing is trained and nothing needs a GPU or the dataset (the vocabulary is the dataset's where its
token files are, else the embedded corpus's bytes or the architecture's: GPT-2 50,304, Llama 2 32,000).
The run's own model, optimizer (with the implementation it would use on CUDA) and sharding (FSDP2 on
fake ranks; DDP's gradient buckets added as DDP allocates them) run train.py's own step code
(``step.gradients``: micro-steps, autocast, loss scaling, gradient sync, activation checkpointing) for
two iterations on fake tensors, which have shapes and no data. Every allocation is recorded and replayed
through a model of the CUDA caching allocator (memory_model.py). The peak allocated and reserved bytes
per GPU, whether it fits the GPU's usable memory, the largest micro-batch that does (searched), and
the time of an iteration and of the whole run from the step's counted FLOPs at a stated MFU.

What it cannot see: torch.compile (the plan is eager, an upper bound: compiled steps keep fewer
activations), kernels' own workspaces beyond cuBLAS's, and communication time (the time assumes the
GPUs scale linearly). Calibrated on this repository's one H100 measurement (GPT-2 XL, results/gpu/
memory_xl.json; tests/test_plan.py): the peaks within 2%, the largest micro-batches exact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

import cli
import memory_model
from configurator import TrainConfig
from errors import UserError

GiB, MiB = 1 << 30, 1 << 20
CUDA_CONTEXT = 1 * GiB  # the CUDA context, its loaded kernels and library handles: outside the allocator (assumed)
NCCL_BUFFERS = 1 * GiB  # NCCL's communicators and buffers when there are several GPUs (assumed)
SIMULATED_MICRO_STEPS = 3  # the first (gradients made), a middle one (accumulated) and the last (synced)
REPO = Path(__file__).resolve().parent


@dataclass(frozen=True)
class GPU:
    """One kind of GPU as the plan sees it. ``total``: the bytes torch reports as the device's capacity;
    ``flops``: dense bf16/fp16 tensor-core FLOP/s (fp32: ``flops_fp32``), from the vendor's data sheet;
    ``workspace``: bytes of each cuBLAS workspace torch allocates (one per thread that runs matmuls:
    the forward's and autograd's); ``mfu`` and where that number comes from."""

    name: str
    total: int
    flops: float
    flops_fp32: float
    workspace: int
    mfu: float
    mfu_source: str

    def usable(self, gpus: int) -> int:
        return self.total - CUDA_CONTEXT - (NCCL_BUFFERS if gpus > 1 else 0)


_MEASURED_H100 = "measured here: GPT-2 Small at 491,520 tokens a step, bf16, torch.compile, 40.4-41.2% (results/gpu/README.md)"
_MEASURED_H200 = "measured here: GPT-2 Small at 491,520 tokens a step, bf16, torch.compile, 43.2-44.2% (results/gpu/README.md)"
_ASSUMED = "assumed (not measured here on this GPU): the H100's"
# total: what torch reports as the capacity (out-of-memory messages): H100 80GB measured here; A100s from
# published messages; H200 from nvidia-smi's 143,771 MiB less the H100's 0.47 GiB difference (derived).
# cuBLAS's default workspace: 32 MiB on Hopper (sm90), 8 MiB + 128 KiB elsewhere (torch's CublasHandlePool).
KINDS = {
    "h100-80gb": GPU("NVIDIA H100 80GB HBM3", round(79.18 * GiB), 989e12, 67e12, 32 * MiB, 0.40, _MEASURED_H100),
    "h200-141gb": GPU("NVIDIA H200", round(139.9 * GiB), 989e12, 67e12, 32 * MiB, 0.43, _MEASURED_H200),
    "a100-40gb": GPU("NVIDIA A100-SXM4-40GB", round(39.50 * GiB), 312e12, 19.5e12, 8 * MiB + 128 * 1024, 0.40, _ASSUMED),
    "a100-80gb": GPU("NVIDIA A100-SXM4-80GB", round(79.25 * GiB), 312e12, 19.5e12, 8 * MiB + 128 * 1024, 0.40, _ASSUMED),
}
DEFAULT_VOCAB = {"gpt2": 50304, "llama": 32000}
OPTIONS = {"plan": cli.choice(*KINDS), "plan_gpus": cli.integer(1, 4096), "plan_json": cli.place}


def take_options(argv: list[str]) -> tuple[dict, list[str]]:
    """train.py's command line split into the plan's options ({'plan': KIND, 'plan_gpus': N, 'plan_json':
    PATH}, empty when not planning) and the run's own arguments."""
    options, rest, args = {}, [], iter(argv)
    for arg in args:
        key, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        key = key.replace("-", "_")
        if key in OPTIONS:
            if not eq:
                value = next(args, None)
                if value is None:
                    raise UserError(f"--{key} takes a value: --{key}=VALUE")
            kind = OPTIONS[key]
            try:
                options[key] = kind(value)
            except Exception:  # argparse's type errors
                raise UserError(f"--{key}={value}: must be {kind.says}") from None
        else:
            rest.append(arg)
    if options and "plan" not in options:
        raise UserError(f"{', '.join('--' + k for k in options)} needs --plan=KIND (one of: {', '.join(KINDS)})")
    return options, rest


# --- the simulation ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_ranks(world_size: int):
    """A fake process group of ``world_size`` ranks (this process is rank 0; collectives do nothing) and a CPU
    device mesh over it, made outside any fake tensor mode; None for one rank."""
    import torch.distributed as dist

    if world_size == 1:
        yield None
        return
    if dist.is_initialized():
        raise UserError("--plan simulates its ranks itself: run it with python, not under torchrun")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def fused_steps_as_on_cuda():
    """AdamS's and Lion's fused step on CUDA is one Triton launch that allocates nothing (optim/_triton_fused.py);
    on fake CPU tensors it is modelled as exactly that, so the step's memory is its state alone."""
    from adams_optim._momentum_only import MomentumOnlyOptimizer

    original = MomentumOnlyOptimizer._step_fused
    MomentumOnlyOptimizer._step_fused = lambda self, ps, gs, ms, hp, device: None
    try:
        yield
    finally:
        MomentumOnlyOptimizer._step_fused = original


def cuda_implementation(cfg: TrainConfig) -> str:
    """The implementation ``cfg.implementation`` selects on CUDA: 'auto' picks torch's fused AdamW, our fused
    (Triton) AdamS and Lion, and torch's foreach for the rest (torch.optim's default on CUDA)."""
    from adams_optim import OPTIMIZERS
    from adams_optim.registry import compiled_on_cuda, torch_fused_where_supported

    entry = OPTIMIZERS[cfg.optimizer]
    if cfg.implementation != "auto":
        return cfg.implementation
    if entry.auto in (compiled_on_cuda, torch_fused_where_supported):
        return "fused"
    return "foreach" if "foreach" in entry.implementations else "auto"


def ddp_buckets(params: list[torch.Tensor], first: int = 1 * MiB, cap: int = 25 * MiB) -> list[int]:
    """Bytes of each gradient bucket DDP's Reducer allocates (its defaults: the parameters in reverse order,
    a first bucket of 1 MiB, then 25 MiB ones; a parameter larger than that has one to itself)."""
    buckets, size, limit = [], 0, first
    for p in reversed(params):
        size += p.numel() * p.element_size()
        if size >= limit:
            buckets.append(size)
            size, limit = 0, cap
    return buckets + ([size] if size else [])


@dataclass
class Simulation:
    events: list
    micro_steps: int  # simulated per iteration
    parameters: int  # all of them
    tensors: int  # how many parameters (tensors)
    flops_per_token: float  # PaLM's count, model.estimate_mfu's: what the measured MFU was measured with


def simulate(cfg: TrainConfig, gpus: int, vocab: int) -> Simulation:
    """Two iterations of ``cfg``'s training step on one of ``gpus`` GPUs, on fake tensors: every allocation.
    The first, a middle and the last micro-step of each iteration are run (their memory repeats)."""
    import logging

    from adams_optim import build_optimizer
    from torch._subclasses.fake_tensor import FakeTensorMode

    import data_parallel
    import step

    logging.getLogger("adams_optim").setLevel(logging.WARNING)  # the optimizer's lines, said by the run itself
    steps = min(cfg.gradient_accumulation_steps // gpus, SIMULATED_MICRO_STEPS)
    dtype = getattr(torch, "bfloat16" if cfg.dtype == "auto" else cfg.dtype)
    recorder = memory_model.Recorder()
    cfg = dataclasses.replace(cfg, compile=False, implementation=cuda_implementation(cfg), init_from="scratch")
    with fake_ranks(gpus if cfg.fsdp else 1) as mesh, fused_steps_as_on_cuda(), FakeTensorMode(), recorder:
        recorder.mark("build")
        torch.manual_seed(cfg.seed)
        with recorder.paused() if cfg.fsdp else contextlib.nullcontext():  # built in host memory, as train.build does
            model = step.build_model(cfg, vocab, None)
        here = data_parallel.Dist(0, 0, gpus, torch.device("cpu"))
        wrapped, autocast = data_parallel.parallelize(model, model.blocks, here, dtype, fsdp=cfg.fsdp, compile=False,
                                                      mesh=mesh) if cfg.fsdp else (model, _autocast(dtype))
        params = [p for p in model.parameters() if p.requires_grad]
        # DDP's Reducer: a flat copy of the gradients, in buckets, held for the run's life (to the block's end here)
        reducer = [torch.empty(n, dtype=torch.uint8) for n in ddp_buckets(params)] if gpus > 1 and not cfg.fsdp else []
        optimizer = build_optimizer(cfg.optimizer, model, implementation=cfg.implementation,
                                    embedding_lr_scale=cfg.embedding_lr_scale, **step.optimizer_kwargs(cfg, False))
        scaler = torch.amp.GradScaler("cpu", enabled=dtype == torch.float16)
        for it in (1, 2):
            recorder.mark(f"iteration {it}")
            batches = ((torch.randint(0, vocab, (cfg.batch_size, cfg.block_size)),
                        torch.randint(0, vocab, (cfg.batch_size, cfg.block_size))) for _ in range(steps))
            loss, norm = step.gradients(wrapped, batches, steps, autocast, scaler, optimizer, params, cfg.grad_clip)
            optimizer.step()
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            del loss, norm, batches
        recorder.mark("end")
        del reducer
        parameters, tensors = sum(p.numel() for p in model.parameters()), len(list(model.parameters()))
        flops = model.estimate_mfu(1.0, 1.0)  # FLOPs a token at one token a second and a peak of one
    return Simulation(recorder.events, steps, parameters, tensors, flops)


def _autocast(dtype: torch.dtype):
    # CPU autocast casts the same operations as CUDA's for these models (matmuls and attention in the low
    # precision; norms and the loss in fp32), and CPU attention keeps what CUDA's flash attention keeps
    return contextlib.nullcontext() if dtype == torch.float32 else torch.autocast("cpu", dtype=dtype)


def replay(sim: Simulation, gpu: GPU, capacity: int | None = None) -> dict | None:
    """The allocator's peaks for ``sim`` (None: it runs out of memory within ``capacity``)."""
    try:
        return memory_model.replay(sim.events, capacity, reserve=[gpu.workspace] * 2)
    except memory_model.OutOfMemory:
        return None


# --- the plan ---------------------------------------------------------------------------------------------


def vocabulary(cfg: TrainConfig) -> tuple[int, str]:
    """The vocabulary the run's model gets, and where it comes from."""
    import tokens

    folder = Path(cfg.data_dir)
    folder = (folder if folder.is_absolute() else REPO / folder) / cfg.dataset
    if (folder / "train.bin").is_file():
        return tokens.read_header(folder / "train.bin")[1], f"the dataset's ({folder / 'train.bin'})"
    if cfg.dataset == "pystdlib":
        return 256, "the embedded corpus's bytes"
    return DEFAULT_VOCAB[cfg.model], f"{cfg.model}'s ({folder} is not there)"


def model_shape(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with the model it would train: its own settings, or those of the GPT-2 or Hugging Face model in
    init_from (read from its config.json; no weights are loaded)."""
    from model import SIZES

    source = cfg.init_from
    if source in ("scratch", "auto", "resume"):
        return cfg
    names = {"gpt2": "small", "gpt2-medium": "medium", "gpt2-large": "large", "gpt2-xl": "xl"}
    if source in names:
        return dataclasses.replace(cfg, model="gpt2", bias=True, **SIZES[names[source]],
                                   block_size=min(cfg.block_size, 1024))
    config = Path(source) / "config.json"
    try:
        saved = json.loads(config.read_text())
        if saved.get("model_type") == "llama":
            shape = dict(model="llama", n_layer=saved["num_hidden_layers"], n_head=saved["num_attention_heads"],
                         n_embd=saved["hidden_size"], bias=False)
        else:
            shape = dict(model="gpt2", n_layer=saved["n_layer"], n_head=saved["n_head"], n_embd=saved["n_embd"], bias=True)
    except (OSError, ValueError, KeyError, AttributeError) as e:
        raise UserError(f"init_from='{source}': --plan needs a GPT-2 name or a Hugging Face directory whose config.json "
                        f"gives the model's shape ({type(e).__name__}); plan the same shape with --init_from=scratch") from None
    return dataclasses.replace(cfg, **shape)


def make(cfg: TrainConfig, kind: str, gpus: int = 1, say=print) -> dict:
    """The plan of ``cfg`` on ``gpus`` GPUs of ``kind`` (a KINDS key), as a dict (the JSON's fields)."""
    import configurator

    gpu = KINDS[kind]
    if cfg.fsdp and gpus == 1:
        say("note: fsdp=True on one GPU shards nothing; planned as one unsharded process (--plan_gpus=N for N GPUs)")
        cfg = dataclasses.replace(cfg, fsdp=False)
    configurator.check(cfg, gpus)
    cfg = model_shape(cfg)
    vocab, vocab_source = vocabulary(cfg)
    usable = gpu.usable(gpus)
    say(f"planning on {gpus} x {kind} ({gpu.name}), {describe(cfg, gpus)}: two iterations on fake tensors...")
    first = simulate(cfg, gpus, vocab)
    peaks = replay(first, gpu)
    per_sequence = sequence_bytes(cfg, gpus, vocab, gpu, peaks)
    fits = replay(first, gpu, usable) is not None
    largest = largest_micro_batch(cfg, gpus, vocab, gpu, usable, cfg.batch_size, fits, per_sequence, peaks)
    marks = peaks["marks"]
    build_peak = marks["build"]
    iteration_peaks = {k: v for k, v in marks.items() if k.startswith("iteration")}
    seconds = timing(cfg, gpus, gpu, first)
    out = dict(
        kind=kind, gpu=gpu.name, gpus=gpus, config=configurator.as_dict(cfg), vocab_size=vocab, vocabulary=vocab_source,
        sharding="fsdp2" if cfg.fsdp else "ddp" if gpus > 1 else "none", dtype=str(_dtype(cfg)).replace("torch.", ""),
        parameters=first.parameters, micro_batch=cfg.batch_size,
        peak_allocated_bytes=peaks["peak_allocated"], peak_reserved_bytes=peaks["peak_reserved"],
        iteration_peak_allocated_bytes=iteration_peaks, build_allocated_bytes=build_peak,
        usable_bytes=usable, total_bytes=gpu.total, fits=fits,
        headroom_sequences=largest - cfg.batch_size, bytes_per_sequence=per_sequence, largest_micro_batch=largest,
        **seconds, mfu=gpu.mfu, mfu_source=gpu.mfu_source, eager=True,
    )
    out["advice"] = advice(cfg, gpus, kind, out, vocab)
    return out


def _dtype(cfg: TrainConfig) -> torch.dtype:
    return getattr(torch, "bfloat16" if cfg.dtype == "auto" else cfg.dtype)


def describe(cfg: TrainConfig, gpus: int) -> str:
    micro = cfg.gradient_accumulation_steps // gpus
    parts = [f"{cfg.model} {cfg.n_layer}x{cfg.n_embd}", cfg.optimizer,
             "FSDP2" if cfg.fsdp else "DDP" if gpus > 1 else "one process",
             f"{_dtype(cfg)}".replace("torch.", "") + (" autocast" if _dtype(cfg) != torch.float32 else ""),
             f"micro-batch {cfg.batch_size} x {cfg.block_size} tokens, {micro} micro-step{'s' * (micro > 1)} a GPU"]
    if cfg.activation_checkpointing:
        parts.append("activation checkpointing")
    return ", ".join(parts)


def sequence_bytes(cfg: TrainConfig, gpus: int, vocab: int, gpu: GPU, peaks: dict) -> float:
    """Reserved bytes one more sequence in the micro-batch costs (from a second simulation)."""
    other = dataclasses.replace(cfg, batch_size=cfg.batch_size + 1)
    more = replay(simulate(other, gpus, vocab), gpu)
    return max(more["peak_reserved"] - peaks["peak_reserved"], more["peak_allocated"] - peaks["peak_allocated"], 1)


def largest_micro_batch(cfg, gpus, vocab, gpu, usable, known: int, known_fits: bool, per_sequence: float,
                        peaks: dict, limit: int = 4096) -> int:
    """The largest micro-batch whose two iterations fit ``usable`` bytes (0: not even one sequence): from a guess
    made of the cost of a sequence, steps that double away from it until the answer is bracketed, then bisection."""
    cache = {0: True, known: known_fits, limit + 1: False}

    def fits(b: int) -> bool:
        if b not in cache:
            sim = simulate(dataclasses.replace(cfg, batch_size=b), gpus, vocab)
            cache[b] = replay(sim, gpu, usable) is not None
        return cache[b]

    guess = min(max(int(known + (usable - peaks["peak_reserved"]) // per_sequence), 1), limit)
    step, b = 1, guess
    if fits(b):
        while fits(min(b + step, limit + 1)):
            b, step = b + step, step * 2
        lo, hi = b, min(b + step, limit + 1)
    else:
        while not fits(max(b - step, 0)):
            b, step = b - step, step * 2
        lo, hi = max(b - step, 0), b
    while hi - lo > 1:  # lo fits, hi does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def timing(cfg: TrainConfig, gpus: int, gpu: GPU, sim: Simulation) -> dict:
    """Seconds of an iteration and of the run: the step's FLOPs (PaLM's count, 6N + 12·L·d·T a token, as
    model.estimate_mfu and every MFU measured here count them) at the GPU kind's MFU; a third more with activation
    checkpointing (the forward again), and evaluations as forward passes (a third of a training step)."""
    peak = (gpu.flops if _dtype(cfg) != torch.float32 else gpu.flops_fp32) * gpu.mfu
    tokens = cfg.tokens_per_iter  # an iteration's, over every GPU
    flops = sim.flops_per_token * tokens
    iteration = flops * (4 / 3 if cfg.activation_checkpointing else 1) / gpus / peak
    evaluations = cfg.max_iters // cfg.eval_interval + 1
    evaluation = sim.flops_per_token / 3 * 2 * math.ceil(cfg.eval_iters / gpus) * cfg.batch_size * cfg.block_size / peak
    return dict(flops_per_iteration=flops, iteration_seconds=iteration, evaluations=evaluations,
                evaluation_seconds=evaluation, run_seconds=cfg.max_iters * iteration + evaluations * evaluation)


def advice(cfg: TrainConfig, gpus: int, kind: str, out: dict, vocab: int) -> list[str]:
    """What to change when the run does not fit: each suggestion checked by a simulation where it is cheap."""
    if out["fits"]:
        return []
    said = []
    largest = out["largest_micro_batch"]
    per_rank = cfg.batch_size * (cfg.gradient_accumulation_steps // gpus)
    if largest >= 1:
        micro = max(b for b in range(1, largest + 1) if per_rank % b == 0)
        said.append(f"--batch_size={micro} --gradient_accumulation_steps={per_rank // micro * gpus} keeps the batch "
                    f"({per_rank * gpus} sequences an iteration) and fits")
        return said
    gpu = KINDS[kind]
    alternatives = []
    if not cfg.activation_checkpointing:
        alternatives.append(("--activation_checkpointing=True", dataclasses.replace(cfg, activation_checkpointing=True, batch_size=1), gpus))
    if gpus > 1 and not cfg.fsdp and _dtype(cfg) != torch.float16:
        alternatives.append(("--fsdp=True", dataclasses.replace(cfg, fsdp=True, batch_size=1), gpus))
    for text, other, n in alternatives:
        ok = replay(simulate(other, n, vocab), gpu, gpu.usable(n)) is not None
        said.append(f"{text} with --batch_size=1 {'fits' if ok else 'does not fit either'}")
    said.append("more GPUs with --fsdp=True shard the weights, gradients and optimizer state further"
                if cfg.fsdp or gpus > 1 else "several GPUs with --fsdp=True shard the weights, gradients and optimizer state")
    return said


def report(out: dict) -> list[str]:
    """The plan in words."""
    gib = lambda n: f"{n / GiB:,.2f} GiB"  # noqa: E731
    cfg = out["config"]
    lines = [f"per GPU: peak {gib(out['peak_allocated_bytes'])} allocated, {gib(out['peak_reserved_bytes'])} reserved "
             f"(building the model: {gib(out['build_allocated_bytes'])}); usable {gib(out['usable_bytes'])} of "
             f"{gib(out['total_bytes'])} ({CUDA_CONTEXT // GiB} GiB left to the CUDA context"
             + (f" and {NCCL_BUFFERS // GiB} to NCCL" if out["gpus"] > 1 else "") + ", assumed)"]
    room = out["headroom_sequences"]
    seq = f"sequences of {cfg['block_size']:,} tokens"
    lines.append(f"{'fits' if out['fits'] else 'DOES NOT FIT'} at micro-batch {out['micro_batch']}: "
                 + (f"room for {room} more {seq}" if room >= 0 else f"{-room} {seq} too many"))
    lines.append(f"largest micro-batch that fits: {out['largest_micro_batch']} (each sequence ~{gib(out['bytes_per_sequence'])})")
    hours = out["run_seconds"] / 3600
    lines.append(f"time: {out['iteration_seconds']:.2f} s an iteration, {hours:,.1f} h for {cfg['max_iters']:,} iterations "
                 f"and {out['evaluations']} evaluations on {out['gpus']} GPU{'s' * (out['gpus'] > 1)} "
                 f"({hours * out['gpus']:,.0f} GPU-hours), at {out['mfu']:.0%} MFU, {out['mfu_source']}")
    lines += [f"to fit: {line}" for line in out["advice"]]
    lines.append("torch.compile is not simulated: this is the eager step's memory, an upper bound; communication time "
                 "is not counted")
    return lines


def main(cfg: TrainConfig, plan: str, plan_gpus: int = 1, plan_json: Path | None = None) -> dict:
    """``train.py --plan``: print the plan; write it as JSON where asked."""
    import folders

    out = make(cfg, plan, plan_gpus)
    for line in report(out):
        print(line)
    if plan_json is not None:
        folders.write_output(plan_json, json.dumps(out, indent=2).encode())
    return out


def kind_of(device_name: str) -> str | None:
    """The KINDS key of a GPU by the name torch gives it (None: a GPU the plan does not know)."""
    return next((k for k, gpu in KINDS.items() if gpu.name in device_name or device_name in gpu.name), None)


def note(text: str) -> str:
    print(f"note: {text}", flush=True)
    return text


def refuse_if_unfit(cfg: TrainConfig, world_size: int, device: torch.device) -> str | None:
    """On a GPU whose kind the plan knows, before anything is allocated: a UserError naming the largest micro-batch
    that fits when the plan says this one cannot; a note (returned) where the plan could not be made or the run is
    compiled (the eager plan is an upper bound then). The plan runs in a CPU-only subprocess."""
    kind = kind_of(torch.cuda.get_device_name(device))
    if kind is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.json"
        args = [f"--{k}={v}" for k, v in dataclasses.asdict(cfg).items()]
        env = dict({k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")},
                   CUDA_VISIBLE_DEVICES="")
        result = subprocess.run([sys.executable, str(REPO / "train.py"), *args, f"--plan={kind}",
                                 f"--plan_gpus={world_size}", f"--plan_json={path}"], capture_output=True, text=True,
                                env=env, cwd=REPO)
        if result.returncode or not path.is_file():
            return note(f"no memory plan could be made ({(result.stderr.strip().splitlines() or ['?'])[-1][:200]}); "
                        "going on")
        out = json.loads(path.read_text())
    if out["fits"]:
        return None
    if cfg.compile:
        return note(f"the eager plan does not fit micro-batch {cfg.batch_size} on this {kind} (largest: "
                    f"{out['largest_micro_batch']}); compiled it may: going on")
    fix = f"; {out['advice'][0]}" if out["advice"] else ""
    raise UserError(f"batch_size={cfg.batch_size} cannot fit on this {kind}: the plan's peak is "
                    f"{out['peak_reserved_bytes'] / GiB:.1f} GiB of {out['usable_bytes'] / GiB:.1f} usable; the largest "
                    f"micro-batch that fits is {out['largest_micro_batch']}{fix}")
