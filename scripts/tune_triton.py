"""Time the fused Triton AdamS step at other block sizes and elements per thread (CUDA only).

    python -m scripts.tune_triton                                   # GPT-2 Small shapes, fp32 and bf16
    python -m scripts.tune_triton --dtypes bfloat16 --block-bytes 8192 16384 --json tune.json

optim/_triton_fused.py's SETTINGS give each program, per element size, a number of bytes of each of
p, g and m and a number of elements a thread (so bytes / itemsize / 32 / elements warps). This
times every combination whose warp count Triton accepts (1-32), each against torch's fused AdamW
as scripts/bench_optim.py does, and prints them fastest first, so that SETTINGS is set from a
measurement instead of a guess (results/gpu/tune_triton.json: one H200).
"""

from __future__ import annotations

import torch
from adams_optim import _triton_fused

import cli
from errors import UserError
from model import SIZES
from scripts import write_json
from scripts.bench_optim import bench, copy_bandwidth


def settings(dtype: torch.dtype, block_bytes: list[int], elements: list[int]) -> list[tuple[int, int, int]]:
    """(block bytes, elements per thread, warps) for every pair that gives 1-32 warps, a power of two."""
    out = []
    for b in block_bytes:
        for e in elements:
            warps, rest = divmod(b // dtype.itemsize, 32 * e)
            if not rest and 1 <= warps <= 32 and warps & (warps - 1) == 0:
                out.append((b, e, warps))
    return out


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["small"], choices=list(SIZES), help="GPT-2 sizes whose shapes to use")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    parser.add_argument("--block-bytes", nargs="+", type=cli.integer(16, 1 << 20), default=[4096, 8192, 16384, 32768])
    parser.add_argument("--elements", nargs="+", type=cli.integer(1, 1024), default=[4, 8, 16, 32], help="elements per thread")
    parser.add_argument("--repeats", type=cli.integer(1, 100_000), default=20, help="timed steps per setting (median reported)")
    parser.add_argument("--json", type=cli.place, help="also write the results here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or not _triton_fused.available():
        raise UserError("tune_triton needs a CUDA GPU and Triton: the CPU's fused step is not the Triton kernel")

    device = torch.device("cuda")
    copy_gbps = copy_bandwidth(device, 256 * 2**20, args.repeats)
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, copy_gbps=copy_gbps, rows=[])
    print(f"device: {result['device']}; copy bandwidth {copy_gbps:.0f} GB/s; torch {torch.__version__}")
    default = dict(_triton_fused.SETTINGS)
    try:
        for size in args.sizes:
            for name in args.dtypes:
                dtype, rows = getattr(torch, name), []
                for b, e, warps in settings(dtype, args.block_bytes, args.elements):
                    _triton_fused.SETTINGS[dtype.itemsize] = (b, e)
                    row = next(r for r in bench(size, False, dtype, device, args.repeats, ["adams fused"])
                               if r["optimizer"] == "adams fused")
                    rows.append(dict(row, dtype=name, block_bytes=b, elements_per_thread=e, warps=warps,
                                     pct_copy=100 * row["gbps"] / copy_gbps, default=(b, e) == default[dtype.itemsize]))
                print(f"\n{size} {name}: {'block bytes':>11} {'elem/thread':>11} {'warps':>5} {'ms':>7} {'% copy':>7} {'/ adamw':>8}")
                for r in sorted(rows, key=lambda r: r["ms"]):
                    print(f"{'':>{len(size) + len(name) + 2}} {r['block_bytes']:11} {r['elements_per_thread']:11} {r['warps']:5} "
                          f"{r['ms']:7.3f} {r['pct_copy']:6.0f}% {r['ratio_to_adamw_fused']:8.3f}{'  (current)' if r['default'] else ''}")
                result["rows"] += rows
                if args.json:  # rewritten after every dtype, so that an interrupted run keeps what it measured
                    write_json(args.json, result)
    finally:
        _triton_fused.SETTINGS.clear()
        _triton_fused.SETTINGS.update(default)
    return result


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
