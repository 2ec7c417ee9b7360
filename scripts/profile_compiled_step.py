"""Where the time of the torch.compile AdamS step goes on a GPU (the record behind profile_compiled_step.txt).

    python -m scripts.profile_compiled_step float32 base   # also: bfloat16; cudagraph, combo

Run on one H100 (torch 2.11.0+cu130) before optim/_triton_fused.py existed; the Triton kernel is
switched off here so that the step takes the compiled path it measured. Variants: base (the
shipped compiled path, then a torch.profiler table), cudagraph (mode="reduce-overhead"; inductor
skipped the graphs: the inputs are mutated), combo (inductor's combo_kernels).
"""

import functools
import statistics
import time

import torch
from adams_optim import AdamS
from adams_optim import _momentum_only as mo
from adams_optim.adams import adams_update
from torch import nn

import cli
from errors import UserError
from scripts.bench_optim import shapes


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dtype", choices=("float32", "bfloat16"))
    parser.add_argument("variant", choices=("base", "cudagraph", "combo"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise UserError("this profiles the CUDA step: run it on a machine with a CUDA GPU")
    dtype, variant = getattr(torch, args.dtype), args.variant
    AdamS.triton_kernel = None
    named, _ = shapes("small", False)
    gen = torch.Generator(device="cuda").manual_seed(0)
    params = [nn.Parameter(torch.randn(s, device="cuda", dtype=dtype, generator=gen)) for _, s in named]
    for p in params:
        p.grad = torch.randn_like(p)
    if variant == "combo":
        import torch._inductor.config as inductor_config

        inductor_config.combo_kernels = True
    if variant == "cudagraph":
        def update_all(ps, gs, ms, hp):
            for p, g, m in zip(ps, gs, ms):
                adams_update(p, g, m, hp)

        mo._compiled = functools.cache(lambda u: torch.compile(update_all, dynamic=False, fullgraph=True, mode="reduce-overhead"))
    opt = AdamS(params, fused=True)
    start = time.perf_counter()
    opt.step()
    torch.cuda.synchronize()
    print(variant, args.dtype, "first step s", round(time.perf_counter() - start, 1))
    for _ in range(3):
        opt.step()
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        start = time.perf_counter()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    print(variant, args.dtype, "median ms", round(statistics.median(times) * 1e3, 3), flush=True)
    if variant == "base":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                opt.step()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10, max_name_column_width=60))


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
