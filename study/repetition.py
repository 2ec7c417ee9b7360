"""Does repeating the data make AdamW's lr carry over to AdamS? One setting on two corpora, side by side.

    python -m study.repetition    # -> study/results/analysis/repetition.png

Reads two of study/lr_transfer.py's OUT_points.csv tables for the same model, batch and steps:
the full byte corpus (study/results/lr_transfer/lr_transfer_tiny_points.csv) and a quarter of its training files
(study/results/lr_transfer/lr_transfer_q4_points.csv: ``python -m data.pystdlib.prepare --train-every 4``, so the same
steps pass over the training text about 3.5x as often; the validation files are the same). Left:
final validation loss against peak lr, both optimizers, both corpora, at the lrs both corpora ran. Right: AdamS minus AdamW at
each lr both ran, which is what the paper's "same hyperparameters" costs at that lr.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import cli
from errors import UserError
from scripts import out_file, read_csv, save_figure

ROOT = Path(__file__).resolve().parents[1]
CORPORA = (("all training files", ROOT / "study/results/lr_transfer/lr_transfer_tiny_points.csv", "-"),
           ("a quarter of them", ROOT / "study/results/lr_transfer/lr_transfer_q4_points.csv", "--"))
COLORS = {"adamw": "tab:blue", "adams": "tab:orange"}


def grid(path: Path, params: int, steps: int) -> dict[str, dict[float, tuple[float, float]]]:
    """{optimizer: {lr: (mean, std)}} for one setting of an lr_transfer points table."""
    if not path.exists():
        raise UserError(f"{path} is missing; make it with the lr_transfer command in study/report/run_length_and_size.md, 'Repeating the data'")
    out: dict[str, dict[float, tuple[float, float]]] = {}
    for r in read_csv(path, ("params", "steps", "optimizer", "lr", "mean", "std"), "an lr_transfer points table (OUT_points.csv)"):
        if int(r["params"]) == params and int(r["steps"]) == steps:
            out.setdefault(r["optimizer"], {})[float(r["lr"])] = float(r["mean"]), float(r["std"])
    if set(out) != set(COLORS):
        raise UserError(f"{path} has no AdamW and AdamS grids at {params:,} parameters and {steps:,} steps")
    return out


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=cli.count, default=115008)
    parser.add_argument("--steps", type=cli.count, default=5625)
    parser.add_argument("--out", type=cli.place, default=Path("out/repetition.png"))
    args = parser.parse_args(argv)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    grids = [(label, grid(path, args.params, args.steps), style) for label, path, style in CORPORA]
    # the lrs every corpus ran, so neither panel's scale is set by a point the other corpus lacks
    ran = {opt: sorted(set.intersection(*(set(g[opt]) for _, g, _ in grids))) for opt in COLORS}
    for label, g, style in grids:
        for opt, lrs in ran.items():
            left.errorbar(lrs, [g[opt][lr][0] for lr in lrs], [g[opt][lr][1] for lr in lrs], ls=style, marker="o",
                          color=COLORS[opt], capsize=3, label=f"{opt}, {label}")
        shared = sorted(set(ran["adamw"]) & set(ran["adams"]))
        right.plot(shared, [g["adams"][lr][0] - g["adamw"][lr][0] for lr in shared], ls=style, marker="o", color="k",
                   label=label)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate")
        ax.legend(fontsize=8)
    left.set_ylabel("final validation loss (mean ± std over seeds)")
    left.set_title(f"{args.params:,} parameters, {args.steps:,} steps")
    right.axhline(0, color="grey", lw=0.8)
    right.set_ylabel("AdamS − AdamW at the same lr")
    right.set_title("what AdamW's lr costs AdamS")
    fig.tight_layout()
    path = out_file(args.out, ".png")  # (an --out of x.png or x writes x.png; never another format's file)
    save_figure(fig, path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
