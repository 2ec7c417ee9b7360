"""What each way of starting AdamS from a tuned AdamW's lr costs AdamS, in every lr scan at the paper's β.

    python -m study.start_lr      # -> analysis/start_lr.png and the tables in study/README.md

Someone who has tuned AdamW and switches to AdamS has to pick AdamS's lr before, or instead of, a
scan. README.md offers four starts: AdamW's best lr unchanged (the paper's advice), half of it, a
quarter of it, and AdamW's best over R̄ (AdamS's step length over AdamW's, measured along an AdamW
run; study/noise_scale.py). It also advises a scan ×2 either side of the start, so two
three-point scans are read too: ⅛-½ of AdamW's lr (around a quarter) and ¼-1× (around half), each
at its best point. For every setting lr_ratio.py reads (the same tables, its SCANS and
RBAR) at the paper's β = (0.9, 0.95), this reads AdamS's mean final loss at each start, minus its
mean at its own best grid lr: what the start costs against a full scan, in nats. AdamW's best is its
best grid lr (what a user who tuned it on a grid holds); a start between two of AdamS's grid lrs
reads the line between them in log lr, and a start outside AdamS's grid is left blank (—).

Prints one row per setting, fewest tokens per parameter first, then each start's worst cost and how
many settings it left within 0.01 nats of AdamS's best, by band of tokens per parameter, and what
AdamS at each start ended against AdamW at AdamW's best grid lr (the AdamW being replaced), by band;
draws the costs against tokens per parameter in OUT.png.
"""

from __future__ import annotations

import math
from pathlib import Path

import cli
from scripts import out_file, save_figure
from study import lr_ratio

ROOT = Path(__file__).resolve().parents[1]

# (name, AdamS's lr from AdamW's best grid lr and R̄)
STARTS = (
    ("AdamW's lr", lambda lr, rbar: lr),
    ("½ of it", lambda lr, rbar: lr / 2),
    ("¼ of it", lambda lr, rbar: lr / 4),
    ("AdamW's / R̄", lambda lr, rbar: lr / rbar),
)
# (name, the fractions of AdamW's best grid lr run): README.md's advice as run, a start and its ×2 either side
# (a quarter on a short run, half on a long one); the scan's cost is its best point's, blank unless AdamS's
# grid reaches all three
SCANS3 = (
    ("best of ⅛, ¼, ½", (1 / 8, 1 / 4, 1 / 2)),
    ("best of ¼, ½, 1×", (1 / 4, 1 / 2, 1)),
)
# bands of tokens per parameter (from, to): the scans sit near 0.1-18, 25, 100, 200, 400 and beyond
BANDS = ((0, 50), (50, 150), (150, 300), (300, math.inf))
WITHIN = 0.01  # nats: a start this close to AdamS's best counts as as good as a scan


def cost(adams: list[tuple[float, float]], lr: float) -> float:
    """AdamS's loss at `lr` minus its best grid mean, from a grid of (lr, mean loss) linear in log lr between
    its points; NaN outside the grid. Diverged (non-finite) points are left out."""
    c = sorted((math.log(x), y) for x, y in adams if math.isfinite(y))
    x, eps = math.log(lr), 1e-9  # a start on a grid point reads that point despite rounding
    if not c or not c[0][0] - eps <= x <= c[-1][0] + eps:
        return math.nan
    x = min(max(x, c[0][0]), c[-1][0])
    return (lr_ratio.read(c, x) if len(c) > 1 else c[0][1]) - min(y for _, y in c)


def best_grid_lr(curve: list[tuple[float, float]]) -> float:
    """The lr of a grid's lowest finite mean loss, from its (lr, mean loss) points."""
    return min((p for p in curve if math.isfinite(p[1])), key=lambda p: p[1])[0]


def start_costs(adamw: list[tuple[float, float]], adams: list[tuple[float, float]], rbar: float) -> dict[str, float]:
    """Each start's cost to AdamS (nats over its best grid mean), then each three-point scan's (its best
    point's); NaN where AdamS's grid does not reach a start or a scan's every point or, for the R̄ start,
    where R̄ was not measured."""
    best = best_grid_lr(adamw)
    out = {name: cost(adams, f(best, rbar)) if math.isfinite(f(best, rbar)) else math.nan for name, f in STARTS}
    for name, fractions in SCANS3:
        got = [cost(adams, best * f) for f in fractions]
        out[name] = min(got) if all(math.isfinite(v) for v in got) else math.nan
    return out


def band_name(lo: float, hi: float) -> str:
    return f"below {hi:g}" if lo == 0 else f"{lo:g} and more" if hi == math.inf else f"{lo:g}-{hi:g}"


def main(argv=None, root: Path = ROOT, scans=lr_ratio.SCANS, rbar=lr_ratio.RBAR) -> list[dict]:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=cli.place, default=Path("out/start_lr"), help="the figure, as OUT.png")
    args = parser.parse_args(argv)
    rows = [s for s in lr_ratio.settings(root, scans, rbar) if s["betas"] == lr_ratio.REFERENCE_BETAS]
    for s in rows:
        s["costs"] = start_costs(*s["curves"], s["rbar"])
    rows.sort(key=lr_ratio.tokens_per_param)
    names = [name for name, _ in STARTS + SCANS3]
    cell = lambda v: f"{v:.3f}" if math.isfinite(v) else "—"  # noqa: E731
    print("AdamS's loss at each start minus AdamS's at its best grid lr (nats; — where AdamS's grid does not reach)\n")
    print(f"| tokens per parameter | setting | AdamS's best grid lr ÷ AdamW's | {' | '.join(names)} | seeds (AdamW, AdamS) |")
    print("| ---: | --- | ---: |" + " ---: |" * len(names) + " ---: |")
    for s in rows:
        print(f"| {lr_ratio.tokens_per_param(s):,.1f} | {lr_ratio.label(s)} | {s['ratio_grid']:.3g} | "
              f"{' | '.join(cell(s['costs'][n]) for n in names)} | {s['seeds'][0]}, {s['seeds'][1]} |")
    bands = [(band_name(lo, hi), [s for s in rows if lo <= lr_ratio.tokens_per_param(s) < hi]) for lo, hi in BANDS]
    bands = [(name, here) for name, here in bands if here]
    print(f"\nEach start's worst cost, and in how many settings it came within {WITHIN:g} of AdamS's best, by tokens per parameter:\n")
    print(f"| tokens per parameter | settings | {' | '.join(names)} |")
    print("| --- | ---: |" + " --- |" * len(names))
    for band, here in bands:
        parts = []
        for n in names:
            got = [s["costs"][n] for s in here if math.isfinite(s["costs"][n])]
            parts.append(f"{max(got):.3f} ({sum(v <= WITHIN for v in got)} of {len(got)})" if got else "—")
        print(f"| {band} | {len(here)} | {' | '.join(parts)} |")
    print(resampled(rows, bands, names))
    # the same starts against the AdamW the user tuned: the cost above plus AdamS's best minus AdamW's best
    print("\nAdamS at each start minus AdamW at its best grid lr, lowest to highest (below 0: AdamS ahead of the tuned AdamW):\n")
    print(f"| tokens per parameter | settings | {' | '.join(names)} |")
    print("| --- | ---: |" + " --- |" * len(names))
    for band, here in bands:
        parts = []
        for n in names:
            got = sorted(s["costs"][n] + s["gap"] for s in here if math.isfinite(s["costs"][n]))
            parts.append("—" if not got else f"{got[0]:+.3f}" if len(got) == 1 else f"{got[0]:+.3f} to {got[-1]:+.3f}")
        print(f"| {band} | {len(here)} | {' | '.join(parts)} |")
    plot(rows, out_file(args.out, ".png"))
    return rows


def resampled(rows: list[dict], bands, names, draws: int = 2000, seed: int = 0) -> str:
    """How far seed noise moves the counts of starts within WITHIN of AdamS's best: every grid mean of both
    optimizers redrawn from a normal with its seeds' standard error (none for a one-seed point), the
    starts read again, and each count's 5th-95th percentile over ``draws`` draws."""
    import numpy as np

    rng = np.random.default_rng(seed)
    counts = {(band, n): [] for band, _ in bands for n in names}
    for _ in range(draws):
        costs = {}
        for s in rows:
            curves = []
            for curve, spread in zip(s["curves"], s["spreads"]):
                curves.append([(lr, mean + (rng.normal(0, spread[lr][0] / spread[lr][1] ** 0.5) if spread[lr][1] > 1 else 0))
                               for lr, mean in curve])
            costs[id(s)] = start_costs(*curves, s["rbar"])
        for band, here in bands:
            for n in names:
                got = [costs[id(s)][n] for s in here if math.isfinite(costs[id(s)][n])]
                counts[(band, n)].append(sum(v <= WITHIN for v in got))
    lines = [f"The counts within {WITHIN:g} above, with each grid mean redrawn from its seeds' standard error "
             f"({draws:,} draws; 5th-95th percentile):"]
    for band, _ in bands:
        parts = [f"{n} {int(np.percentile(counts[(band, n)], 5))}-{int(np.percentile(counts[(band, n)], 95))}" for n in names]
        lines.append(f"- {band}: " + "; ".join(parts))
    return "\n" + "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    markers = ("o", "s", "^", "x")
    for i, ((name, _), marker) in enumerate(zip(STARTS, markers)):
        shift = 1.07 ** (i - 1.5)  # side by side, so that starts costing the same stay visible
        points = [(lr_ratio.tokens_per_param(s) * shift, s["costs"][name]) for s in rows if math.isfinite(s["costs"][name])]
        ax.plot(*zip(*points), marker, ls="", color=f"C{i}", mfc="none" if marker != "x" else None, ms=7, label=name)
    ax.axhline(WITHIN, color="black", lw=1, ls="--")
    ax.text(0.012, WITHIN * 1.15, f"{WITHIN:g} nats", transform=ax.get_yaxis_transform(), fontsize=8)
    ax.set(xscale="log", xlabel="tokens per parameter (tokens per step × steps ÷ parameters)",
           ylabel="AdamS's loss there − at its best grid lr (nats)",
           title="what each start from AdamW's best lr costs AdamS, every scan at β = (0.9, 0.95)")
    ax.set_yscale("symlog", linthresh=WITHIN)  # linear below 0.01 nats, where the zeros sit
    ax.set_ylim(-0.002, 1.5)
    ax.grid(alpha=0.3)
    ax.legend(title="AdamS started at", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=130)
    print(f"\nwrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
