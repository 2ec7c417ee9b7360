"""AdamS's best learning rate at each β2, beside the lr rule's AdamW-best / R̄(β2).

    python -m study.lr_transfer study/results/runs/beta2_lr/*/*/ study/results/runs/lr_batch/adam{w,s}_2k/*/ --out study/results/beta2_lr
    python -m study.beta2_lr      # --lr study/results/beta2_lr --rbar study/results/analysis/noise_scale_beta2

Reads lr_transfer's grid (study/results/beta2_lr{,_points}.csv: AdamS at several β2, AdamW at the paper's
(0.9, 0.95)) and noise_scale's step-length ratios along one AdamW run with AdamS put at each β2
(study/results/analysis/noise_scale_beta2/beta2=B/noise_scale.csv, from ``--adams_beta2 B``). Prints a
markdown table and writes study/results/analysis/beta2_lr.png: loss against lr per β2, and AdamS's best lr
against β2 with what the rule predicts from the measured R̄ and from the closed form 1/√c of the
pure-noise limit, c = 1 − 2β1β2/(1 + β1) (study/noise_scale.py).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import cli
from errors import UserError
from scripts import out_file, read_csv, save_figure
from study.noise_scale import denominator_constants, typical_ratio

ROOT = Path(__file__).resolve().parents[1]


def number(text: str) -> float | None:
    return float(text) if text not in ("", "None") else None


def measured_rbar(folder: Path) -> dict[float, float]:
    """β2 -> R̄ (the body's geometric mean over checkpoints) from each beta2=B/noise_scale.csv."""
    rbar = {}
    for path in sorted(folder.glob("beta2=*/noise_scale.csv")):
        rows = [dict(r, measured_ratio=float(r["measured_ratio"])) for r in read_csv(path)]
        (ratio, _), = typical_ratio(rows).values()  # one probe run per file
        rbar[float(rows[0]["adams_beta2"])] = ratio
    return rbar


def main(argv=None, root: Path = ROOT) -> list[dict]:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lr", default="study/results/beta2_lr", help="lr_transfer's --out (one AdamW grid, AdamS at several betas)")
    parser.add_argument("--rbar", default="study/results/analysis/noise_scale_beta2",
                        help="folder of beta2=B/noise_scale.csv, one per AdamS beta2, along one AdamW probe run")
    parser.add_argument("--out", type=cli.place, default=Path("out/beta2_lr"), help="the figure, as OUT.png")
    args = parser.parse_args(argv)
    lr_out = root / args.lr
    if not out_file(lr_out, ".csv").is_file():
        raise UserError(f"{lr_out}.csv does not exist; run lr_transfer as this file's docstring says")
    rows = read_csv(out_file(lr_out, ".csv"))
    points = read_csv(lr_out.with_name(lr_out.name + "_points.csv"))
    rbar = measured_rbar(root / args.rbar)
    adamw = [r for r in rows if number(r.get("adamw_best_lr", ""))]
    if len(adamw) != 1:
        raise UserError(f"{lr_out}.csv must hold exactly one AdamW grid (the reference), not {len(adamw)}; rerun "
                         "lr_transfer with one")
    adamw_best = number(adamw[0]["adamw_fitted_lr"]) or number(adamw[0]["adamw_best_lr"])
    probe_beta1 = ast.literal_eval(adamw[0]["betas"])[0]  # the AdamW probe's momentum is the reference's
    table = []
    for r in rows:
        beta1, beta2 = ast.literal_eval(r["betas"])
        _, c = denominator_constants(beta1, beta2)
        fitted = number(r["adams_fitted_lr"]) if r["adams_bracketed"] == "True" else None
        measured = rbar.get(beta2, math.nan) if beta1 == probe_beta1 else math.nan
        table.append(dict(beta1=beta1, beta2=beta2, rbar=measured, pure_noise=1 / math.sqrt(c),
                          best_lr=float(r["adams_best_lr"]), fitted_lr=fitted, bracketed=r["adams_bracketed"] == "True",
                          best_loss=float(r["adams_best_loss"]), n=int(r["adams_best_n"])))
    print(f"AdamW's best lr (reference, β = (0.9, 0.95)): {adamw_best:.3g}\n")
    print("| AdamS β1, β2 | R̄ measured | 1/√c (pure noise) | AdamW best / R̄ | AdamS best lr: grid (fit) | "
          "its loss (seeds) | rule ÷ AdamS best |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: |")
    for t in table:
        best = t["fitted_lr"] or t["best_lr"]
        fit = f" (fit {t['fitted_lr']:.2g})" if t["fitted_lr"] else ("" if t["bracketed"] else " (grid edge)")
        rule = (f"{t['rbar']:.2f} | {t['pure_noise']:.2f} | {adamw_best / t['rbar']:.2g}" if math.isfinite(t["rbar"])
                else f"— | {t['pure_noise']:.2f} | —")
        ratio = f"{adamw_best / t['rbar'] / best:.2f}" if math.isfinite(t["rbar"]) else "—"
        print(f"| {t['beta1']:g}, {t['beta2']:g} | {rule} | {t['best_lr']:.2g}{fit} | {t['best_loss']:.3f} ({t['n']}) "
              f"| {ratio} |")
    title = f"{float(rows[0]['params']) / 1e6:.2g}M GPT, {int(rows[0]['steps']):,} steps of {int(rows[0]['batch_tokens']):,} tokens"
    plot(table, points, adamw_best, probe_beta1, title, out_file(args.out, ".png"))
    return table


def plot(table: list[dict], points: list[dict], adamw_best: float, beta1: float, title: str, path: Path) -> None:
    """Left: loss against lr for every AdamS (β1, β2) and AdamW. Right: best lr against β2 at ``beta1``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    cmap = plt.get_cmap("viridis")
    for i, t in enumerate(table):
        mine = sorted((p for p in points if p["optimizer"] == "adams"
                       and ast.literal_eval(p["betas"]) == (t["beta1"], t["beta2"])), key=lambda p: float(p["lr"]))
        left.errorbar([float(p["lr"]) for p in mine], [float(p["mean"]) for p in mine], [float(p["std"]) for p in mine],
                      fmt="s-" if t["beta1"] == beta1 else "^:", ms=4, capsize=2,
                      color=cmap(i / max(1, len(table) - 1) * 0.9), label=f"AdamS, β = ({t['beta1']:g}, {t['beta2']:g})")
    mine = sorted((p for p in points if p["optimizer"] == "adamw"), key=lambda p: float(p["lr"]))
    left.errorbar([float(p["lr"]) for p in mine], [float(p["mean"]) for p in mine], [float(p["std"]) for p in mine],
                  fmt="o--", ms=4, capsize=2, color="black", label="AdamW, β = (0.9, 0.95)")
    left.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss", title=title)
    lrs = sorted({float(p["lr"]) for p in points})
    left.set_xticks(lrs, [f"{lr:.3g}" for lr in lrs], rotation=45)
    left.set_xticks([], minor=True)
    left.legend(fontsize=7)

    table = [t for t in table if t["beta1"] == beta1]
    x = [1 - t["beta2"] for t in table]
    right.plot(x, [t["best_lr"] for t in table], "s", color="C0", label="AdamS's best lr (grid)")
    fitted = [t for t in table if t["fitted_lr"]]
    right.plot([1 - t["beta2"] for t in fitted], [t["fitted_lr"] for t in fitted], "x", color="C0", ms=8,
               label="AdamS's best lr (parabola fit)")
    measured = [t for t in table if math.isfinite(t["rbar"])]
    right.plot([1 - t["beta2"] for t in measured], [adamw_best / t["rbar"] for t in measured], "o-", color="C1",
               label="AdamW's best / R̄ measured (the rule)")
    right.plot(x, [adamw_best / t["pure_noise"] for t in table], ":", color="C2", label="AdamW's best / (1/√c), pure noise")
    right.axhline(adamw_best, color="black", ls="--", lw=1, label="AdamW's best lr (β2 = 0.95)")
    right.set(xscale="log", yscale="log", xlabel="AdamS's β2 (spaced as log(1 − β2))", ylabel="peak learning rate",
              title=f"does a β2 let AdamS take AdamW's lr? (β1 = {beta1:g})")
    right.set_xticks(x, [f"{t['beta2']:g}" for t in table])
    right.set_xticks([], minor=True)
    right.invert_xaxis()
    right.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=130)
    print(f"\nwrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
