"""Time one optimizer step on GPT-2's parameter shapes, for every optimizer and implementation.

    python -m scripts.bench_optim --sizes small                # CPU or CUDA, whichever is here
    python -m scripts.bench_optim --small                      # scaled-down shapes, seconds
    python -m scripts.bench_optim --sizes small medium large xl --dtype bfloat16 --json out.json

The step is memory-bound, so besides milliseconds it reports effective bandwidth: the bytes the
update must move at least (fp32 AdamW reads p, g, m, v and writes p, m, v: 28 bytes/param; AdamS and
Lion read p, g, m and write p, m: 20), over the time, next to the device's measured copy bandwidth.
``ratio`` is each time over torch's fused AdamW, timed alternately with it (one AdamW step, one step
of the case, repeated; the median of the pairs' ratios, with their first and third quartiles in the
JSON), so that a shared machine's drift cancels; the memory-traffic floor for AdamS and Lion is
20/28 = 0.714. On CPU the case "no-math floor (C++)" runs the fused kernels' own loop over p, g and
m with the update replaced by two additions: what a fused AdamS or Lion step could at best reach on
this machine. On CPU a plain copy (``dst.copy_(src)``) moves less than it counts, since writing to
``dst`` first reads it in; an in-place update does not, so a fused optimizer can exceed "100%" of
copy bandwidth.
"""

from __future__ import annotations

import functools
import statistics
import time
from pathlib import Path

import torch
from adams_optim import AdamMini, AdamS, Lion, _cpu_fused

import cli
from model import GPT, SIZES, GPTConfig
from scripts import write_json


@functools.cache
def floor_kernels():
    """The product's CPU kernels with ``no_math_step`` added (scripts/no_math_kernel.cpp), built at first use."""
    kernels = _cpu_fused.build(f"adams_gpt_floor_{_cpu_fused.capability().lower()}",
                               Path(__file__).with_name("no_math_kernel.cpp"))
    return kernels


class NoMath:
    """The fused CPU kernels' loads, stores and dtype conversions with no update: p += g, m += g."""

    def __init__(self, params):
        self.param_groups = [dict(params=params)]
        self.momenta = [torch.zeros_like(p) for p in params]

    def step(self):
        floor_kernels().no_math_step(self.param_groups[0]["params"], [p.grad for p in self.param_groups[0]["params"]],
                                          self.momenta)


# (label, factory, tensors of param size read+written per step, counting p and g)
CASES = [
    ("adamw fused (torch)", lambda ps: torch.optim.AdamW(ps, fused=True), 7),
    ("adamw foreach (torch)", lambda ps: torch.optim.AdamW(ps, foreach=True), 7),
    ("adams loop", lambda ps: AdamS(ps, foreach=False), 5),
    ("adams foreach", lambda ps: AdamS(ps, foreach=True), 5),
    ("adams fused", lambda ps: AdamS(ps, fused=True), 5),
    ("lion foreach", lambda ps: Lion(ps, foreach=True), 5),
    ("lion fused", lambda ps: Lion(ps, fused=True), 5),
    ("no-math floor (C++)", NoMath, 5),
    ("adam_mini", None, 5),
]


def shapes(size: str, small: bool) -> tuple[list[tuple[str, tuple[int, ...]]], int]:
    cfg = GPTConfig(**SIZES[size])
    if small:  # same structure, 1/4 width and 1/3 depth
        cfg = GPTConfig(n_layer=max(1, cfg.n_layer // 3), n_head=cfg.n_head // 2 or 1, n_embd=cfg.n_embd // 4, vocab_size=8192)
    with torch.device("meta"):
        model = GPT(cfg)
    return [(n, tuple(p.shape)) for n, p in model.named_parameters()], cfg.n_head


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeats: int) -> float:
    """Median milliseconds of ``fn`` over ``repeats`` runs, after two warm-up runs."""
    fn(), fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def copy_bandwidth(device, n_bytes: int, repeats: int) -> float:
    """GB/s of one large device-to-device copy (bytes read + bytes written)."""
    src = torch.empty(n_bytes // 4, device=device)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src), device, repeats)
    return 2 * n_bytes / ms / 1e6


def make_case(factory, named, n_head, dtype, device, gen):
    params = [torch.nn.Parameter(torch.randn(s, device=device, dtype=dtype, generator=gen)) for _, s in named]
    for p in params:
        p.grad = torch.randn(p.shape, device=device, dtype=dtype, generator=gen)
    if factory is None:
        return AdamMini(list(zip([n for n, _ in named], params)), n_head=n_head)
    return factory(params)


def bench(size, small, dtype, device, repeats, only):
    """Yield one row per case, as each is measured."""
    named, n_head = shapes(size, small)
    n_params = sum(torch.Size(s).numel() for _, s in named)
    gen = torch.Generator(device=device).manual_seed(0)
    baseline = make_case(CASES[0][1], named, n_head, dtype, device, gen)
    for label, factory, tensors in CASES:
        if only and not any(o in label for o in only) and factory is not CASES[0][1]:
            continue
        if factory is NoMath and (device.type != "cpu" or _cpu_fused.kernels() is None):
            continue
        opt = baseline if factory is CASES[0][1] else make_case(factory, named, n_head, dtype, device, gen)
        start = time.perf_counter()
        opt.step()  # the first step compiles, where a kernel is compiled
        sync(device)
        first_step = time.perf_counter() - start
        for _ in range(2):  # warm up both
            opt.step(), baseline.step()
        sync(device)
        ours, theirs = [], []
        for _ in range(repeats):  # alternately, so that both see the same machine
            for step, times in ((baseline.step, theirs), (opt.step, ours)):
                start = time.perf_counter()
                step()
                sync(device)
                times.append(time.perf_counter() - start)
        ms = statistics.median(ours) * 1e3
        ratios = [a / b for a, b in zip(ours, theirs)]
        bytes_moved = tensors * n_params * next(iter(baseline.param_groups))["params"][0].element_size()
        yield dict(size=size, optimizer=label, ms=ms, gbps=bytes_moved / ms / 1e6, params=n_params,
                   ratio_to_adamw_fused=statistics.median(ratios), first_step_s=first_step,
                   ratio_quartiles=statistics.quantiles(ratios, n=4)[::2] if len(ratios) > 1 else ratios * 2)
        if opt is not baseline:
            del opt


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["small"], choices=list(SIZES), help="GPT-2 sizes whose shapes to use")
    parser.add_argument("--small", action="store_true", help="scaled-down shapes (1/4 width, 1/3 depth, 8K vocab)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="parameter dtype")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=cli.integer(1, 100_000), default=10, help="timed steps per case (median reported)")
    parser.add_argument("--only", nargs="*", type=cli.text(), help="run only cases whose label contains one of these")
    parser.add_argument("--json", type=cli.place, help="also write the results here")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    copy_gbps = copy_bandwidth(device, 256 * 2**20, args.repeats)
    name = (torch.cuda.get_device_name(device) if device.type == "cuda"  # CPU: the vector width torch's kernels and ours use
            else f"CPU ({torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()})")
    print(f"device: {name}; {args.dtype} parameters; copy bandwidth {copy_gbps:.1f} GB/s; torch {torch.__version__}")
    rows = []
    result = dict(device=name, dtype=args.dtype, small=args.small, torch=torch.__version__, copy_gbps=copy_gbps, rows=rows)
    print(f"\n{'size':8} {'optimizer':24} {'ms':>9} {'GB/s':>7} {'% copy':>7} {'/ adamw fused':>14} {'1st step s':>11}")
    for size in args.sizes:
        for r in bench(size, args.small, dtype, device, args.repeats, args.only):  # each row as it is measured
            rows.append(r)
            print(f"{r['size']:8} {r['optimizer']:24} {r['ms']:9.2f} {r['gbps']:7.1f} {100 * r['gbps'] / copy_gbps:6.0f}% "
                  f"{r['ratio_to_adamw_fused']:14.3f} {r['first_step_s']:11.2f}", flush=True)
            if args.json:  # rewritten after every row, so that an interrupted run keeps what it measured
                write_json(args.json, result)
    if args.json:
        print(f"\nwrote {args.json}")
    return result


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
