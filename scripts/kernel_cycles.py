"""Time the fused CPU kernels' arithmetic: nanoseconds per element with the data in cache, one thread.

    python -m scripts.kernel_cycles                          # this tree's optim/_cpu_kernels.cpp
    python -m scripts.kernel_cycles --against 4c5aa33        # and another revision's, alternated
    python -m scripts.kernel_cycles --against eb3e6b1 --elements 33554432 --rounds 5 --calls 3   # out of cache

bench_optim.py times a whole step, which on most machines is bound by memory, so it cannot say
whether a change to the kernels' arithmetic helped. Here each kernel updates 2^18 elements
(3 MiB in fp32, inside a typical L3) again and again on one thread, so the time is the loop's own:
loads, conversions, arithmetic, stores. Kernels are built from source exactly as
optim/_cpu_fused.py builds them (same flags, same vector width); revisions are compared
round-robin, and the fastest of the rounds is reported, the usual estimate of a loop's cost when
other work only ever adds time.

With --elements large (2^25 fp32 elements: 384 MiB over p, g and m, past any L2 and most L3s)
the same comparison times the loop against memory on one thread, which is where the kernels'
prefetch hints (commit 17343ec) show.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from adams_optim import _cpu_fused

import cli
from errors import UserError
from scripts.bench_optim import floor_kernels

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "optim/_cpu_kernels.cpp"


def source_at(rev: str) -> str:
    """The kernel source at a git revision."""
    done = subprocess.run(["git", "show", f"{rev}:{SOURCE}"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"cannot read {SOURCE} at revision {rev!r} ({done.stderr.strip()}); "
                         "pass a commit, tag or branch of this repository")
    return done.stdout


def build(source: str):
    """Compile another revision's kernel source as optim/_cpu_fused.py compiles this tree's."""
    cap = _cpu_fused.capability()
    name = f"kernel_cycles_{cap.lower()}_{hashlib.sha1(source.encode()).hexdigest()[:10]}"
    if "TORCH_LIBRARY" in source:  # an operator library, as the kernels are built now
        path = Path(tempfile.mkdtemp()) / f"{name}.cpp"
        path.write_text(source)
        return _cpu_fused.build(name, path)
    from torch.utils.cpp_extension import load_inline  # older revisions: a pybind11 module

    functions = [f for f in ("adams_step", "lion_step", "no_math_step") if f"void {f}(" in source]
    return load_inline(name=name, cpp_sources=source, functions=functions,
                       extra_cflags=["-O3", "-fopenmp", *_cpu_fused._FLAGS.get(cap, [])], extra_ldflags=["-fopenmp"])


def calls(module, p, g, m):
    """name -> a call of each kernel the module has, at AdamS's and Lion's usual settings."""
    found = {"adams": lambda: module.adams_step(p, g, m, 1e-6, 0.1, 0.9, 0.95, 1e-8, 1.0),
             "lion": lambda: module.lion_step(p, g, m, 1e-6, 0.1, 0.9, 0.99),
             "no-math": lambda: module.no_math_step(p, g, m)}
    return {k: f for k, f in found.items() if hasattr(module, f"{k.replace('-', '_')}_step")}


def measure(modules: dict, dtype, n: int, rounds: int, calls_per_round: int) -> dict:
    """(revision, kernel) -> ns per element, the fastest of ``rounds`` rounds."""
    best = {}
    for _ in range(rounds):
        for rev, module in modules.items():
            gen = torch.Generator().manual_seed(0)  # the same values for every revision
            p, g = [torch.randn(n, generator=gen).to(dtype)], [torch.randn(n, generator=gen).to(dtype)]
            m = [(torch.randn(n, generator=gen) * 1e-3).to(dtype)]
            for kernel, call in calls(module, p, g, m).items():
                call()
                start = time.perf_counter()
                for _ in range(calls_per_round):
                    call()
                ns = (time.perf_counter() - start) / calls_per_round / n * 1e9
                best[rev, kernel] = min(ns, best.get((rev, kernel), float("inf")))
    return best


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", nargs="*", type=cli.Kind("a git revision", str, lambda v: bool(re.fullmatch(r"[\w./^~-]+", v)), str), default=[], metavar="REV", help="git revisions to compare with this tree")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--elements", type=cli.integer(1, 1 << 31), default=1 << 18, help="elements per tensor (keep p, g, m inside the cache)")
    parser.add_argument("--rounds", type=cli.integer(1, 10_000), default=15)
    parser.add_argument("--calls", type=cli.integer(1, 1_000_000), default=50, help="kernel calls per timed round")
    args = parser.parse_args(argv)

    sources = {rev: source_at(rev) for rev in args.against}  # a bad revision fails before any build
    try:
        modules = {"this tree": floor_kernels()}  # this tree's kernels with the no-math one, cached per machine
    except Exception as e:  # no compiler or ninja, or a build error
        raise UserError(f"the C++ kernels cannot be built here ({type(e).__name__}); a C++ compiler and ninja are "
                        "needed") from None
    for rev, source in sources.items():
        modules[rev] = build(source)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return table(modules, args)
    finally:
        torch.set_num_threads(threads)  # (a caller in the same process keeps its own)


def table(modules: dict, args) -> list[dict]:
    print(f"CPU kernels ({_cpu_fused.capability()}), {args.elements:,} elements, one thread, torch {torch.__version__}; "
          f"ns per element, fastest of {args.rounds} rounds")
    rows = []
    for dtype in args.dtypes:
        best = measure(modules, getattr(torch, dtype), args.elements, args.rounds, args.calls)
        for kernel in ("adams", "lion", "no-math"):  # each kernel's revisions side by side
            for rev in modules:
                if (rev, kernel) in best:
                    rows.append(dict(dtype=dtype, revision=rev, kernel=kernel, ns_per_element=best[rev, kernel]))
                    print(f"{dtype:9} {kernel:8} {rev:12} {best[rev, kernel]:7.3f}")
    return rows


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
