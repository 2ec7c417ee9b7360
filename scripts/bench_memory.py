"""Table 1 of the AdamS paper on one device: optimizer memory, peak memory, the largest micro-batch, time per iteration.

    python -m scripts.bench_memory --sizes large xl --json results/gpu/memory.json      # on a GPU
    python -m scripts.bench_memory --small --sizes small                                # CPU, scaled down

For each model size and optimizer: the bytes of optimizer state (measured after a step), the peak
memory of a training iteration at ``--micro-batch`` (CUDA: ``torch.cuda.max_memory_allocated``;
not measured on CPU), the largest micro-batch that fits (CUDA only: doubling, then bisection, on
out-of-memory), and the time per iteration at a fixed global batch of ``--global-batch``
sequences with gradient accumulation, using the largest micro-batch each optimizer allows (or
``--micro-batch`` on CPU; never more than the global batch). bf16 autocast on CUDA, fp32 on CPU. The paper's Table 1: GPT-2 XL on
8x A100-40GB, AdamW fits micro-batch 1 at 6.9 s per 480K-token iteration, AdamS 3 at 4.4 s.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

if __package__ in (None, ""):  # run by path, not with -m: make the repo's modules importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from model import GPT, SIZES, GPTConfig
from optim import build_optimizer, state_bytes

OPTIMIZERS = ("adamw", "adams")


def make_model(size: str, small: bool, block_size: int, device) -> GPT:
    if small:
        cfg = GPTConfig(block_size=block_size, vocab_size=8192, n_layer=2, n_head=4, n_embd=128)
    else:
        cfg = GPTConfig(block_size=block_size, vocab_size=50304, **SIZES[size])
    with torch.device(device):  # initialised where it runs: on a GPU, seconds instead of a minute for XL
        return GPT(cfg)


def iteration(model, optimizer, micro_batch: int, accumulation: int, block_size: int, device, autocast) -> None:
    vocab = model.config.vocab_size
    for _ in range(accumulation):
        idx = torch.randint(0, vocab, (micro_batch, block_size + 1), device=device)
        with autocast:
            _, loss = model(idx[:, :-1], idx[:, 1:])
        (loss / accumulation).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def fits(make, micro_batch: int, block_size: int, device, autocast) -> bool:
    try:
        model, optimizer = make()
        iteration(model, optimizer, micro_batch, 1, block_size, device, autocast)
        iteration(model, optimizer, micro_batch, 1, block_size, device, autocast)
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        model = optimizer = None
        gc.collect()
        torch.cuda.empty_cache()


def largest_micro_batch(make, block_size, device, autocast, limit: int = 1024) -> int:
    lo, hi = 0, 1
    while hi <= limit and fits(make, hi, block_size, device, autocast):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # lo fits, hi does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(make, mid, block_size, device, autocast) else (lo, mid)
    return lo


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["large", "xl"], choices=list(SIZES))
    parser.add_argument("--small", action="store_true", help="a 2-layer stand-in model, for CPUs and tests")
    parser.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS))
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=1, help="for peak memory, and the CPU timing")
    parser.add_argument("--global-batch", type=int, default=8, help="sequences per iteration for the timing")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    rows = []
    for size in args.sizes:
        for name in args.optimizers:
            def make(size=size, name=name):
                model = make_model(size, args.small, args.block_size, device)
                opt = build_optimizer(name, model, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
                return model, opt

            model, optimizer = make()
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            iteration(model, optimizer, args.micro_batch, 1, args.block_size, device, autocast)
            peak = torch.cuda.max_memory_allocated(device) if cuda else None
            opt_bytes = state_bytes(optimizer)
            n_params = sum(p.numel() for p in model.parameters())
            model = optimizer = None
            gc.collect()
            micro = largest_micro_batch(make, args.block_size, device, autocast) if cuda else args.micro_batch
            row = dict(size=size if not args.small else f"{size} (small stand-in)", optimizer=name, params=n_params,
                       optimizer_state_bytes=opt_bytes, state_bytes_per_param=opt_bytes / n_params,
                       peak_bytes=peak, max_micro_batch=micro if cuda else None, seconds_per_iter=None)
            if micro > 0:
                model, optimizer = make()
                micro = min(micro, args.global_batch)  # the same sequences per iteration for every optimizer
                accumulation = -(-args.global_batch // micro)
                iteration(model, optimizer, micro, accumulation, args.block_size, device, autocast)  # warm-up
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                iteration(model, optimizer, micro, accumulation, args.block_size, device, autocast)
                if cuda:
                    torch.cuda.synchronize()
                row["seconds_per_iter"] = time.perf_counter() - start
                row["micro_batch_timed"], row["accumulation"] = micro, accumulation
                model = optimizer = None
                gc.collect()
            rows.append(row)
            print(row)

    print(f"\n{'size':22} {'optimizer':9} {'state GB':>9} {'B/param':>7} {'peak GB':>8} {'max micro':>9} {'s/iter':>7}")
    for r in rows:
        peak = f"{r['peak_bytes'] / 1e9:8.2f}" if r["peak_bytes"] else "       -"
        micro = f"{r['max_micro_batch']:9d}" if r["max_micro_batch"] is not None else "        -"
        secs = f"{r['seconds_per_iter']:7.2f}" if r["seconds_per_iter"] else "      -"
        print(f"{r['size']:22} {r['optimizer']:9} {r['optimizer_state_bytes'] / 1e9:9.3f} {r['state_bytes_per_param']:7.1f} "
              f"{peak} {micro} {secs}")
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    result = dict(device=name, torch=torch.__version__, block_size=args.block_size, global_batch=args.global_batch, rows=rows)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
