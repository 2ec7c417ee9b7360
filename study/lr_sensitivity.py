"""What missing the best lr by ×2 costs each optimizer, and how wide each one's optimum is, in every lr scan at the paper's β.

    python -m study.lr_sensitivity   # -> analysis/lr_sensitivity.png and the tables in study/README.md

README.md tells a user to scan AdamS ×2 around a start and, of two lrs that tie, to keep the lower.
Both rest on how AdamS's loss rises away from its best lr, against AdamW's. For every setting
lr_ratio.py reads (its SCANS) at the paper's β = (0.9, 0.95), and for each optimizer's grid of
(lr, mean final loss over seeds), this reads:

- the cost of twice the best grid lr and of half of it: the mean loss there minus at the best grid lr,
  in nats, linear in log lr between grid points (start_lr.cost); blank (—) where the grid does not reach;
- the width of the optimum: the span of lr, in octaves (log2), around the best grid lr over which the
  loss stays within WITHIN nats of its best, its ends read linearly in log lr between grid points. Where
  the loss is still that close at a grid's end, the width is a lower bound (≥).

Prints one row per setting, fewest tokens per parameter first, then by band of tokens per parameter each
cost's median for both optimizers and in how many settings AdamS's exceeded AdamW's, how often
AdamS's optimum was the narrower, and how often it was 1 octave wide or more, so that any ×2 grid across
it has a point within WITHIN of the best (medians and that count take a lower bound at its value); draws the three against tokens per parameter in OUT.png.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import cli
from scripts import out_file, save_figure
from study import lr_ratio, start_lr

ROOT = Path(__file__).resolve().parents[1]

WITHIN = 0.01  # nats: the level that bounds an optimum's width (the level start_lr.py counts as a scan's equal)
MISSES = (("×2 too high", 2.0), ("×2 too low", 0.5))
OPTIMIZERS = ("AdamW", "AdamS")
TIE = 1e-6  # costs (nats) or widths (octaves) closer than this, rounding far below the printed digits, count as equal


def width(curve: list[tuple[float, float]], within: float = WITHIN) -> tuple[float, bool]:
    """The span, in octaves, around a grid's best point over which its loss, linear in log lr between the grid
    points (lr, mean loss), stays within `within` of its best; and whether that is only a lower bound (the loss
    still that close at an end of the grid). Diverged (non-finite) points are left out."""
    c = sorted((math.log2(lr), y) for lr, y in curve if math.isfinite(y))
    best = min(range(len(c)), key=lambda i: c[i][1])
    level = c[best][1] + within
    ends, bound = [], False
    for step in (-1, 1):  # walk down the grid, then up, from the best point to where the loss passes the level
        i = best
        while 0 <= i + step < len(c) and c[i + step][1] <= level:
            i += step
        if not 0 <= i + step < len(c):
            ends.append(c[i][0])
            bound = True
            continue
        (x0, y0), (x1, y1) = c[i], c[i + step]  # y0 <= level < y1
        ends.append(x0 + (x1 - x0) * (level - y0) / (y1 - y0))
    return ends[1] - ends[0], bound


def sensitivity(curve: list[tuple[float, float]]) -> dict:
    """One grid's costs at ×2 either side of its best grid lr (NaN off the grid) and its optimum's width."""
    best = start_lr.best_grid_lr(curve)
    out = {name: start_lr.cost(curve, best * f) for name, f in MISSES}
    out["width"], out["bound"] = width(curve)
    return out


def narrower(a: dict, b: dict) -> bool | None:
    """Whether optimum a is narrower than b (True), wider (False), or undecided (None: a bound that does not settle it)."""
    if not a["bound"] and a["width"] < b["width"] - TIE:
        return True
    if not b["bound"] and b["width"] < a["width"] - TIE:
        return False
    return None


def main(argv=None, root: Path = ROOT, scans=lr_ratio.SCANS, rbar=lr_ratio.RBAR) -> list[dict]:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=cli.place, default=Path("out/lr_sensitivity"), help="the figure, as OUT.png")
    args = parser.parse_args(argv)
    rows = [s for s in lr_ratio.settings(root, scans, rbar) if s["betas"] == lr_ratio.REFERENCE_BETAS]
    for s in rows:
        s["sens"] = dict(zip(OPTIMIZERS, map(sensitivity, s["curves"])))
    rows.sort(key=lr_ratio.tokens_per_param)
    cell = lambda v: f"{v:.3f}" if math.isfinite(v) else "—"  # noqa: E731
    wide = lambda d: f"{'≥ ' if d['bound'] else ''}{d['width']:.1f}"  # noqa: E731
    print(f"Each optimizer's mean loss ×2 either side of its best grid lr, minus at it (nats), and the width of "
          f"its optimum (octaves of lr within {WITHIN:g} nats of its best)\n")
    heads = [f"{o} {m}" for m, _ in MISSES for o in OPTIMIZERS] + [f"{o} width" for o in OPTIMIZERS]
    print(f"| tokens per parameter | setting | {' | '.join(heads)} |")
    print("| ---: | --- |" + " ---: |" * len(heads))
    for s in rows:
        costs = [cell(s["sens"][o][m]) for m, _ in MISSES for o in OPTIMIZERS]
        print(f"| {lr_ratio.tokens_per_param(s):,.1f} | {lr_ratio.label(s)} | {' | '.join(costs)} | "
              f"{' | '.join(wide(s['sens'][o]) for o in OPTIMIZERS)} |")
    bands = [(start_lr.band_name(lo, hi), [s for s in rows if lo <= lr_ratio.tokens_per_param(s) < hi])
             for lo, hi in start_lr.BANDS]
    bands = [(name, here) for name, here in bands if here]
    print("\nBy tokens per parameter: each cost's median (AdamW / AdamS) and in how many settings AdamS's was the "
          "larger; whose optimum was the narrower (not settled by equal widths or by a width that is only a bound):\n")
    print(f"| tokens per parameter | settings | {' | '.join(m for m, _ in MISSES)} | AdamS's ×2 too high costlier than its ×2 too low "
          f"| AdamS's optimum narrower than AdamW's | median width, AdamW / AdamS | AdamS's 1 octave or wider |")
    print("| --- | ---: |" + " --- |" * (len(MISSES) + 4))
    for band, here in bands:
        parts = []
        for m, _ in MISSES:
            pairs = [(s["sens"]["AdamW"][m], s["sens"]["AdamS"][m]) for s in here]
            pairs = [p for p in pairs if all(map(math.isfinite, p))]
            parts.append(f"{statistics.median(w for w, _ in pairs):.3f} / {statistics.median(a for _, a in pairs):.3f} "
                         f"(AdamS larger in {sum(a > w + TIE for w, a in pairs)} of {len(pairs)})" if pairs else "—")
        (high, _), (low, _) = MISSES
        own = [s["sens"]["AdamS"] for s in here if math.isfinite(s["sens"]["AdamS"][high] + s["sens"]["AdamS"][low])]
        parts.append(f"{sum(d[high] > d[low] + TIE for d in own)} of {len(own)}" if own else "—")
        verdicts = [narrower(s["sens"]["AdamS"], s["sens"]["AdamW"]) for s in here]
        parts.append(f"{verdicts.count(True)} of {len(here)} ({verdicts.count(False)} wider, {verdicts.count(None)} not settled)")
        parts.append(" / ".join(f"{statistics.median(s['sens'][o]['width'] for s in here):.1f}" for o in OPTIMIZERS))
        parts.append(f"{sum(s['sens']['AdamS']['width'] >= 1 for s in here)} of {len(here)}")
        print(f"| {band} | {len(here)} | {' | '.join(parts)} |")
    plot(rows, out_file(args.out, ".png"))
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6))
    panels = [(m, "loss there − at the best grid lr (nats)") for m, _ in MISSES]
    panels.append(("width", f"octaves of lr within {WITHIN:g} nats of the best"))
    for ax, (key, ylabel) in zip(axes, panels):
        for i, (o, marker) in enumerate(zip(OPTIMIZERS, "os")):
            shift = 1.08 ** (i - 0.5)  # side by side, so that equal values stay visible
            for bound in (False, True):
                pts = [(lr_ratio.tokens_per_param(s) * shift, s["sens"][o][key]) for s in rows
                       if math.isfinite(s["sens"][o][key]) and (key != "width" or s["sens"][o]["bound"] == bound)]
                if not pts or (bound and key != "width"):
                    continue
                ax.plot(*zip(*pts), "^" if bound else marker, ls="", color=f"C{i}", ms=6,
                        mfc="none" if o == "AdamW" else None,
                        label=f"{o}{', a lower bound' if bound else ''}")
        ax.set(xscale="log", xlabel="tokens per parameter", ylabel=ylabel,
               title=key if key != "width" else "how wide the optimum is")
        if key != "width":
            ax.set_yscale("symlog", linthresh=WITHIN)
            ax.set_ylim(-0.002, 2)
            ax.axhline(WITHIN, color="black", lw=1, ls="--")
        ax.grid(alpha=0.3)
    fig.legend(*axes[2].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=9)
    fig.suptitle("how much a ×2 miss of the best lr costs, and how wide the optimum is, every scan at β = (0.9, 0.95)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save_figure(fig, path, dpi=130)
    print(f"\nwrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
