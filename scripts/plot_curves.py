"""Figures 1 and 4 of the AdamS paper: validation-loss curves of several runs, from their metrics.jsonl.

    python -m scripts.plot_curves out/train_gpt2_small_adamw out/train_gpt2_small_adams out/train_gpt2_small_lion
    python -m scripts.plot_curves out/sweep/*/ --group optimizer --out out/curves   # a sweep's runs, mean ± std over seeds

Each argument is a run's out_dir. With ``--group KEY [KEY ...]``, runs whose config agrees on
those keys (e.g. ``optimizer``, or ``optimizer learning_rate``) are drawn as one curve: the mean over seeds with a band of ± one standard deviation. Writes a PNG and a CSV of the plotted numbers.

With ``--minus LABEL`` a second panel shows every curve minus the one labelled LABEL (as the legend
and the printout name it), at the evaluations both have: where a gap opens or closes along the run,
which the loss curves, all close together, hide:

    python -m scripts.plot_curves out/sweep/adamw/*/ out/sweep/adams/*/ \
        --group optimizer learning_rate --minus "optimizer=adamw, learning_rate=0.0021"
"""

from __future__ import annotations

import statistics
from pathlib import Path

import cli
import metrics
from errors import UserError
from metrics import records
from scripts import out_file, save_figure, write_csv


def load_run(out_dir: Path) -> tuple[dict, list[dict]]:
    config = metrics.run_config(out_dir)
    evals = [r for r in records(out_dir / "metrics.jsonl") if "val_loss" in r]
    return config, evals


def group_of(out_dir: Path, config: dict, keys: list[str] | None) -> str:
    if not keys:
        return out_dir.name
    from configurator import TrainConfig, as_dict

    config = {**as_dict(TrainConfig()), **config}  # a setting added after the run was made has its default
    missing = [k for k in keys if k not in config]
    if missing:
        raise UserError(f"{out_dir}: its config has no key {missing[0]!r} to group by")
    return str(config[keys[0]]) if len(keys) == 1 else ", ".join(f"{k}={config[k]}" for k in keys)


def line_styles(labels, keys: list[str] | None) -> dict[str, str]:
    """A line style per curve: curves that share the first of several --group keys share one (solid,
    dashed, ...), so that e.g. each optimizer's learning rates read as one family."""
    if not keys or len(keys) < 2:
        return {label: "-" for label in labels}
    family = {label: label.split(f", {keys[1]}=")[0] for label in labels}
    order = sorted(set(family.values()))
    return {label: ("-", "--", ":", "-.")[order.index(family[label]) % 4] for label in labels}


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=cli.text("a run folder"), help="out_dirs holding metrics.jsonl and config.json")
    parser.add_argument("--group", nargs="+", type=cli.text("a config key"), help="config keys whose values group runs into one curve (e.g. optimizer)")
    parser.add_argument("--x", choices=["iter", "tokens"], default="iter")
    parser.add_argument("--out", type=cli.place, default=Path("out/curves"), help="output path without extension")
    parser.add_argument("--title", type=str, default="validation loss")
    parser.add_argument("--skip-first", type=cli.natural, default=1, help="evaluations to leave off the plot (the untrained model's)")
    parser.add_argument("--minus", type=cli.text("a curve's label"), metavar="LABEL", help="add a panel of every curve minus this one (a curve's label)")
    args = parser.parse_args(argv)

    groups: dict[str, list[list[dict]]] = {}
    for run in map(Path, args.runs):
        if not (run / "metrics.jsonl").exists():
            raise UserError(f"{run} has no metrics.jsonl; pass a run's out_dir")
        config, evals = load_run(run)
        groups.setdefault(group_of(run, config, args.group), []).append(evals)
    if args.minus is not None and args.minus not in groups:
        raise UserError(f"--minus {args.minus!r} names no curve; the curves are: "
                         + "; ".join(repr(label) for label in sorted(groups)))

    rows = []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if args.minus is None:
        fig, ax = plt.subplots(figsize=(11, 4.5))
    else:
        fig, (ax, gap_ax) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True, height_ratios=(3, 2))
    finals, styles = [], line_styles(groups, args.group)
    for label, runs in sorted(groups.items()):
        xs = sorted(set.intersection(*({e[args.x] for e in evals} for evals in runs)))[args.skip_first:]
        if not xs:  # e.g. a run that has only just started
            print(f"left out {label}: its runs share no evaluation after the first {args.skip_first}")
            continue
        by_x = [{e[args.x]: e["val_loss"] for e in evals} for evals in runs]
        means = [statistics.mean(r[x] for r in by_x) for x in xs]
        stds = [statistics.stdev(r[x] for r in by_x) if len(by_x) > 1 else 0.0 for x in xs]
        line, = ax.plot(xs, means, styles[label], label=f"{label} (n={len(runs)}): {means[-1]:.4f}")
        ax.fill_between(xs, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                        color=line.get_color(), alpha=0.2)
        finals.append((means[-1], line, label))
        rows += [dict(group=label, x=x, mean=m, std=s, n=len(runs)) for x, m, s in zip(xs, means, stds)]
    if args.minus is not None:
        base = {r["x"]: r["mean"] for r in rows if r["group"] == args.minus}
        for r in rows:
            r["minus"] = r["mean"] - base[r["x"]] if r["x"] in base else None
        for _, line, label in finals:
            points = [(r["x"], r["minus"]) for r in rows if r["group"] == label and r["minus"] is not None]
            gap_ax.plot(*zip(*points), styles[label], color=line.get_color())
        gap_ax.axhline(0.0, color="black", linewidth=0.8)
        gap_ax.set_ylabel(f"minus {args.minus}", fontsize="small")
        gap_ax.grid(alpha=0.3)
        gap_ax.set_xlabel(args.x)
    else:
        ax.set_xlabel(args.x)
    ax.set_ylabel("validation loss")
    fig.suptitle(args.title)  # over the whole figure: a long title over the narrow axes would be clipped
    # The legend sits right of the axes, best final loss first, so it reads as a ranking and hides no curve.
    ranked = [line for _, line, _ in sorted(finals, key=lambda f: f[0])]
    ax.legend(ranked, [line.get_label() for line in ranked], loc="upper left", bbox_to_anchor=(1.01, 1),
              fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out_file(args.out, ".png"), dpi=130)
    write_csv(out_file(args.out, ".csv"), rows, ["group", "x", "mean", "std", "n"] + ["minus"] * (args.minus is not None))
    for label in sorted({r["group"] for r in rows}):
        last = [r for r in rows if r["group"] == label][-1]
        print(f"{label}: final val loss {last['mean']:.4f} ± {last['std']:.4f} (n={last['n']})")
    print(f"wrote {out_file(args.out, '.png')} and {out_file(args.out, '.csv')}")
    return rows


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
