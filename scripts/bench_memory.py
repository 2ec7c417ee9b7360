"""Table 1 of the AdamS paper: optimizer memory, peak memory per GPU, the largest micro-batch, and
the time of one 491,520-token iteration, for AdamW and AdamS at GPT-2 Small to XL.

    torchrun --standalone --nproc_per_node=8 -m scripts.bench_memory --json results/gpu/table1_8gpu.json  # the paper's DDP
    python -m scripts.bench_memory --json results/gpu/table1_1gpu.json     # one GPU, accumulating to the same batch
    python -m scripts.bench_memory --sizes xl --global-batch 8             # a quick look at one size
    python -m scripts.bench_memory --small --sizes small                   # CPU, a 2-layer stand-in (tests)

The paper's Table 1 (8x A100-40GB, DDP, 480 sequences of 1,024 tokens per iteration with gradient
accumulation): GPT-2 Large fits micro-batch 10 with either optimizer at 2.0 s an iteration; XL
fits AdamW at 1 (6.9 s) and AdamS at 3 (4.4 s). For each size and optimizer this measures, on
every rank: the bytes of optimizer state (after a step), the peak memory of an iteration at
``--micro-batch`` (CUDA: ``torch.cuda.max_memory_allocated``, the largest over the ranks; not
measured on CPU), the largest micro-batch that fits (CUDA only: doubling, then bisection, on
out-of-memory; under DDP every rank tries the same size and the ranks agree on the answer), and the
seconds of one iteration of ``--global-batch`` sequences (480: the paper's 491,520 tokens), split
evenly over the ranks and accumulated in micro-batches of the largest size that fits (``--micro-batch``
on CPU), the slowest rank's time, after one untimed iteration. bf16 autocast on CUDA, fp32 on CPU.
Several processes (torchrun) wrap the model in DDP, as nanoGPT does, and reduce gradients once
an iteration.
"""

from __future__ import annotations

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


def make_model(size: str, small: bool, block_size: int, device) -> GPT:
    if small:
        cfg = GPTConfig(block_size=block_size, vocab_size=8192, n_layer=2, n_head=4, n_embd=128, bias=False)
    else:  # the paper's GPT-2, without biases as in the authors' code (config/recipes.py)
        cfg = GPTConfig(block_size=block_size, vocab_size=50304, bias=False, **SIZES[size])
    with torch.device(device):  # initialised where it runs: on a GPU, seconds instead of a minute for XL
        return GPT(cfg)


def micro_batches(sequences: int, micro: int) -> list[int]:
    """``sequences`` split into micro-batches of at most ``micro``: all full but the last."""
    return [micro] * (sequences // micro) + ([sequences % micro] if sequences % micro else [])


def iteration(model, optimizer, sizes: list[int], block_size: int, device, autocast) -> None:
    """One optimizer step over micro-batches of ``sizes`` sequences; the loss is the mean over all of
    them, and under DDP the gradients are reduced once, on the last micro-batch."""
    vocab = model.module.config.vocab_size if isinstance(model, DDP) else model.config.vocab_size
    total = sum(sizes)
    for k, size in enumerate(sizes):
        idx = torch.randint(0, vocab, (size, block_size + 1), device=device)
        sync = nullcontext() if not isinstance(model, DDP) or k == len(sizes) - 1 else model.no_sync()
        with sync, autocast:
            _, loss = model(idx[:, :-1], idx[:, 1:])
            loss = loss * (size / total)
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def agree(value: float, op=None) -> float:
    """The ranks' common value (their minimum, or ``op``); the value itself in one process."""
    if not dist.is_initialized():
        return value
    t = torch.tensor([float(value)], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=op or dist.ReduceOp.MIN)
    return t.item()


def fits(make, micro_batch: int, block_size: int, device, autocast) -> bool:
    model = optimizer = None
    try:
        model, optimizer = make()
        iteration(model, optimizer, [micro_batch], block_size, device, autocast)
        iteration(model, optimizer, [micro_batch], block_size, device, autocast)
        ok = True
    except torch.OutOfMemoryError:
        ok = False
    finally:
        model = optimizer = None
        gc.collect()
        torch.cuda.empty_cache()
    return bool(agree(ok))  # every rank must fit


def largest_micro_batch(make, block_size, device, autocast, limit: int = 1024) -> int:
    lo, hi = 0, 1
    while hi <= limit and fits(make, hi, block_size, device, autocast):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # lo fits, hi does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(make, mid, block_size, device, autocast) else (lo, mid)
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


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES), help="GPT-2 sizes (default: all four)")
    parser.add_argument("--small", action="store_true", help="a 2-layer stand-in model, for CPUs and tests")
    parser.add_argument("--optimizers", nargs="+", type=cli.choice(*OPTIMIZERS), default=list(OPTIMIZERS))
    parser.add_argument("--block-size", type=cli.integer(1, 1 << 20), default=1024)
    parser.add_argument("--micro-batch", type=cli.integer(1, 1 << 16), default=1, help="for peak memory, and the CPU timing (default: 1)")
    parser.add_argument("--global-batch", type=cli.integer(1, 1 << 20), default=PAPER_SEQUENCES,
                        help="sequences per iteration over all ranks, for the timing (default: 480, the paper's)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=cli.place, help="write the results here (rank 0)")
    args = parser.parse_args(argv)
    for key in ("block_size", "micro_batch", "global_batch"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1, got {getattr(args, key)}")

    device, rank, world = setup(args.device)
    if args.global_batch % world:
        raise UserError(f"--global-batch {args.global_batch} is not divisible by the {world} processes")
    per_rank = args.global_batch // world
    cuda = device.type == "cuda"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    say = print if rank == 0 else (lambda *a, **k: None)
    rows = []
    for size in args.sizes:
        for name in args.optimizers:
            def make(size=size, name=name):
                model = make_model(size, args.small, args.block_size, device)
                opt = build_optimizer(name, model, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
                return (DDP(model, device_ids=[device.index] if cuda else None) if world > 1 else model), opt

            model, optimizer = make()
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            iteration(model, optimizer, [args.micro_batch], args.block_size, device, autocast)
            peak = agree(torch.cuda.max_memory_allocated(device), dist.ReduceOp.MAX) if cuda else None
            opt_bytes = state_bytes(optimizer)
            n_params = sum(p.numel() for p in model.parameters())
            model = optimizer = None
            gc.collect()
            micro = largest_micro_batch(make, args.block_size, device, autocast) if cuda else args.micro_batch
            row = dict(size=size if not args.small else f"{size} (small stand-in)", optimizer=name, params=n_params,
                       optimizer_state_bytes=opt_bytes, state_bytes_per_param=opt_bytes / n_params,
                       peak_bytes=int(peak) if peak is not None else None, max_micro_batch=micro if cuda else None,
                       seconds_per_iter=None, world_size=world, tokens_per_iter=args.global_batch * args.block_size)
            if micro > 0:
                model, optimizer = make()
                sizes = micro_batches(per_rank, min(micro, per_rank))
                iteration(model, optimizer, sizes, args.block_size, device, autocast)  # warm-up
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                iteration(model, optimizer, sizes, args.block_size, device, autocast)
                if cuda:
                    torch.cuda.synchronize()
                row["seconds_per_iter"] = agree(time.perf_counter() - start, dist.ReduceOp.MAX)
                row["micro_batch_timed"], row["accumulation"] = sizes[0], len(sizes)
                model = optimizer = None
                gc.collect()
            rows.append(row)
            say(row)

    say(f"\n{'size':22} {'optimizer':9} {'state GB':>9} {'B/param':>7} {'peak GB':>8} {'max micro':>9} {'s/iter':>7}")
    for r in rows:
        peak = f"{r['peak_bytes'] / 1e9:8.2f}" if r["peak_bytes"] else "       -"
        micro = f"{r['max_micro_batch']:9d}" if r["max_micro_batch"] is not None else "        -"
        secs = f"{r['seconds_per_iter']:7.2f}" if r["seconds_per_iter"] else "      -"
        say(f"{r['size']:22} {r['optimizer']:9} {r['optimizer_state_bytes'] / 1e9:9.3f} {r['state_bytes_per_param']:7.1f} "
            f"{peak} {micro} {secs}")
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    command = " ".join(["torchrun", f"--nproc_per_node={world}"] if world > 1 else ["python"])
    command += " -m scripts.bench_memory " + " ".join(sys.argv[1:] if argv is None else argv)
    result = dict(device=name, torch=torch.__version__, world_size=world, block_size=args.block_size,
                  global_batch=args.global_batch, command=command, rows=rows)
    if args.json and rank == 0:
        write_json(args.json, result)
    if dist.is_initialized():
        dist.destroy_process_group()
    return result


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
