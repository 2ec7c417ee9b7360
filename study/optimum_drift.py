"""How far each optimizer's best lr moves as one model trains longer, in every model scanned at two or more run lengths.

    python -m study.optimum_drift   # -> analysis/optimum_drift.png and the tables in study/README.md

A fraction of AdamW's lr is only as steady a start for AdamS as the two optima's ratio, and that ratio
moves with run length (lr_ratio.py). This asks which optimum moves. For every model that lr_ratio.py
reads (its SCANS) at the paper's β = (0.9, 0.95) at two or more run lengths with the same batch, it takes
each optimizer's best lr at each length (lr_transfer's parabola through the best grid point and its two
neighbours, the best grid lr where that was not bracketed) and reports:

- the spread: the largest of a model's optima over its smallest, per optimizer;
- the longest run's optimum over the shortest's: how far a best lr tuned on the shortest run would sit from
  the longest run's;
- the drift: the least-squares slope of log2 optimum on log2 tokens per parameter, the factor by which
  the optimum moves each time the run doubles (1: no drift).

Then what that means in loss, at each model's longest run: AdamS's mean final loss there, minus at its best
grid lr (start_lr.cost: linear in log lr between grid points, blank off the grid), at three starts a user
might take: AdamS's best grid lr on the shortest run (a short scan of AdamS itself); README.md's fraction
(fraction(): a quarter under 300 tokens per parameter, half from 300) of AdamW's best grid lr on the shortest
run (a short scan of AdamW); and that fraction of AdamW's best grid lr on the longest run itself (a tuned
AdamW at the length trained).

Prints one row per model for each table, then in how many models AdamS's spread was the smaller and how
often each start came within start_lr.WITHIN of AdamS's best; draws each optimizer's optima, over their
geometric mean per model, against tokens per parameter in OUT.png.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

import cli
from errors import UserError
from scripts import out_file, save_figure
from study import lr_ratio, start_lr

ROOT = Path(__file__).resolve().parents[1]

OPTIMIZERS = ("AdamW", "AdamS")
STARTS = ("AdamS's best on the shortest run", "¼ or ½ of AdamW's best on the shortest run", "¼ or ½ of AdamW's best on the longest run")


def fraction(tpp: float) -> float:
    """README.md's start as a fraction of a tuned AdamW lr: a quarter up to about 200 tokens per parameter, half from
    about 400 (the split at 300, as start_lr.BANDS has it)."""
    return 0.5 if tpp >= 300 else 0.25


def carried_costs(group: list[dict]) -> dict[str, float]:
    """At a model's longest run, what each of STARTS costs AdamS against its best grid lr (NaN off its grid)."""
    short, long = group[0], group[-1]
    f = fraction(lr_ratio.tokens_per_param(long))
    best = start_lr.best_grid_lr
    lrs = (best(short["curves"][1]), f * best(short["curves"][0]), f * best(long["curves"][0]))
    return {name: start_lr.cost(long["curves"][1], lr) for name, lr in zip(STARTS, lrs)}


def drift(tpp: list[float], optima: list[float]) -> float:
    """The factor by which an optimum moves per doubling of the run: 2 ** (least-squares slope of log2 optimum
    on log2 tokens per parameter)."""
    x, y = [math.log2(t) for t in tpp], [math.log2(o) for o in optima]
    mx, my = statistics.fmean(x), statistics.fmean(y)
    return 2 ** (sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x))


def models(rows: list[dict]) -> list[list[dict]]:
    """The settings grouped by model and batch (parameters, text, tokens per step), shortest run first; only models
    run at two or more lengths."""
    groups = defaultdict(list)
    for s in rows:
        groups[(s["params"], s["text"], s["batch_tokens"])].append(s)
    return [sorted(g, key=lr_ratio.tokens_per_param) for g in groups.values() if len({s["steps"] for s in g}) > 1]


def model_name(s: dict) -> str:
    return f"{lr_ratio.size(s['params'])}, {s['text']}, {s['batch_tokens']:,} tok"


def main(argv=None, root: Path = ROOT, scans=lr_ratio.SCANS, rbar=lr_ratio.RBAR) -> list[dict]:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=cli.place, default=Path("out/optimum_drift"), help="the figure, as OUT.png")
    args = parser.parse_args(argv)
    rows = [s for s in lr_ratio.settings(root, scans, rbar) if s["betas"] == lr_ratio.REFERENCE_BETAS]
    out = []
    for group in models(rows):
        tpp = [lr_ratio.tokens_per_param(s) for s in group]
        optima = {o: [s["optima"][i] for s in group] for i, o in enumerate(OPTIMIZERS)}
        out.append(dict(group=group, tpp=tpp, optima=optima,
                        spread={o: max(v) / min(v) for o, v in optima.items()},
                        carried={o: v[-1] / v[0] for o, v in optima.items()},
                        drift={o: drift(tpp, v) for o, v in optima.items()}, costs=carried_costs(group)))
    if not out:
        raise UserError("no model was scanned at two or more run lengths; nothing drifts")
    print("Each optimizer's best lr at each run length (lr_transfer's fit), its spread (largest ÷ smallest), the longest "
          "run's over the shortest's, and its drift (× per doubling of the run)\n")
    print("| model | tokens per parameter | AdamW's best lr | AdamS's best lr | spread, AdamW / AdamS | longest run's ÷ shortest's, "
          "AdamW / AdamS | drift, AdamW / AdamS | seeds (AdamS) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in out:
        name = model_name(m["group"][0])
        lrs = {o: ", ".join(f"{v:.2g}" for v in m["optima"][o]) for o in OPTIMIZERS}
        print(f"| {name} | {', '.join(f'{t:,.0f}' if t >= 10 else f'{t:.1f}' for t in m['tpp'])} | {lrs['AdamW']} | "
              f"{lrs['AdamS']} | {m['spread']['AdamW']:.2f} / {m['spread']['AdamS']:.2f} | "
              f"{m['carried']['AdamW']:.2f} / {m['carried']['AdamS']:.2f} | "
              f"{m['drift']['AdamW']:.2f} / {m['drift']['AdamS']:.2f} | {', '.join(str(g['seeds'][1]) for g in m['group'])} |")
    smaller = sum(m["spread"]["AdamS"] < m["spread"]["AdamW"] for m in out)
    within2 = {o: sum(0.5 <= m["carried"][o] <= 2 for m in out) for o in OPTIMIZERS}
    print(f"\nAdamS's spread the smaller in {smaller} of {len(out)} models; median spread AdamW "
          f"{statistics.median(m['spread']['AdamW'] for m in out):.2f}, AdamS {statistics.median(m['spread']['AdamS'] for m in out):.2f}; "
          f"largest AdamW {max(m['spread']['AdamW'] for m in out):.2f}, AdamS {max(m['spread']['AdamS'] for m in out):.2f}; "
          f"the shortest run's optimum within ×2 of the longest's in {within2['AdamW']} (AdamW) and {within2['AdamS']} (AdamS) of {len(out)}")
    cell = lambda v: f"{v:.3f}" if math.isfinite(v) else "—"  # noqa: E731
    print("\nAt each model's longest run, AdamS's loss at each start minus at its best grid lr (nats; ¼ or ½ as README.md "
          "advises for that length)\n")
    print(f"| model | shortest → longest run (tokens per parameter) | {' | '.join(STARTS)} |")
    print("| --- | --- | ---: | ---: | ---: |")
    for m in out:
        t = m["tpp"]
        print(f"| {model_name(m['group'][0])} | {t[0]:,.1f} → {t[-1]:,.1f} | {' | '.join(cell(m['costs'][n]) for n in STARTS)} |")
    parts = []
    for n in STARTS:
        got = [m["costs"][n] for m in out if math.isfinite(m["costs"][n])]
        parts.append(f"{n}: {sum(v <= start_lr.WITHIN for v in got)} of {len(got)}, worst {max(got):.3f}")
    print(f"\nwithin {start_lr.WITHIN:g} of AdamS's best at the longest run: " + "; ".join(parts))
    plot(out, out_file(args.out, ".png"))
    return out


def plot(out: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), sharey=True)
    for ax, o in zip(axes, OPTIMIZERS):
        for i, m in enumerate(out):
            s, v = m["group"][0], m["optima"][o]
            mid = math.exp(statistics.fmean(map(math.log, v)))
            # ten colours, then the next marker: an eleventh model must not pass for the first
            ax.plot(m["tpp"], [x / mid for x in v], "-" + "osD^"[i // 10 % 4], color=f"C{i % 10}", ms=5, label=model_name(s))
        ax.axhline(1, color="black", lw=1)
        ax.set(xscale="log", yscale="log", xlabel="tokens per parameter",
               title=f"{o}'s best lr over its mean across run lengths, per model")
        ax.set_yticks([0.25, 0.5, 1, 2, 4], ["¼", "½", "1", "2", "4"])
        ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("best lr ÷ the model's geometric mean")
    fig.legend(*axes[1].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    save_figure(fig, path, dpi=130)
    print(f"\nwrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
