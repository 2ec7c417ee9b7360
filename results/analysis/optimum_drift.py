"""How far each optimizer's best lr moves as one model trains longer, in every model scanned at two or more run lengths.

    python results/analysis/optimum_drift.py   # -> analysis/optimum_drift.png and the table in results/README.md

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

Prints one row per model, then in how many models AdamS's spread was the smaller; draws each
optimizer's optima, over their geometric mean per model, against tokens per parameter in OUT.png.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results" / "analysis"))

import lr_ratio  # noqa: E402

from scripts import out_file  # noqa: E402

OPTIMIZERS = ("AdamW", "AdamS")


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/analysis/optimum_drift", help="the figure, as OUT.png")
    args = parser.parse_args(argv)
    rows = [s for s in lr_ratio.settings(root, scans, rbar) if s["betas"] == lr_ratio.REFERENCE_BETAS]
    out = []
    for group in models(rows):
        tpp = [lr_ratio.tokens_per_param(s) for s in group]
        optima = {o: [s["optima"][i] for s in group] for i, o in enumerate(OPTIMIZERS)}
        out.append(dict(group=group, tpp=tpp, optima=optima,
                        spread={o: max(v) / min(v) for o, v in optima.items()},
                        carried={o: v[-1] / v[0] for o, v in optima.items()},
                        drift={o: drift(tpp, v) for o, v in optima.items()}))
    if not out:
        raise SystemExit("no model was scanned at two or more run lengths; nothing drifts")
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
    plot(out, out_file(root / args.out, ".png"))
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
            ax.plot(m["tpp"], [x / mid for x in v], "o-", color=f"C{i % 10}", ms=5, label=model_name(s))
        ax.axhline(1, color="black", lw=1)
        ax.set(xscale="log", yscale="log", xlabel="tokens per parameter",
               title=f"{o}'s best lr over its mean across run lengths, per model")
        ax.set_yticks([0.25, 0.5, 1, 2, 4], ["¼", "½", "1", "2", "4"])
        ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("best lr ÷ the model's geometric mean")
    fig.legend(*axes[1].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)
    print(f"\nwrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
