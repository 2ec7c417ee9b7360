"""How far the seeds alone move a pooled lr-transfer ratio: lr_transfer's fit, redone over resampled seeds.

    python -m study.seed_bootstrap study/results/runs/tiny/w128_83200/*/*_seed=[1234]/ \\
        --out study/results/analysis/seed_bootstrap_w128_400

results/ quotes AdamS's best lr over AdamW's from lr_transfer's pooled fit: each lr's final loss
averaged over the seeds, then a parabola in log lr through each optimizer's best grid mean and its
two neighbours. With three or four seeds, how far another draw of seeds would move that ratio is
the question here, answered by the bootstrap: draw n seeds with replacement from the n every lr of
both grids ran (all n^n ordered draws when there are at most 100,000 of them, else 20,000 at
random), the same seeds for both optimizers (a seed fixes the data order and the validation
batches, which both share), average each lr over the drawn seeds (a seed drawn twice counts twice)
and fit again. Prints the all-seeds ratio, each seed's own, the 5th, 50th and 95th percentiles over
the draws whose two optima were both bracketed, how many draws left one unbracketed, and how many
put AdamS's optimum at or above AdamW's; writes every draw to OUT.csv and a histogram to OUT.png.

A bootstrap over so few seeds never draws a seed outside the ones run, so its interval is narrower
than what a new seed can do: read it as a lower bound on the seeds' effect.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import cli
from errors import UserError
from scripts import out_file, save_figure, write_csv
from study import lr_transfer, pack

ROOT = Path(__file__).resolve().parents[1]

EXHAUSTIVE_UP_TO = 100_000
RANDOM_DRAWS = 20_000


def draws(seeds: list[int], rng: random.Random) -> list[tuple[int, ...]]:
    """Every ordered draw of len(seeds) seeds with replacement, or a random sample of them if too many."""
    n = len(seeds)
    if n ** n <= EXHAUSTIVE_UP_TO:
        return list(itertools.product(seeds, repeat=n))
    return [tuple(rng.choice(seeds) for _ in range(n)) for _ in range(RANDOM_DRAWS)]


def fit(runs: list[dict], draw: tuple[int, ...]) -> dict:
    """lr_transfer's table row for the runs of the drawn seeds, each counted as often as it was drawn."""
    times = Counter(draw)
    drawn = [r for r in runs for _ in range(times[r["seed"]])]
    (row,) = lr_transfer.table(lr_transfer.grid_points(drawn))
    return row


def shared_seeds(runs: list[dict]) -> list[int]:
    """The seeds every lr of both optimizers ran; one setting only."""
    settings = {lr_transfer.grid_of(r)[:4] for r in runs}
    if len(settings) != 1:
        raise UserError(f"these runs span {len(settings)} settings (size, batch, steps, betas); "
                         "pass one setting's AdamW and AdamS runs")
    kept, _ = lr_transfer.matched_seeds(runs)
    by_opt = {opt: {r["seed"] for r in kept if r["optimizer"] == opt} for opt in lr_transfer.OPTIMIZERS}
    if not all(by_opt.values()) or by_opt["adamw"] != by_opt["adams"]:
        raise UserError(f"AdamW's complete seeds {sorted(by_opt['adamw'])} and AdamS's {sorted(by_opt['adams'])} "
                         "differ; the bootstrap draws seeds for both together, so pass runs of the same seeds")
    if len(by_opt["adamw"]) < 2:
        raise UserError(f"only seed {min(by_opt['adamw'])} ran every lr of both grids; a bootstrap over seeds needs "
                         "two or more, so run another seed at every lr first")
    return sorted(by_opt["adamw"])


def main(argv=None) -> list[dict]:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=cli.text("a run folder"), help="one setting's AdamW and AdamS run folders (packed scans' too)")
    parser.add_argument("--out", type=cli.place, default=Path("out/seed_bootstrap"))
    parser.add_argument("--seed", type=cli.seed, default=0, help="for the random draws, where there are too many to list")
    args = parser.parse_args(argv)

    runs = [r for r in lr_transfer.read_runs(pack.expand(args.runs)) if r["optimizer"] in lr_transfer.OPTIMIZERS]
    if not runs:
        raise UserError("no finished AdamW or AdamS runs among the folders given; check the paths")
    seeds = shared_seeds(runs)
    runs = [r for r in runs if r["seed"] in seeds]
    pooled = fit(runs, tuple(seeds))
    own = {s: fit(runs, (s,)) for s in seeds}

    rows = []
    for draw in draws(seeds, random.Random(args.seed)):
        row = fit(runs, draw)
        rows.append(dict(seeds=" ".join(map(str, draw)), adamw_fitted_lr=row["adamw_fitted_lr"],
                         adams_fitted_lr=row["adams_fitted_lr"], ratio=row["ratio_fitted"],
                         adamw_best_lr=row["adamw_best_lr"], adams_best_lr=row["adams_best_lr"], ratio_grid=row["ratio_grid"]))
    ratios = np.array([r["ratio"] for r in rows if r["ratio"] is not None])

    def text(ratio):
        return f"{ratio:.2f}" if ratio is not None else "unbracketed"

    print(f"{len(runs)} runs, seeds {' '.join(map(str, seeds))}: pooled ratio {text(pooled['ratio_fitted'])} "
          f"(grid {pooled['ratio_grid']:g}); each seed's own: "
          + ", ".join(f"{s} {text(row['ratio_fitted'])}" for s, row in own.items()))
    if len(ratios):
        lo, mid, hi = np.percentile(ratios, [5, 50, 95])
        print(f"{len(rows):,} draws of {len(seeds)} seeds with replacement: ratio {lo:.2f} / {mid:.2f} / {hi:.2f} "
              f"(5th / 50th / 95th percentile over the {len(ratios):,} with both optima bracketed); "
              f"{len(rows) - len(ratios):,} left one unbracketed; {int((ratios >= 1).sum()):,} at or above 1")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out_file(args.out, ".csv"), [{k: "" if v is None else v for k, v in row.items()} for row in rows])

    fig, ax = plt.subplots(figsize=(7, 4))
    if len(ratios):
        bins = np.geomspace(ratios.min() / 1.1, max(ratios.max(), 1.0) * 1.1, 40)
        ax.hist(ratios, bins=bins, color="0.75", label=f"{len(ratios):,} draws of {len(seeds)} seeds")
    for s, row in own.items():
        if row["ratio_fitted"] is not None:
            ax.axvline(row["ratio_fitted"], color="tab:blue", ls=":", lw=1)
            ax.annotate(f"seed {s}", (row["ratio_fitted"], 1), xycoords=("data", "axes fraction"),
                        rotation=90, va="top", ha="right", fontsize=7, color="tab:blue")
    if pooled["ratio_fitted"] is not None:
        ax.axvline(pooled["ratio_fitted"], color="k", lw=1.5, label=f"all seeds: {pooled['ratio_fitted']:.2f}")
    ax.axvline(1.0, color="tab:red", ls="--", lw=1, label="the paper: 1")
    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    ticks = [x for x in (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.5, 2.0, 3.0) if lo <= x <= hi]
    ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
    ax.minorticks_off()
    ax.set(xlabel="AdamS's best lr ÷ AdamW's (fits)", ylabel="draws",
           title=f"{pooled['params']:,} parameters, {pooled['steps']:,} steps × {pooled['batch_tokens']:,} tokens:\n"
                 "the ratio over resampled seeds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out_file(args.out, ".png"), dpi=130)
    print(f"wrote {out_file(args.out, '.csv')} and {out_file(args.out, '.png')}")
    return rows


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
