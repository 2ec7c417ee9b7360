"""What AdamW's lr costs AdamS as one model trains longer: AdamS minus AdamW at one lr, along runs of several lengths.

    python -m study.run_length    # -> study/results/analysis/run_length.png and .csv

Reads the width-128 runs (426,624 parameters) at 100, 200 and 400 tokens per parameter
(study/results/runs/tiny/w128_{20800,41600,83200}/{adamw,adams}/learning_rate=LR_seed=N/), pairs AdamS and
AdamW at the same lr and seed, and subtracts their validation losses at every evaluation both made.
Left: that difference against the fraction of the run's tokens seen, a curve per length and seed, so
runs of different lengths share an axis (warmup and the cosine decay sit at the same fractions).
Right: the final difference against tokens per parameter, a point per seed and the seeds' mean (a hollow
square, with the number of seeds beside it, so a one-seed length's point shows through).
Only finished runs count; a length with no finished pair at the lr is left out.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import cli
from errors import UserError
from scripts import save_figure, write_csv
from scripts.sweep import final_val_loss
from study import pack

ROOT = Path(__file__).resolve().parents[1]

LENGTHS = [pack.resolve(ROOT / f"study/results/runs/tiny/w128_{steps}") for steps in (20800, 41600, 83200)]  # packed in tiny.zip


def evals(run: Path) -> dict[int, float]:
    """{iteration: validation loss} of a run's evaluations."""
    rows = (json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"val_loss"' in line)
    return {r["iter"]: r["val_loss"] for r in rows}


def pairs(root: Path, lr: str) -> list[dict]:
    """The finished AdamS/AdamW pairs at ``lr`` (as the run folders spell it) under one length's folder."""
    out = []
    for adams in pack.expand([f"{root}/adams/learning_rate={lr}_seed=*"]):
        adamw = root / "adamw" / adams.name
        if not (final_val_loss(adams)[1] and final_val_loss(adamw)[1]):
            continue
        saved = json.loads((adams / "config.json").read_text())
        config, derived = saved["config"], saved["derived"]
        s, w = evals(adams), evals(adamw)
        shared = sorted(set(s) & set(w) - {0})  # step 0 is the untrained model: the same for both
        steps = config["max_iters"]
        out.append(dict(steps=steps, seed=config["seed"],
                        tokens_per_param=steps * derived["tokens_per_iter"] / derived["parameters"],
                        iters=shared, diff=[s[i] - w[i] for i in shared]))
    return out


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lr", default="4e-3", help="the lr both optimizers ran, as the run folders spell it")
    parser.add_argument("--lengths", nargs="+", type=cli.existing, default=LENGTHS,
                        help="one folder per run length, each holding adamw/ and adams/ sweeps")
    parser.add_argument("--out", type=cli.place, default=Path("out/run_length"), help="output path without extension")
    args = parser.parse_args(argv)
    found = [p for root in args.lengths for p in pairs(root, args.lr)]
    if not found:
        raise UserError(f"no finished AdamS/AdamW pair at learning_rate={args.lr} under {', '.join(map(str, args.lengths))}; "
                 "run the sweeps in study/report/run_length_and_size.md, 'Width 128 at 400 tokens per parameter'")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    lengths = sorted({p["tokens_per_param"] for p in found})
    colors = dict(zip(lengths, plt.cm.viridis([0.1 + 0.8 * i / max(len(lengths) - 1, 1) for i in range(len(lengths))])))
    styles = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1))]  # a fifth, dash-dot-dot, so seed 5 is not seed 1
    rows = []
    for p in found:
        fraction = [i / p["steps"] for i in p["iters"]]
        left.plot(fraction, p["diff"], color=colors[p["tokens_per_param"]], ls=styles[(p["seed"] - 1) % len(styles)],
                  label=f"{p['tokens_per_param']:.0f} tokens/param, seed {p['seed']}")
        right.plot(p["tokens_per_param"], p["diff"][-1], "o", color=colors[p["tokens_per_param"]], alpha=0.7, zorder=3)
        rows += [dict(steps=p["steps"], tokens_per_param=round(p["tokens_per_param"], 1), seed=p["seed"], iter=i,
                      fraction=round(f, 4), adams_minus_adamw=round(d, 5))
                 for i, f, d in zip(p["iters"], fraction, p["diff"])]
    means = [statistics.mean(p["diff"][-1] for p in found if p["tokens_per_param"] == t) for t in lengths]
    right.plot(lengths, means, "k-", marker="s", mfc="none", ms=9, label="mean over seeds (n beside it)")
    for t, m in zip(lengths, means):
        n = sum(p["tokens_per_param"] == t for p in found)
        right.annotate(f"n={n}", (t, m), textcoords="offset points", xytext=(7, 4), fontsize=7)
        print(f"{t:6.0f} tokens/param: AdamS - AdamW at lr {args.lr}, final, mean over {n} seed(s): {m:+.4f}")
    for ax in (left, right):
        ax.axhline(0, color="grey", lw=0.8)
        ax.legend(fontsize=7)
    left.set_xlabel("fraction of the run's tokens")
    left.set_ylabel(f"AdamS − AdamW validation loss, both at lr {args.lr}")
    left.set_title("along the run")
    right.set_xscale("log")
    right.set_xticks(lengths, [f"{t:.0f}" for t in lengths])
    right.minorticks_off()
    right.set_xlabel("tokens per parameter")
    right.set_ylabel("final AdamS − AdamW")
    right.set_title("at the end of each run")
    fig.tight_layout()
    png, table = args.out.with_name(args.out.name + ".png"), args.out.with_name(args.out.name + ".csv")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, png, dpi=110)
    write_csv(table, rows)
    print(f"wrote {png} and {table}")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
