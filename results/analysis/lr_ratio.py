"""Does AdamW's learning rate carry over to AdamS? Every lr scan in results/, in one figure.

    python results/analysis/lr_ratio.py          # --out results/analysis/lr_ratio

Reads the tables that scripts/lr_transfer.py wrote for each scan (SCANS below: batch size, run
length, width, architecture (Llama), vocabulary, AdamS's β2, GPT-2 Small on one H100) and, for every setting where both
optimizers' lr grids were scanned, prints and plots

- AdamS's best peak lr over AdamW's best (parabola fits where both optima are bracketed, else the
  grid's best points): 1 is the paper's "same hyperparameters";
- the README's lr rule beside it, 1/R̄: AdamW's best lr / R̄ is where the rule puts AdamS's, with R̄
  the step-length ratio that scripts/noise_scale.py measured along the AdamW run at that setting's
  best grid lr (RBAR below names the run; no R̄ where none was measured);
- AdamS's final loss at its best lr minus AdamW's at its best (± both standard deviations over
  seeds, added in quadrature): what AdamS costs once its lr is tuned.

A setting that was scanned by more than one table (the 600-step 0.82M grid is both a run length and
a width) is shown once. AdamS rows at another β2 than AdamW's reuse the same table's AdamW grid at
the paper's β = (0.9, 0.95).
"""

from __future__ import annotations

import argparse
import ast
import csv
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts import out_file  # noqa: E402
from scripts.noise_scale import typical_ratio  # noqa: E402

REFERENCE_BETAS = (0.9, 0.95)
# (lr_transfer's table, what the scan varied, what its text is): in the figure's order, top to bottom
SCANS = (
    ("results/lr_transfer.csv", "batch", "bytes"),
    ("results/lr_transfer_steps.csv", "run length", "bytes"),
    ("results/lr_transfer_size.csv", "width", "bytes"),
    ("results/lr_transfer_llama.csv", "architecture", "bytes, Llama"),
    ("results/beta2_lr.csv", "AdamS's β2", "bytes"),
    ("results/beta2_lr_3m.csv", "AdamS's β2", "bytes"),
    ("results/lr_transfer_bpe.csv", "vocabulary", "GPT-2 tokens, embedding lr ×1"),
    ("results/lr_transfer_bpe_long.csv", "vocabulary", "GPT-2 tokens, embedding lr ×20"),
    ("results/gpu/lr_small.csv", "GPT-2 Small, one H100", "Python source in GPT-2 tokens"),
)

# (params, tokens/step, steps, AdamS's betas): noise_scale's CSV and the AdamW run in it at that setting's
# best grid lr, whose body R̄ the rule divides by (the commands are beside each figure in results/README.md)
RBAR = (
    ((820352, 2048, 300, REFERENCE_BETAS), "results/analysis/noise_scale.csv", "adamw_2k/learning_rate=4e-3_seed=1"),
    ((820352, 8192, 300, REFERENCE_BETAS), "results/analysis/noise_scale.csv", "adamw_8k/learning_rate=4e-3_seed=1"),
    ((820352, 32768, 300, REFERENCE_BETAS), "results/analysis/noise_scale.csv", "adamw_32k/learning_rate=4e-3_seed=1"),
    ((820352, 2048, 600, REFERENCE_BETAS), "results/analysis/noise_scale_lr.csv", "adamw_0.8m/learning_rate=6e-3_seed=1"),
    ((820352, 2048, 4800, REFERENCE_BETAS), "results/analysis/noise_scale_long.csv", "adamw/learning_rate=3e-3_seed=1"),
    ((3213568, 2048, 600, REFERENCE_BETAS), "results/analysis/noise_scale_lr.csv", "adamw_3m/learning_rate=3e-3_seed=1"),
    ((1082496, 2048, 600, REFERENCE_BETAS), "results/analysis/noise_scale_llama.csv", "llama_probe/learning_rate=3e-3_seed=1"),
    ((1082496, 2048, 600, (0.9, 0.99)), "results/analysis/noise_scale_llama_beta2_0.99.csv",
     "llama_probe/learning_rate=3e-3_seed=1"),
    ((7226496, 2048, 600, REFERENCE_BETAS), "results/analysis/noise_scale_bpe.csv", "adamw/learning_rate=1.5e-3_seed=1"),
    ((7226496, 2048, 2400, REFERENCE_BETAS), "results/analysis/noise_scale_bpe_long.csv",
     "adamw_lr/learning_rate=2.1e-3_embedding_lr_scale=20_seed=1"),
    *(((820352, 2048, 300, (0.9, b)), f"results/analysis/noise_scale_beta2/beta2={b}/noise_scale.csv",
       "probe/learning_rate=4e-3_seed=1") for b in (0.5, 0.8, 0.9, 0.98, 0.99, 0.999)),
    *(((3213568, 2048, 600, (0.9, b)), f"results/analysis/noise_scale_beta2_3m/beta2={b}/noise_scale.csv",
       "probe3m/learning_rate=3e-3_seed=1") for b in (0.9, 0.99, 0.999)),
)


def number(text: str | None) -> float | None:
    return float(text) if text not in (None, "", "None") else None


def betas_of(row: dict) -> tuple:
    return tuple(ast.literal_eval(row["betas"])) if row.get("betas") else REFERENCE_BETAS


def optimum(row: dict, opt: str) -> float:
    """An optimizer's best lr in one lr_transfer row: the parabola's vertex where it was bracketed."""
    return number(row[f"{opt}_fitted_lr"]) or float(row[f"{opt}_best_lr"])


def measured_rbar(root: Path, rbar=RBAR) -> dict[tuple, float]:
    """(params, tokens/step, steps, AdamS's betas) -> the body's R̄ along the named AdamW run."""
    out = {}
    for key, table, run in rbar:
        path = root / table
        if not path.is_file():
            raise SystemExit(f"{table} does not exist; run the noise_scale command beside it in results/README.md")
        with open(path) as f:
            rows = [dict(r, measured_ratio=float(r["measured_ratio"] or "nan")) for r in csv.DictReader(f) if r["run"] == run]
        if not rows:
            raise SystemExit(f"{table} has no run '{run}'; RBAR in {Path(__file__).name} names a run it does not hold")
        out[key] = typical_ratio(rows)[run][0]
    return out


def settings(root: Path, scans=SCANS, rbar=RBAR) -> list[dict]:
    rbars = measured_rbar(root, rbar)
    out, seen = [], set()
    for table, varied, text in scans:
        path = root / table
        if not path.is_file():
            raise SystemExit(f"{table} does not exist; run the lr_transfer command beside it in results/README.md")
        with open(path) as f:
            rows = list(csv.DictReader(f))
        references = [r for r in rows if number(r.get("adamw_best_lr")) and betas_of(r) == REFERENCE_BETAS]
        for r in rows:
            if not number(r.get("adams_best_lr")):
                continue
            mine = [a for a in references if (a["params"], a["batch_tokens"], a["steps"]) ==
                    (r["params"], r["batch_tokens"], r["steps"])]
            if not mine:
                continue
            adamw, betas = mine[0], betas_of(r)
            key = (r["params"], r["batch_tokens"], r["steps"], betas, text)
            if key in seen:
                continue
            seen.add(key)
            both_fitted = all(number(x[f"{o}_fitted_lr"]) for x, o in ((r, "adams"), (adamw, "adamw")))
            out.append(dict(
                varied=varied, text=text, params=int(r["params"]), batch_tokens=int(r["batch_tokens"]),
                steps=int(r["steps"]), betas=betas, ratio=optimum(r, "adams") / optimum(adamw, "adamw"), fitted=both_fitted,
                ratio_grid=float(r["adams_best_lr"]) / float(adamw["adamw_best_lr"]),
                gap=float(r["adams_best_loss"]) - float(adamw["adamw_best_loss"]),
                gap_std=math.hypot(float(r["adams_best_std"]), float(adamw["adamw_best_std"])),
                rbar=rbars.get((int(r["params"]), int(r["batch_tokens"]), int(r["steps"]), betas), math.nan),
                seeds=(int(adamw["adamw_best_n"]), int(r["adams_best_n"]))))
    if not out:
        raise SystemExit("no table holds both an AdamW and an AdamS lr grid for one setting; nothing to compare")
    return out


def label(s: dict) -> str:
    size = f"{s['params'] / 1e6:.3g}M"
    beta2 = "" if s["betas"] == REFERENCE_BETAS else f", AdamS β {s['betas'][0]:g}, {s['betas'][1]:g}"
    return f"{size}, {s['text']}, {s['steps']:,} steps × {s['batch_tokens']:,} tok{beta2}"


def main(argv=None, root: Path = ROOT, scans=SCANS, rbar=RBAR) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/analysis/lr_ratio", help="the figure, as OUT.png")
    args = parser.parse_args(argv)
    rows = settings(root, scans, rbar)
    print("| scan | setting | AdamS best lr ÷ AdamW best lr | (grid) | R̄ | rule ÷ AdamS best | "
          "AdamS − AdamW at each's best lr | seeds (AdamW, AdamS) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in rows:
        fit = "" if s["fitted"] else " (grid)"
        rule = f"{s['rbar']:.2f} | {1 / (s['rbar'] * s['ratio']):.2f}" if math.isfinite(s["rbar"]) else "— | —"
        print(f"| {s['varied']} | {label(s)} | {s['ratio']:.2f}{fit} | {s['ratio_grid']:.2f} | {rule} | "
              f"{s['gap']:+.3f} ± {s['gap_std']:.3f} | {s['seeds'][0]}, {s['seeds'][1]} |")
    plot(rows, out_file(root / args.out, ".png"))
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scans = list(dict.fromkeys(s["varied"] for s in rows))
    colors = {v: f"C{i}" for i, v in enumerate(scans)}
    y = list(range(len(rows)))[::-1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.42 * len(rows) + 1.8), sharey=True,
                                      gridspec_kw=dict(width_ratios=(1.3, 1)))
    for yi, s in zip(y, rows):
        c = colors[s["varied"]]
        left.plot(s["ratio"], yi, "o" if s["fitted"] else "s", color=c, mfc=c if s["fitted"] else "white", ms=7)
        left.plot(s["ratio_grid"], yi, "|", color=c, ms=10)
        if math.isfinite(s["rbar"]):
            left.plot(1 / s["rbar"], yi, "x", color="black", ms=6)
        right.errorbar(s["gap"], yi, xerr=s["gap_std"] or None, fmt="o", color=c, capsize=3, ms=6)
    left.axvline(1, color="black", lw=1.2, ls="--")
    left.text(0.97, len(rows) - 0.4, "the paper:\nAdamW's lr", ha="right", va="top", fontsize=8)
    left.set(xscale="log", xlim=(0.08, 1.3), xlabel="AdamS's best peak lr ÷ AdamW's best",
             title="best lr, AdamS ÷ AdamW (● fit, ○ no fit, | grid, × 1/R̄)")
    ticks = (0.1, 0.125, 0.25, 0.5, 1)
    left.set_xticks(ticks, [f"{t:g}" for t in ticks])
    left.set_xticks([], minor=True)
    left.set_yticks(y, [label(s) for s in rows], fontsize=8)
    for tick, s in zip(left.get_yticklabels(), rows):
        tick.set_color(colors[s["varied"]])
    right.axvline(0, color="black", lw=1.2, ls="--")
    right.set(xlabel="AdamS − AdamW, final loss, each at its best lr (nats)",
              title="AdamS's loss gap at its best lr (± seed std)")
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3)
    handles = [plt.Line2D([], [], marker="o", ls="", color=colors[v], label=v) for v in scans]
    handles.append(plt.Line2D([], [], marker="x", ls="", color="black", label="the rule: 1/R̄"))
    left.legend(handles=handles, title="what the scan varied", fontsize=8, loc="center", bbox_to_anchor=(0.68, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    print(f"\nwrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
