"""Table 1 of the AdamS paper: optimizer memory, peak memory per GPU, the largest micro-batch, and
the time of one 491,520-token iteration, for AdamW and AdamS at GPT-2 Small to XL.

    torchrun --standalone --nproc_per_node=8 -m scripts.bench_memory --json results/gpu/table1_8gpu.json  # the paper's DDP
    python -m scripts.bench_memory --json results/gpu/table1_1gpu.json     # one GPU, accumulating to the same batch
    python -m scripts.bench_memory --precision bf16 --no-compile           # the authors' code on Ampere/Hopper, eager
    python -m scripts.bench_memory --sizes xl --global-batch 8             # a quick look at one size
    python -m scripts.bench_memory --device cpu                            # CPU: GPT-2 Small, one sequence (~1 minute)
    python -m scripts.bench_memory --small                                 # CPU: a 2-layer stand-in (seconds; tests)

The paper's Table 1 (8x A100-40GB, DDP, 480 sequences of 1,024 tokens per iteration with gradient
accumulation): GPT-2 Large fits micro-batch 10 with either optimizer at 2.0 s an iteration; XL
fits AdamW at 1 (6.9 s) and AdamS at 3 (4.4 s). For each size and optimizer this measures, on
every rank: the bytes of optimizer state (after a step), the peak memory of an iteration at
``--micro-batch`` (CUDA: ``torch.cuda.max_memory_allocated``, the largest over the ranks; not
measured on CPU), the largest micro-batch that fits (CUDA only: doubling, then bisection, on
out-of-memory; under DDP every rank tries the same size and the ranks agree on the answer), and the
seconds of one iteration of ``--global-batch`` sequences (480: the paper's 491,520 tokens), split
evenly over the ranks and accumulated in micro-batches of the largest size that fits (``--micro-batch``
on CPU), the slowest rank's time, after one untimed iteration. Several processes (torchrun) wrap the
model in DDP, as nanoGPT does, and reduce gradients once an iteration.

Precision, by default the paper's on CUDA: fp16 autocast with loss scaling (a GradScaler) and
torch.compile, as the paper trained and the authors' nanoGPT runs when bf16 is not chosen. The
authors' code picks bf16 on Ampere and Hopper GPUs; ``--precision bf16 --no-compile`` measures that
without compilation (an earlier version of this script measured only that). Compiled, the activations
kept for the backward pass are fewer, so the largest micro-batch is larger than eager. On a CPU the
default is fp32, eager, GPT-2 Small and a global batch of one micro-batch, so it finishes in about a
minute on 2 cores; each stage prints a line as it starts.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from contextlib import nullcontext
from datetime import timedelta

import torch
import torch.distributed as dist
from adams_optim import build_optimizer, state_bytes
from torch.nn.parallel import DistributedDataParallel as DDP

import cli
from errors import UserError
from model import GPT, SIZES, GPTConfig
from scripts import write_json

OPTIMIZERS = ("adamw", "adams")
PAPER_SEQUENCES = 480  # 480 x 1,024 = 491,520 tokens per iteration (Section 4.1)
PRECISIONS = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": None}  # autocast dtype; fp16 scales the loss
STAND_IN = "stand-in (2 x 128)"


def make_model(size: str, block_size: int, device) -> GPT:
    if size == STAND_IN:
        cfg = GPTConfig(block_size=block_size, vocab_size=8192, n_layer=2, n_head=4, n_embd=128, bias=False)
    else:  # the paper's GPT-2, without biases as in the authors' code (config/recipes.py)
        cfg = GPTConfig(block_size=block_size, vocab_size=50304, bias=False, **SIZES[size])
    with torch.device(device):  # initialised where it runs: on a GPU, seconds instead of a minute for XL
        return GPT(cfg)


def micro_batches(sequences: int, micro: int) -> list[int]:
    """``sequences`` split into micro-batches of at most ``micro``: all full but the last."""
    return [micro] * (sequences // micro) + ([sequences % micro] if sequences % micro else [])


def iteration(model, optimizer, sizes: list[int], block_size: int, device, autocast, scaler=None) -> None:
    """One optimizer step over micro-batches of ``sizes`` sequences; the loss is the mean over all of
    them, and under DDP the gradients are reduced once, on the last micro-batch. With an enabled
    ``scaler`` (fp16) the loss is scaled and the gradients unscaled before clipping, as nanoGPT does."""
    scaler = scaler or torch.amp.GradScaler(device.type, enabled=False)
    vocab = model.module.config.vocab_size if isinstance(model, DDP) else model.config.vocab_size
    total = sum(sizes)
    for k, size in enumerate(sizes):
        idx = torch.randint(0, vocab, (size, block_size + 1), device=device)
        sync = nullcontext() if not isinstance(model, DDP) or k == len(sizes) - 1 else model.no_sync()
        with sync, autocast:
            _, loss = model(idx[:, :-1], idx[:, 1:])
            loss = loss * (size / total)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def agree(value: float, op=None) -> float:
    """The ranks' common value (their minimum, or ``op``); the value itself in one process."""
    if not dist.is_initialized():
        return value
    t = torch.tensor([float(value)], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=op or dist.ReduceOp.MIN)
    return t.item()


def fits(make, micro_batch: int, block_size: int, device, autocast, say=lambda *a, **k: None) -> bool:
    model = optimizer = scaler = None
    try:
        model, optimizer, scaler = make()
        iteration(model, optimizer, [micro_batch], block_size, device, autocast, scaler)
        iteration(model, optimizer, [micro_batch], block_size, device, autocast, scaler)
        ok = True
    except torch.OutOfMemoryError:
        ok = False
    finally:
        model = optimizer = scaler = None
        gc.collect()
        torch.cuda.empty_cache()
    ok = bool(agree(ok))  # every rank must fit
    say(f"  micro-batch {micro_batch}: {'fits' if ok else 'out of memory'}", flush=True)
    return ok


def largest_micro_batch(make, block_size, device, autocast, limit: int = 1024, say=lambda *a, **k: None) -> int:
    lo, hi = 0, 1
    while hi <= limit and fits(make, hi, block_size, device, autocast, say):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # lo fits, hi does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(make, mid, block_size, device, autocast, say) else (lo, mid)
    return lo


def setup(device_name: str) -> tuple[torch.device, int, int]:
    """(device, rank, world size): under torchrun, join the process group (NCCL on CUDA, gloo on CPU)."""
    if "RANK" not in os.environ:
        return torch.device(device_name), 0, 1
    rank, local_rank, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    if device_name.startswith("cuda"):
        device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=timedelta(minutes=10))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timedelta(minutes=10))
    return device, rank, world


def table(rows: list[dict]) -> list[str]:
    """The results as aligned text columns; '-' where a figure is not measured (peak memory and the largest
    micro-batch on CPU)."""
    def gb(n):
        return f"{n / 1e9:.3f}" if n is not None else "-"

    cells = [("size", "optimizer", "state GB", "B/param", "peak GB", "max micro", "s/iter")]
    cells += [(r["size"], r["optimizer"], gb(r["optimizer_state_bytes"]), f"{r['state_bytes_per_param']:.1f}",
               gb(r["peak_bytes"]), "-" if r["max_micro_batch"] is None else str(r["max_micro_batch"]),
               "-" if r["seconds_per_iter"] is None else f"{r['seconds_per_iter']:.2f}") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    return ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
            for line in cells]


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES),
                        help="GPT-2 sizes (default: all four on CUDA, small on a CPU)")
    parser.add_argument("--small", action="store_true", help="one 2-layer stand-in model instead of GPT-2 sizes, for CPUs and tests")
    parser.add_argument("--optimizers", nargs="+", type=cli.choice(*OPTIMIZERS), default=list(OPTIMIZERS))
    parser.add_argument("--block-size", type=cli.integer(1, 1 << 20), default=1024)
    parser.add_argument("--micro-batch", type=cli.integer(1, 1 << 16), default=1, help="for peak memory, and the CPU timing (default: 1)")
    parser.add_argument("--global-batch", type=cli.integer(1, 1 << 20),
                        help="sequences per iteration over all ranks, for the timing (default: 480, the paper's, on CUDA; "
                             "one micro-batch a rank on a CPU)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", choices=list(PRECISIONS),
                        help="autocast dtype (fp16 with loss scaling); default fp16 on CUDA (the paper's), fp32 on a CPU")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction,
                        help="torch.compile the model (default: on CUDA, as the authors' nanoGPT; off on a CPU)")
    parser.add_argument("--json", type=cli.place, help="write the results here (rank 0)")
    args = parser.parse_args(argv)
    if args.small and args.sizes:
        parser.error("--small measures one 2-layer stand-in instead of GPT-2 sizes; leave out --sizes, or --small")
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise UserError("--device cuda but no CUDA GPU is visible; pass --device cpu")
    sizes = [STAND_IN] if args.small else args.sizes or (list(SIZES) if cuda else ["small"])
    precision = args.precision or ("fp16" if cuda else "fp32")
    compiled = cuda if args.compile is None else args.compile

    device, rank, world = setup(args.device)
    global_batch = args.global_batch or (PAPER_SEQUENCES if cuda else args.micro_batch * world)
    if global_batch % world:
        raise UserError(f"--global-batch {global_batch} is not divisible by the {world} processes")
    per_rank = global_batch // world
    dtype = PRECISIONS[precision]
    autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"{', '.join(sizes)} x {', '.join(args.optimizers)} on {world} {'GPU' if cuda else 'CPU process'}"
        f"{'s' * (world > 1)}: {precision}, {'compiled' if compiled else 'eager'}, {global_batch} sequence"
        f"{'s' * (global_batch > 1)} of {args.block_size} tokens an iteration", flush=True)
    rows = []
    for size in sizes:
        for name in args.optimizers:
            def make(size=size, name=name):
                model = make_model(size, args.block_size, device)
                opt = build_optimizer(name, model, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
                model = torch.compile(model) if compiled else model
                model = DDP(model, device_ids=[device.index] if cuda else None) if world > 1 else model
                return model, opt, torch.amp.GradScaler(device.type, enabled=precision == "fp16")

            say(f"{size}, {name}: one iteration of {args.micro_batch} sequence{'s' * (args.micro_batch > 1)} "
                "for the optimizer's state and the peak memory", flush=True)
            model, optimizer, scaler = make()
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            iteration(model, optimizer, [args.micro_batch], args.block_size, device, autocast, scaler)
            first = time.perf_counter() - start
            peak = agree(torch.cuda.max_memory_allocated(device), dist.ReduceOp.MAX) if cuda else None
            opt_bytes = state_bytes(optimizer)
            n_params = sum(p.numel() for p in model.parameters())
            model = optimizer = scaler = None
            gc.collect()
            if cuda:
                say(f"{size}, {name}: the largest micro-batch that fits", flush=True)
            micro = largest_micro_batch(make, args.block_size, device, autocast, say=say) if cuda else args.micro_batch
            row = dict(size=size, optimizer=name, params=n_params, optimizer_state_bytes=opt_bytes,
                       state_bytes_per_param=opt_bytes / n_params, peak_bytes=int(peak) if peak is not None else None,
                       max_micro_batch=micro if cuda else None, seconds_per_iter=None, world_size=world,
                       tokens_per_iter=global_batch * args.block_size, precision=precision, compiled=compiled)
            if micro > 0:
                batches = micro_batches(per_rank, min(micro, per_rank))
                guess = "" if cuda else f" (about {2 * first * per_rank / args.micro_batch:.0f} s, from the first)"
                say(f"{size}, {name}: timing an iteration of {len(batches)} micro-batch{'es' * (len(batches) > 1)} "
                    f"of {batches[0]}, after one untimed{guess}", flush=True)
                model, optimizer, scaler = make()
                iteration(model, optimizer, batches, args.block_size, device, autocast, scaler)  # warm-up
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                iteration(model, optimizer, batches, args.block_size, device, autocast, scaler)
                if cuda:
                    torch.cuda.synchronize()
                row["seconds_per_iter"] = agree(time.perf_counter() - start, dist.ReduceOp.MAX)
                row["micro_batch_timed"], row["accumulation"] = batches[0], len(batches)
                model = optimizer = scaler = None
                gc.collect()
            rows.append(row)

    say("", *table(rows), sep="\n")
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    command = " ".join(["torchrun", f"--nproc_per_node={world}"] if world > 1 else ["python"])
    command += " -m scripts.bench_memory " + " ".join(sys.argv[1:] if argv is None else argv)
    result = dict(device=name, torch=torch.__version__, world_size=world, block_size=args.block_size,
                  global_batch=global_batch, precision=precision, compiled=compiled, command=command, rows=rows)
    if args.json and rank == 0:
        write_json(args.json, result)
    if dist.is_initialized():
        dist.destroy_process_group()
    return result


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
