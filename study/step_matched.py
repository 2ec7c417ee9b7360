"""AdamS against AdamW at the same step length: each AdamS lr read at lr × R̄ on AdamW's lr grid.

    python -m study.step_matched study/results/runs/bpe_long/adamw*/*seed=1/ study/results/runs/bpe_long/adams/*seed=1/ \\
        study/results/runs/bpe_long/adams_lr/*seed=1/ --rbar 3.35 --at 1600 2400 --out study/results/step_matched/bpe_long

R̄ (printed by study/noise_scale.py) is how much longer AdamS's steps are than AdamW's from the same
gradients, so AdamS at lr steps as far as AdamW at lr × R̄: the lr rule in the README is that
equivalence. This checks it on finished grids. For every AdamS lr (mean over seeds) and every step
in --at (default: the last evaluation all runs share), it reads AdamW's validation loss at lr × R̄,
linearly in log lr between AdamW's two neighbouring grid lrs (nothing outside AdamW's grid), and
gives AdamS's loss minus that: 0 where AdamS trains like AdamW at equal step length, > 0 where it is
behind. With two or more --at steps it also gives both optimizers' drop from the first to the last
(e.g. over the lr decay), so one sees in which part of the run a difference arises.

Writes OUT.csv, OUT.md and OUT.png (loss against the AdamW-equivalent lr, a panel per --at step).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import cli
from errors import UserError
from scripts import out_file, save_figure, write_csv, write_text
from scripts.plot_curves import load_run
from study import pack

# the settings that shape training (other than the optimizer, its lr and the seed): they must agree
SAME = ("dataset", "model", "n_layer", "n_head", "n_embd", "dropout", "bias", "batch_size", "block_size",
        "gradient_accumulation_steps", "max_iters", "warmup_iters", "lr_decay_iters", "decay_lr", "decay_shape",
        "weight_decay", "beta1", "beta2", "eps", "grad_clip", "embedding_lr_scale", "dtype", "eval_interval",
        "eval_iters")


def loss_curves(dirs: list[Path]) -> dict[tuple[str, float], list[dict[int, float]]]:
    """{(optimizer, lr): one {iter: val_loss} per seed} for the AdamW and AdamS runs among dirs."""
    from configurator import TrainConfig, as_dict

    curves: dict[tuple[str, float], list[dict[int, float]]] = {}
    first: tuple[Path, dict] | None = None
    for d in dirs:
        if not (d / "metrics.jsonl").exists() or not (d / "config.json").exists():
            raise UserError(f"{d} is not a run folder (no config.json and metrics.jsonl); pass train.py out_dirs")
        config, evals = load_run(d)
        if config["optimizer"] not in ("adamw", "adams"):
            continue
        config = {**as_dict(TrainConfig()), **config}  # a setting added after the run was made has its default
        if first is None:
            first = d, config
        differ = [k for k in SAME if config[k] != first[1][k]]
        if differ:
            k = differ[0]
            raise UserError(f"{first[0]} and {d} differ in {k} ({first[1].get(k)!r} against {config.get(k)!r}); "
                             "compare runs of one setting at a time")
        curves.setdefault((config["optimizer"], config["learning_rate"]), []).append(
            {e["iter"]: e["val_loss"] for e in evals})
    return curves


def mean_at(runs: list[dict[int, float]], step: int) -> float | None:
    """The loss at `step`, averaged over seeds; None if a seed has no evaluation there."""
    return statistics.mean(r[step] for r in runs) if all(step in r for r in runs) else None


def interpolate_log(x: float, points: list[tuple[float, float]]) -> float | None:
    """y at x, linear in log x between the two neighbouring points; None outside them."""
    points = sorted(points)
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            t = math.log(x / x0) / math.log(x1 / x0)
            return y0 + t * (y1 - y0)
    return None


def step_matched(curves: dict, rbar: float, steps: list[int]) -> list[dict]:
    """One row per AdamS lr: its loss, AdamW's at lr × rbar, and the difference, at every step."""
    rows = []
    for (opt, lr), runs in sorted(curves.items()):
        if opt != "adams":
            continue
        row = dict(adams_lr=lr, adamw_equivalent_lr=lr * rbar, seeds=len(runs))
        for step in steps:
            adamw = [(w_lr, mean_at(w_runs, step)) for (w_opt, w_lr), w_runs in curves.items() if w_opt == "adamw"]
            same = interpolate_log(lr * rbar, [p for p in adamw if p[1] is not None])
            mine = mean_at(runs, step)
            row[f"adams_{step}"], row[f"adamw_{step}"] = mine, same
            row[f"minus_{step}"] = mine - same if None not in (mine, same) else None
        if len(steps) > 1:
            first, last = steps[0], steps[-1]
            for opt_name in ("adams", "adamw"):
                a, b = row[f"{opt_name}_{first}"], row[f"{opt_name}_{last}"]
                row[f"{opt_name}_drop"] = a - b if None not in (a, b) else None
        rows.append(row)
    return rows


def markdown(rows: list[dict], steps: list[int], rbar: float) -> str:
    def num(v):
        return "—" if v is None else f"{v:.4f}"

    head = ["AdamS lr", f"× R̄ = {rbar:g}"] + [h for s in steps for h in (f"AdamS @{s}", f"AdamW @{s}", "AdamS − AdamW")]
    drops = len(steps) > 1
    head += [f"AdamS drop {steps[0]}→{steps[-1]}", "AdamW drop"] if drops else []
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(["---:"] * len(head)) + " |"]
    for r in rows:
        cells = [f"{r['adams_lr']:.3g}", f"{r['adamw_equivalent_lr']:.3g}"]
        cells += [num(r[f"{k}_{s}"]) for s in steps for k in ("adams", "adamw", "minus")]
        cells += [num(r["adams_drop"]), num(r["adamw_drop"])] if drops else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(curves: dict, rows: list[dict], steps: list[int], rbar: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig, axes = plt.subplots(1, len(steps), figsize=(5.5 * len(steps), 4.5), squeeze=False)
    for ax, step in zip(axes[0], steps):
        adamw = sorted((lr, mean_at(runs, step)) for (opt, lr), runs in curves.items() if opt == "adamw")
        adamw = [p for p in adamw if p[1] is not None]
        ax.plot(*zip(*adamw), "o-", label="AdamW at lr")
        adams = [(r["adamw_equivalent_lr"], r[f"adams_{step}"]) for r in rows if r[f"adams_{step}"] is not None]
        ax.plot(*zip(*adams), "s--", label=f"AdamS, placed at its lr × {rbar:g}")
        ax.set(xscale="log", xlabel="AdamW-equivalent peak lr (AdamS: lr × R̄)", ylabel="validation loss",
               title=f"step {step}")
        # grids span about a decade, where matplotlib's minor labels overlap: label 1, 2 and 5 per decade instead
        ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:.0e}".replace("e-0", "e-")))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("AdamS and AdamW at equal step length")
    fig.tight_layout()
    save_figure(fig, path, dpi=130)


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=cli.text("a run folder"), help="AdamW and AdamS run folders (train.py out_dirs; packed scans' too)")
    parser.add_argument("--rbar", type=cli.positive, required=True, help="AdamS/AdamW step-length ratio (study/noise_scale.py)")
    parser.add_argument("--at", type=cli.natural, nargs="+", help="evaluation steps to compare at (default: the last shared)")
    parser.add_argument("--out", type=cli.place, default=Path("out/step_matched"))
    args = parser.parse_args(argv)
    curves = loss_curves(pack.expand(args.runs))
    for opt in ("adamw", "adams"):
        if not any(o == opt for o, _ in curves):
            raise UserError(f"no {opt} run among the given folders; pass both optimizers' runs")
    shared = set.intersection(*(set(r) for runs in curves.values() for r in runs))
    steps = sorted(args.at) if args.at else sorted(shared)[-1:]
    missing = [s for s in steps if s not in shared]
    if missing:
        raise UserError(f"not every run has an evaluation at step {missing[0]}; steps all share: "
                         f"{', '.join(map(str, sorted(shared)))}")

    rows = step_matched(curves, args.rbar, steps)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out_file(args.out, ".csv"), rows)
    text = markdown(rows, steps, args.rbar)
    write_text(out_file(args.out, ".md"), text)
    plot(curves, rows, steps, args.rbar, out_file(args.out, ".png"))
    print(text)
    print(f"wrote {args.out}.csv, .md and .png")
    return rows


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
