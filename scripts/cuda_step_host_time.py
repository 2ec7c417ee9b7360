"""CPU time of one fused AdamS/Lion step on CUDA, measured without a GPU.

On an H100 the fused step at GPT-2 Small took 1.47 ms where moving its bytes at copy bandwidth
takes 0.9 ms (an earlier kernel, 2026-11-23): much of the rest is CPU work, per tensor, before the one
Triton launch. That work is Python and does not depend on the GPU, so this script times it on a
CPU: the CUDA branch of ``MomentumOnlyOptimizer._step_fused`` runs for real on CPU tensors, with
the Triton launch replaced by a no-op (the launch itself is not included). Tensor sizes do not
matter to this work, so the models keep GPT-2's layer counts (and so its number of tensors) at
width 64. Single-threaded; a 2-core VM, so expect a few percent between runs.

    python -m scripts.cuda_step_host_time > results/cpu/cuda_step_host_time.txt
    python -m scripts.cuda_step_host_time --repeats 5   # a quick check that it runs
"""

import contextlib
import statistics
import sys
import time
import types

import torch
import torch._dynamo  # noqa: F401  (imported before the stub below hides the real triton)
from adams_optim import AdamS, Lion, _triton_fused
from adams_optim._momentum_only import MomentumOnlyOptimizer

import cli
from model import GPT, GPTConfig

LAYERS = {"small": 12, "medium": 24, "large": 36, "xl": 48}


class _NoLaunch:  # kernel[grid](*args) only counts the launch
    launches = 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            _NoLaunch.launches += 1

        return launch


def stub_triton():
    tl = types.ModuleType("triton.language")
    tl.float32, tl.bfloat16, tl.float16 = "float32", "bfloat16", "float16"
    sys.modules["triton"], sys.modules["triton.language"] = types.ModuleType("triton"), tl
    kernels = types.ModuleType("adams_optim._triton_kernels")
    kernels.multi_tensor_kernel = _NoLaunch()
    sys.modules["adams_optim._triton_kernels"] = kernels
    _triton_fused.available = lambda: True
    torch.cuda.device = lambda device: contextlib.nullcontext()
    step_fused = MomentumOnlyOptimizer._step_fused
    MomentumOnlyOptimizer._step_fused = lambda self, ps, gs, ms, hp, device: step_fused(
        self, ps, gs, ms, hp, torch.device("cuda"))


def time_steps(opt, repeats=300):
    before = _NoLaunch.launches
    for _ in range(5):
        opt.step()
    assert _NoLaunch.launches == before + 5, "the step did not take the Triton branch: nothing was measured"
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=cli.integer(1, 1_000_000), default=300,
                        help="timed steps per optimizer and size (the median is kept)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    stub_triton()
    print(f"torch {torch.__version__}; CPU time per step, median of {args.repeats} (ms); Triton launch not included")
    print(f"{'size':8s} {'tensors':>7s} {'AdamS':>8s} {'Lion':>8s}")
    for size, n_layer in LAYERS.items():
        model = GPT(GPTConfig(n_layer=n_layer, n_head=4, n_embd=64, block_size=64, vocab_size=256))
        params = list(model.parameters())
        for p in params:
            p.grad = torch.randn_like(p)
        adams = time_steps(AdamS(params, lr=1e-4, fused=True), args.repeats)
        lion = time_steps(Lion(params, lr=1e-5, fused=True), args.repeats)
        print(f"{size:8s} {len(params):7d} {adams:8.3f} {lion:8.3f}", flush=True)


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
