"""Training throughput of AdamW and AdamS: tokens/s and MFU, measured by running train.py itself.

    python -m scripts.bench_train --json results/gpu/train_throughput.json          # GPT-2 Small, one GPU
    python -m scripts.bench_train --set n_layer=2 --set n_embd=64 --set n_head=2 \\
        --set block_size=64 --set batch_size=4 --set compile=False --iters 20          # a CPU smoke run

Each optimizer trains GPT-2 Small (config/train_gpt2_small_<optimizer>.py: bf16 autocast on
GPUs that have it, torch.compile, SDPA attention) for ``--iters`` iterations of ``--batch-size``
sequences on random tokens from GPT-2's vocabulary (the data does not matter for speed, and this
needs no download), with no gradient accumulation. The throughput and MFU are the medians of the
log lines of the second half of the run, read from the run's metrics.jsonl.
"""

from __future__ import annotations

import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import cli
import folders
import metrics
from errors import UserError
from scripts import write_json
from tokens import write_tokens

REPO = Path(__file__).resolve().parents[1]


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--optimizers", nargs="+", type=cli.choice(lazily=lambda: __import__("adams_optim").OPTIMIZERS), default=["adamw", "adams"])
    parser.add_argument("--iters", type=cli.integer(1, 10_000_000), default=200)
    parser.add_argument("--batch-size", type=cli.integer(1, 1 << 16), default=16, help="sequences per micro-step")
    parser.add_argument("--set", action="append", type=cli.assignment, default=[], metavar="KEY=VALUE", help="extra train.py override")
    parser.add_argument("--json", type=cli.place)
    args = parser.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        rng = np.random.default_rng(0)
        for split, n in (("train", 2_000_000), ("val", 200_000)):
            write_tokens(data / "random" / f"{split}.bin", rng.integers(0, 50257, n), 50257)
        for name in args.optimizers:
            out = Path(tmp) / name
            cmd = [sys.executable, "train.py", f"config/train_gpt2_small_{name}.py", "--dataset=random",
                   f"--data_dir={data}", f"--out_dir={out}", f"--max_iters={args.iters}", f"--lr_decay_iters={args.iters}",
                   f"--warmup_iters={min(10, args.iters // 2)}", "--gradient_accumulation_steps=1", f"--batch_size={args.batch_size}",
                   "--eval_iters=1", f"--eval_interval={args.iters}", "--log_interval=1", "--always_save_checkpoint=False",
                   # bias=True: the committed figures (results/gpu/train_throughput*.json) ran before the paper
                   # configs took the authors' bias=False; --set bias=False measures those
                   "--sample_tokens=0", "--dtype=auto", "--bias=True", *[f"--{s}" for s in args.set]]
            result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
            if result.returncode != 0:
                said = [line.removeprefix("error: ") for line in result.stderr.splitlines() if line.startswith("error:")]
                why = said[-1] if said else (result.stderr.strip().splitlines() or ["no message"])[-1]
                raise UserError(f"{name}: train.py failed ({why}); its command: {' '.join(map(str, cmd))}")
            lines = metrics.read(out)[0]
            steady = lines[len(lines) // 2:]
            mfus = [r["mfu"] for r in steady if r["mfu"] is not None]
            row = dict(optimizer=name, tokens_per_s=statistics.median(r["tokens_per_s"] for r in steady),
                       mfu=statistics.median(mfus) if mfus else None, iters=args.iters, batch_size=args.batch_size,
                       config=folders.read_json(out / "config.json"))
            rows.append(row)
            mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "- (no known peak FLOPs for this device)"
            print(f"{name}: {row['tokens_per_s']:,.0f} tokens/s, MFU {mfu}")
    if args.json:  # with what ran it: the device train.py trained on, torch, and this command
        on_cuda = bool(rows) and rows[0]["config"]["derived"]["device"].startswith("cuda")
        device = torch.cuda.get_device_name() if on_cuda else platform.processor() or platform.machine()
        command = shlex.join(["python", "-m", "scripts.bench_train", *(sys.argv[1:] if argv is None else argv)])
        write_json(args.json, dict(device=device, torch=torch.__version__, command=command, rows=rows))
    return rows


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
