"""Our train.py against karpathy/nanoGPT's, side by side on a CPU, at nanoGPT's own CPU-sized shape.

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT
    python -m scripts.bench_nanogpt --nanogpt /tmp/nanoGPT                      # 3 pairs of 400 iterations
    python -m scripts.bench_nanogpt --nanogpt /tmp/nanoGPT --threads 1 --json results/cpu/bench_nanogpt.json

Both train the same model (4 layers, 128 wide, 4 heads, 128 tokens, batch 16, no bias, no dropout, fp32,
eager, GELU's exact form as nanoGPT has it; ``--gelu tanh`` gives ours GPT-2's form, about 3.5% slower at
this shape on a CPU) with AdamW for ``--iters`` iterations on the same tokens (the embedded corpus, byte-level: nanoGPT
reads it from raw uint16 files and a meta.pkl of its vocabulary, written to a temporary folder), each
evaluating 20 batches at the start and the end and saving one checkpoint, logging every 10 iterations.
The two run in turn, in pairs whose order alternates, each a fresh process; a pair's ratio is nanoGPT's
wall time over ours (above 1: ours is faster), and the figure is the median over the pairs; the same ratio
of CPU time is given too, as the steadier on a machine shared with others. Each run's
per-iteration time (the median of its logged ``time ...ms`` figures, which both print) says whether a gap
is per iteration or start-up. nanoGPT's checkout is only run, never copied into this repository.
"""

from __future__ import annotations

import os
import pickle
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import cli
import dataset
from errors import UserError
from scripts import write_json

REPO = Path(__file__).resolve().parents[1]
SHAPE = dict(n_layer=4, n_head=4, n_embd=128, block_size=128, batch_size=16, dropout=0.0, bias=False,
             gradient_accumulation_steps=1, learning_rate=1e-3, min_lr=1e-4, eval_iters=20, log_interval=10)
ITER_TIME = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms", re.M)


def nanogpt_data(folder: Path) -> Path:
    """The embedded corpus as nanoGPT reads a dataset: raw uint16 train.bin and val.bin, and meta.pkl."""
    data = dataset.load("data", "pystdlib", SHAPE["block_size"])
    folder.mkdir(parents=True)
    for split in ("train", "val"):
        np.asarray(data[split], dtype=np.uint16).tofile(folder / f"{split}.bin")
    with open(folder / "meta.pkl", "wb") as f:  # nanoGPT takes its vocabulary size from here (else 50,304)
        pickle.dump({"vocab_size": data["vocab_size"]}, f)
    return folder


def commands(nanogpt: Path, tmp: Path, data: Path, iters: int, gelu: str = "exact") -> dict[str, tuple[list[str], Path]]:
    shared = dict(SHAPE, max_iters=iters, lr_decay_iters=iters, warmup_iters=iters // 10, eval_interval=iters)
    flags = [f"--{k}={v}" for k, v in shared.items()]
    return {
        "nanoGPT": ([sys.executable, str(nanogpt / "train.py"), *flags, f"--dataset={data}", "--device=cpu",
                     "--dtype=float32", "--compile=False", f"--out_dir={tmp / 'nanogpt_out'}"], nanogpt),
        "ours": ([sys.executable, str(REPO / "train.py"), *flags, "--dataset=pystdlib", "--device=cpu", "--dtype=float32",
                  "--compile=False", "--optimizer=adamw", f"--gelu={gelu}", "--sample_tokens=0", "--overwrite=True",
                  f"--out_dir={tmp / 'ours_out'}"], REPO),
    }


def run(name: str, command: list[str], cwd: Path, env: dict) -> dict:
    """One run: its wall time, its CPU time (user and system, its threads together: on a shared machine the less
    noisy of the two) and its median logged time per iteration."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise UserError(f"{name}'s run failed (exit {done.returncode}); its last lines:\n{tail}")
    times = [float(ms) for it, ms in ITER_TIME.findall(done.stdout) if int(it) > 0]
    return dict(wall_s=wall, cpu_s=cpu, iter_ms=statistics.median(times) if times else None)


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nanogpt", type=cli.existing, required=True, help="a checkout of karpathy/nanoGPT")
    parser.add_argument("--pairs", type=cli.integer(1, 100), default=3, help="alternating pairs of runs")
    parser.add_argument("--iters", type=cli.integer(10, 1_000_000), default=400)
    parser.add_argument("--threads", type=cli.integer(1, 1024), help="OMP_NUM_THREADS for both (default: torch's own)")
    parser.add_argument("--gelu", choices=("exact", "tanh"), default="exact", help="ours: nanoGPT's GELU, or GPT-2's")
    parser.add_argument("--json", type=cli.place, help="write the pairs and the ratio here")
    args = parser.parse_args(argv)
    missing = [n for n in ("train.py", "model.py", "configurator.py") if not (args.nanogpt / n).is_file()]
    if missing:
        raise UserError(f"{args.nanogpt} is not a nanoGPT checkout (no {missing[0]}); git clone "
                        "https://github.com/karpathy/nanoGPT and pass its folder")
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}))
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        runs = commands(args.nanogpt.resolve(), tmp, nanogpt_data(tmp / "nanogpt_data"), args.iters, args.gelu)
        progress = cli.progress(range(args.pairs), "pairs")
        for k in progress:
            order = ("nanoGPT", "ours") if k % 2 == 0 else ("ours", "nanoGPT")
            pair = {name: run(name, *runs[name], env) for name in order}
            pair["ratio"] = pair["nanoGPT"]["wall_s"] / pair["ours"]["wall_s"]
            pair["cpu_ratio"] = pair["nanoGPT"]["cpu_s"] / pair["ours"]["cpu_s"]
            pairs.append(pair)
            print(f"pair {k + 1}: nanoGPT {pair['nanoGPT']['wall_s']:.1f} s, ours {pair['ours']['wall_s']:.1f} s, "
                  f"ratio {pair['ratio']:.3f} (CPU time: {pair['cpu_ratio']:.3f})", flush=True)
    ratio, cpu_ratio = (statistics.median(p[key] for p in pairs) for key in ("ratio", "cpu_ratio"))
    per_iter = {name: statistics.median(p[name]["iter_ms"] for p in pairs) for name in ("nanoGPT", "ours")}
    print(f"nanoGPT's wall time over ours: {ratio:.3f} (median of {len(pairs)} alternating pairs; CPU time "
          f"{cpu_ratio:.3f}); per iteration "
          f"{per_iter['nanoGPT']:.1f} ms against our {per_iter['ours']:.1f} ms (medians of the logged times)")
    result = dict(ratio=ratio, cpu_ratio=cpu_ratio, iter_ms=per_iter, pairs=pairs,
                  shape=dict(SHAPE, max_iters=args.iters, optimizer="adamw", gelu=args.gelu),
                  threads=args.threads or torch.get_num_threads(), cpu=platform.processor() or platform.machine(),
                  cores=os.cpu_count(), torch=torch.__version__,
                  command="python -m scripts.bench_nanogpt " + " ".join(argv if argv is not None else sys.argv[1:]))
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
