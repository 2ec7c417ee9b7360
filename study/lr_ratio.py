"""Does AdamW's learning rate carry over to AdamS? Every lr scan in results/, in one figure.

    python -m study.lr_ratio          # --out study/results/analysis/lr_ratio
    python -m study.lr_ratio --tables study/results/lr_transfer/lr_transfer_tiny.csv --out study/results/analysis/lr_ratio_tiny

Reads the tables that study/lr_transfer.py wrote for each scan (SCANS below: batch size, run
length (also on models of 10K-115K parameters, 25-3,200 tokens per parameter), width (to 427K),
depth (4, 6, 8 and 16 layers at 17K-82K), architecture (Llama), vocabulary, AdamS's β2, GPT-2 Small on one H100 or
H200 at 32,768 and 491,520 tokens per step) and,
for every setting where both optimizers' lr grids were scanned, prints and plots

- AdamS's best peak lr over AdamW's best (parabola fits where both optima are bracketed, else the
  grid's best points): 1 is the paper's "same hyperparameters"; beside it the same ratio from a
  least-squares quadratic over up to five grid points around each best (wide_fit), a check on how
  much the three-point parabola's choice of points moves it;
- the README's lr rule beside it, 1/R̄: AdamW's best lr / R̄ is where the rule puts AdamS's, with R̄
  the step-length ratio that study/noise_scale.py measured along the AdamW run at that setting's
  best grid lr (RBAR below names the run; no R̄ where none was measured);
- the rule again from the low edge of AdamW's optimum, for optima that are broad: the lowest lr at
  which AdamW's mean loss (linear in log lr between grid points) comes within --within nats (0.01)
  of its lowest grid mean, divided by R̄, over AdamS's best (a reading tried and rejected: it missed
  the first setting it was tested on before AdamS was run by 3×; study/report/llama.md, "Llama at 8,192
  tokens per step");
- AdamS's final loss at its best lr minus AdamW's at its best (± both standard deviations over
  seeds, added in quadrature): what AdamS costs once its lr is tuned;
- how far AdamW's lr carries over: the highest lr at which AdamS ended at or below AdamW at the
  same lr (each optimizer's mean loss read linearly in log lr between its grid points, inside the
  lr range both grids span), over AdamW's best. Below it the paper's "same hyperparameters" cost
  AdamS nothing; above it they cost loss. Beside it, the loss both reach there minus AdamW's best:
  how far from tuned AdamW the lrs are at which the two optimizers are interchangeable. Where the
  two curves do not cross inside the shared range, only a bound is known: "< x" (AdamS behind at
  every shared lr) or "> x" (ahead at the highest). The crossing reads the grid means of
  lr_transfer's OUT_points.csv, seeds as they come;
- what the paper's "same hyperparameters" cost: AdamS's mean loss at AdamW's best grid lr (linear in
  log lr between AdamS's grid points; none where AdamS's grid does not reach it) minus AdamW's there.

A second figure, OUT_tokens.png, puts the settings at the paper's β against tokens per parameter
(tokens per step × steps ÷ parameters): AdamS's best lr over AdamW's, what AdamW's best lr costs
AdamS, AdamS's gap at its own best, and how far AdamW's lr carries over (the crossing over AdamW's
best; 1 is the paper's "same lr" at AdamW's optimum, a triangle a bound where the curves do not
cross); a line joins one model's runs of different lengths, named by its size at the longest.

A setting that was scanned by more than one table (the 600-step 0.82M grid is both a run length and
a width) is shown once. AdamS rows at another β2 than AdamW's reuse the same table's AdamW grid at
the paper's β = (0.9, 0.95).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import cli
from errors import UserError
from scripts import out_file, read_csv, save_figure
from study.noise_scale import typical_ratio

ROOT = Path(__file__).resolve().parents[1]
POINTS = "an lr_transfer points table (OUT_points.csv)"
NOISE_TABLE = "a noise_scale table (python -m study.noise_scale's OUT.csv)"

REFERENCE_BETAS = (0.9, 0.95)
# (lr_transfer's table, what the scan varied, what its text is): in the figure's order, top to bottom
SCANS = (
    ("study/results/lr_transfer/lr_transfer.csv", "batch", "bytes"),
    ("study/results/lr_transfer/lr_transfer_steps.csv", "run length", "bytes"),
    ("study/results/lr_transfer/lr_transfer_law_0.8m.csv", "run length", "bytes"),
    ("study/results/lr_transfer/lr_transfer_tiny.csv", "run length", "bytes"),
    ("study/results/lr_transfer/lr_transfer_w64_800.csv", "run length", "bytes"),
    ("study/results/lr_transfer/lr_transfer_w32_800.csv", "run length", "bytes"),
    ("study/results/lr_transfer/lr_transfer_size.csv", "width", "bytes"),
    ("study/results/lr_transfer/lr_transfer_w128.csv", "width", "bytes"),
    ("study/results/lr_transfer/lr_transfer_w128_200.csv", "width", "bytes"),
    ("study/results/lr_transfer/lr_transfer_w128_400.csv", "width", "bytes"),
    ("study/results/lr_transfer/lr_transfer_w16.csv", "width", "bytes"),
    ("study/results/lr_transfer/lr_transfer_depth_4l_100.csv", "depth", "bytes, 4 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_4l_200.csv", "depth", "bytes, 4 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_4l.csv", "depth", "bytes, 4 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_4l_800.csv", "depth", "bytes, 4 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_4l_1600.csv", "depth", "bytes, 4 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_4l_w32_100.csv", "depth", "bytes, 4 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_4l_w32_200.csv", "depth", "bytes, 4 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_4l_w32_400.csv", "depth", "bytes, 4 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_6l_w32_100.csv", "depth", "bytes, 6 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_6l_100.csv", "depth", "bytes, 6 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_6l_200.csv", "depth", "bytes, 6 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_6l_400.csv", "depth", "bytes, 6 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_6l_800.csv", "depth", "bytes, 6 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_8l_200.csv", "depth", "bytes, 8 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_8l.csv", "depth", "bytes, 8 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_8l_800.csv", "depth", "bytes, 8 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_16l_100_more.csv", "depth", "bytes, 16 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_16l_200.csv", "depth", "bytes, 16 layers"),
    ("study/results/lr_transfer/lr_transfer_depth_16l_400.csv", "depth", "bytes, 16 layers"),
    ("study/results/lr_transfer/lr_transfer_llama.csv", "architecture", "bytes, Llama"),
    ("study/results/lr_transfer/lr_transfer_llama_8k.csv", "architecture", "bytes, Llama"),
    ("study/results/lr_transfer/lr_transfer_llama_32k.csv", "architecture", "bytes, Llama"),
    ("study/results/beta2_lr.csv", "AdamS's β2", "bytes"),
    ("study/results/beta2_lr_3m.csv", "AdamS's β2", "bytes"),
    ("study/results/lr_transfer/lr_transfer_bpe.csv", "vocabulary", "GPT-2 tokens, embedding lr ×1"),
    ("study/results/lr_transfer/lr_transfer_bpe_long.csv", "vocabulary", "GPT-2 tokens, embedding lr ×20"),
    ("study/results/gpu/lr_small.csv", "GPT-2 Small, one GPU", "Python source in GPT-2 tokens"),
    ("study/results/gpu/lr_200_transfer.csv", "GPT-2 Small, one GPU", "Python source in GPT-2 tokens"),
)

# (params, tokens/step, steps, AdamS's betas): noise_scale's CSV and the AdamW run in it at that setting's
# best grid lr, whose body R̄ the rule divides by (the commands are beside each figure in study/README.md)
RBAR = (
    ((820352, 2048, 300, REFERENCE_BETAS), "study/results/analysis/noise_scale.csv", "adamw_2k/learning_rate=4e-3_seed=1"),
    ((820352, 8192, 300, REFERENCE_BETAS), "study/results/analysis/noise_scale.csv", "adamw_8k/learning_rate=4e-3_seed=1"),
    ((820352, 32768, 300, REFERENCE_BETAS), "study/results/analysis/noise_scale.csv", "adamw_32k/learning_rate=4e-3_seed=1"),
    ((820352, 2048, 600, REFERENCE_BETAS), "study/results/analysis/noise_scale_lr.csv", "adamw_0.8m/learning_rate=6e-3_seed=1"),
    ((820352, 2048, 4800, REFERENCE_BETAS), "study/results/analysis/noise_scale_long.csv", "adamw/learning_rate=3e-3_seed=1"),
    ((3213568, 2048, 600, REFERENCE_BETAS), "study/results/analysis/noise_scale_lr.csv", "adamw_3m/learning_rate=3e-3_seed=1"),
    ((1082496, 2048, 600, REFERENCE_BETAS), "study/results/analysis/noise_scale_llama.csv", "llama_probe/learning_rate=3e-3_seed=1"),
    ((1082496, 2048, 600, (0.9, 0.99)), "study/results/analysis/noise_scale_llama_beta2_0.99.csv",
     "llama_probe/learning_rate=3e-3_seed=1"),
    ((1082496, 8192, 600, REFERENCE_BETAS), "study/results/analysis/noise_scale_llama_8k.csv", "adamw/learning_rate=3e-3_seed=1"),
    ((1082496, 32768, 600, REFERENCE_BETAS), "study/results/analysis/noise_scale_llama_32k.csv", "adamw/learning_rate=3e-3_seed=1"),
    ((7226496, 2048, 600, REFERENCE_BETAS), "study/results/analysis/noise_scale_bpe.csv", "adamw/learning_rate=1.5e-3_seed=1"),
    ((7226496, 2048, 2400, REFERENCE_BETAS), "study/results/analysis/noise_scale_bpe_long.csv",
     "adamw_lr/learning_rate=2.1e-3_embedding_lr_scale=20_seed=1"),
    ((123689472, 32768, 600, REFERENCE_BETAS), "study/results/gpu/rbar/noise_scale.csv", "rbar/learning_rate=6e-4_seed=1"),
    *(((32928, 2048, steps, REFERENCE_BETAS), "study/results/analysis/noise_scale_tiny.csv", f"tiny_{steps}/learning_rate=8e-3_seed=1")
      for steps in (6400, 25600)),
    ((115008, 2048, 22500, REFERENCE_BETAS), "study/results/analysis/noise_scale_tiny_w64.csv", "w64_22500/learning_rate=4e-3_seed=1"),
    ((426624, 2048, 20800, REFERENCE_BETAS), "study/results/analysis/noise_scale_tiny_w128.csv", "w128_20800/learning_rate=4e-3_seed=1"),
    *(((820352, 2048, 300, (0.9, b)), f"study/results/analysis/noise_scale_beta2/beta2={b}/noise_scale.csv",
       "probe/learning_rate=4e-3_seed=1") for b in (0.5, 0.8, 0.9, 0.98, 0.99, 0.999)),
    *(((3213568, 2048, 600, (0.9, b)), f"study/results/analysis/noise_scale_beta2_3m/beta2={b}/noise_scale.csv",
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
            raise UserError(f"{table} does not exist; run the noise_scale command beside it in study/README.md")
        rows = [dict(r, measured_ratio=float(r["measured_ratio"] or "nan"))
                for r in read_csv(path, ("run", "measured_ratio"), NOISE_TABLE) if r["run"] == run]
        if not rows:
            raise UserError(f"{table} has no run '{run}'; RBAR in {Path(__file__).name} names a run it does not hold")
        out[key] = typical_ratio(rows)[run][0]
    return out


def read(curve: list[tuple[float, float]], x: float) -> float:
    """A grid's loss at log lr x, linear between the grid points (x, loss) on either side; x inside the grid."""
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    raise ValueError(f"log lr {x} lies outside the grid")


def low_edge(curve: list[tuple[float, float]], within: float) -> float:
    """The lowest lr at which a grid of (lr, mean loss), linear in log lr between its points, comes within
    `within` of its lowest point: the low edge of a broad optimum (the best grid point itself if no lower
    neighbour is close). Diverged (non-finite) points are left out."""
    c = sorted((math.log(lr), y) for lr, y in curve if math.isfinite(y))
    level = min(y for _, y in c) + within
    if c[0][1] <= level:
        return math.exp(c[0][0])
    for (x0, y0), (x1, y1) in zip(c, c[1:]):  # y0 > level here, so y0 > y1 where y1 <= level
        if y1 <= level:
            return math.exp(x0 + (x1 - x0) * (y0 - level) / (y0 - y1))


def carry_over(adamw: list[tuple[float, float]], adams: list[tuple[float, float]]) -> tuple[str, float, float] | None:
    """The highest lr at which AdamS's loss is at or below AdamW's, from two lr grids of (lr, mean loss).

    With d(lr) = AdamS(lr) - AdamW(lr), each curve linear in log lr between its own grid points and
    read only inside the lr range both grids span: ("=", lr, loss) at the highest lr where d crosses
    from <= 0 to > 0, where both reach that loss; ("<", lowest shared lr, AdamW's loss there) where
    d > 0 throughout; (">", highest shared lr, AdamW's loss there) where d <= 0 there. None where the
    grids share fewer than two lrs' worth of range. Diverged (non-finite) points are left out.
    """
    curves = [sorted((math.log(lr), y) for lr, y in grid if math.isfinite(y)) for grid in (adamw, adams)]
    if any(len(c) < 2 for c in curves):
        return None
    lo, hi = max(c[0][0] for c in curves), min(c[-1][0] for c in curves)
    if lo >= hi:
        return None
    xs = sorted({x for c in curves for x, _ in c if lo <= x <= hi} | {lo, hi})
    d = [(x, read(curves[1], x) - read(curves[0], x)) for x in xs]
    ups = [x0 + (x1 - x0) * d0 / (d0 - d1) for (x0, d0), (x1, d1) in zip(d, d[1:]) if d0 <= 0 < d1]
    kind, x = (">", hi) if d[-1][1] <= 0 else ("=", ups[-1]) if ups else ("<", lo)
    return kind, math.exp(x), read(curves[0], x)


def at_adamw_best(adamw: list[tuple[float, float]], adams: list[tuple[float, float]]) -> float:
    """AdamS's loss at AdamW's best grid lr minus AdamW's loss there, from two grids of (lr, mean loss):
    AdamS's curve linear in log lr between its points, NaN where its grid does not reach that lr.
    Diverged (non-finite) points are left out of both."""
    lr, best = min(((lr, y) for lr, y in adamw if math.isfinite(y)), key=lambda p: p[1])
    mine = sorted((math.log(x), y) for x, y in adams if math.isfinite(y))
    if not mine or not mine[0][0] <= math.log(lr) <= mine[-1][0]:
        return math.nan
    return (read(mine, math.log(lr)) if len(mine) > 1 else mine[0][1]) - best


def wide_fit(curve: list[tuple[float, float]], half: int = 2) -> float | None:
    """The best lr by a least-squares quadratic in log lr over the best grid point and up to `half`
    neighbours on each side, a check on the three-point parabola that lr_transfer fits through the best
    point and its two neighbours alone. None where the best point is at the grid's edge, where fewer
    than four points are in reach (the fit would be that parabola again), or where the quadratic has
    no minimum inside the points it was fitted to. Diverged (non-finite) points are left out."""
    import numpy as np

    c = sorted((math.log(lr), y) for lr, y in curve if math.isfinite(y))
    i = min(range(len(c)), key=lambda j: c[j][1])
    window = c[max(0, i - half):i + half + 1]
    if i in (0, len(c) - 1) or len(window) < 4:
        return None
    a, b, _ = np.polyfit([x for x, _ in window], [y for _, y in window], 2)
    vertex = -b / (2 * a) if a > 0 else math.inf
    return math.exp(vertex) if window[0][0] <= vertex <= window[-1][0] else None


def grid_curves(path: Path) -> dict[tuple, list[tuple[float, float]]]:
    """lr_transfer's OUT_points.csv beside OUT.csv: (params, tokens/step, steps, optimizer, betas) -> [(lr, mean)]."""
    points = path.with_name(path.stem + "_points.csv")
    if not points.is_file():
        raise UserError(f"{points.relative_to(ROOT) if points.is_relative_to(ROOT) else points} does not exist; "
                         "lr_transfer writes it beside its table: rerun the lr_transfer command in study/README.md")
    curves: dict[tuple, list] = {}
    for p in read_csv(points, ("params", "batch_tokens", "steps", "optimizer", "lr", "mean"), POINTS):
        key = p["params"], p["batch_tokens"], p["steps"], p["optimizer"], betas_of(p)
        curves.setdefault(key, []).append((float(p["lr"]), float(p["mean"])))
    return curves


def grid_spreads(path: Path) -> dict[tuple, dict[float, tuple[float, int]]]:
    """The seeds behind grid_curves' means: the same keys -> {lr: (standard deviation over seeds, seeds)}."""
    spreads: dict[tuple, dict] = {}
    for p in read_csv(path.with_name(path.stem + "_points.csv"), ("std", "n"), POINTS):
        key = p["params"], p["batch_tokens"], p["steps"], p["optimizer"], betas_of(p)
        spreads.setdefault(key, {})[float(p["lr"])] = (float(p["std"] or 0), int(p["n"]))
    return spreads


def settings(root: Path, scans=SCANS, rbar=RBAR, within: float = 0.01) -> list[dict]:
    rbars = measured_rbar(root, rbar)
    out, seen = [], set()
    for table, varied, text in scans:
        path = root / table
        if not path.is_file():
            raise UserError(f"{table} does not exist; run the lr_transfer command beside it in study/README.md")
        rows = read_csv(path, ("params", "batch_tokens", "steps"), "an lr_transfer table (its OUT.csv)")
        curves, spreads = grid_curves(path), grid_spreads(path)
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
            setting = r["params"], r["batch_tokens"], r["steps"]
            adamw_curve, adams_curve = curves[(*setting, "adamw", REFERENCE_BETAS)], curves[(*setting, "adams", betas)]
            wide = wide_fit(adams_curve), wide_fit(adamw_curve)
            crossing = carry_over(adamw_curve, adams_curve)
            out.append(dict(
                varied=varied, text=text, params=int(r["params"]), batch_tokens=int(r["batch_tokens"]),
                steps=int(r["steps"]), betas=betas, ratio=optimum(r, "adams") / optimum(adamw, "adamw"), fitted=both_fitted,
                ratio_grid=float(r["adams_best_lr"]) / float(adamw["adamw_best_lr"]),
                ratio_wide=wide[0] / wide[1] if None not in wide else math.nan,
                gap=float(r["adams_best_loss"]) - float(adamw["adamw_best_loss"]),
                gap_std=math.hypot(float(r["adams_best_std"]), float(adamw["adamw_best_std"])),
                carry=crossing and (crossing[0], crossing[1] / optimum(adamw, "adamw"),
                                    crossing[2] - float(adamw["adamw_best_loss"])),
                edge=low_edge(adamw_curve, within) / optimum(adamw, "adamw"),
                same_lr=at_adamw_best(adamw_curve, adams_curve),
                curves=(adamw_curve, adams_curve),  # each grid's (lr, mean loss), for start_lr.py
                spreads=(spreads[(*setting, "adamw", REFERENCE_BETAS)], spreads[(*setting, "adams", betas)]),
                optima=(optimum(adamw, "adamw"), optimum(r, "adams")),  # each one's best lr, for optimum_drift.py
                rbar=rbars.get((int(r["params"]), int(r["batch_tokens"]), int(r["steps"]), betas), math.nan),
                seeds=(int(adamw["adamw_best_n"]), int(r["adams_best_n"]))))
    if not out:
        raise UserError("no table holds both an AdamW and an AdamS lr grid for one setting; nothing to compare")
    return out


def label(s: dict) -> str:
    size = f"{s['params'] / 1e6:.3g}M"
    beta2 = "" if s["betas"] == REFERENCE_BETAS else f", AdamS β {s['betas'][0]:g}, {s['betas'][1]:g}"
    text = f"{s['text']}, " if s["text"] else ""
    return f"{size}, {text}{s['steps']:,} steps × {s['batch_tokens']:,} tok{beta2}"


def main(argv=None, root: Path = ROOT, scans=SCANS, rbar=RBAR) -> list[dict]:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=cli.place, default=Path("out/lr_ratio"), help="the figure, as OUT.png")
    parser.add_argument("--within", type=cli.positive, default=0.01,
                        help="nats: AdamW's loss this close to its best counts as level with it (default 0.01)")
    parser.add_argument("--tables", nargs="+", metavar="CSV",
                        help="other lr_transfer tables (each with its _points.csv) instead of the scans listed in SCANS")
    args = parser.parse_args(argv)
    if args.tables:
        scans = tuple((str(Path(table).resolve()), Path(table).stem, "") for table in args.tables)
    rows = settings(root, scans, rbar, args.within)
    print(f"| scan | setting | AdamS best lr ÷ AdamW best lr | (grid) | (fit over ≤ 5 points) | R̄ | rule ÷ AdamS best | rule from AdamW's "
          f"lowest lr within {args.within:g} of its best, ÷ AdamS best | AdamS − AdamW at each's best lr | AdamW's lr carries over up to (÷ AdamW best) | (÷ AdamS best) | both's loss there "
          "− AdamW's best | AdamS at AdamW's best grid lr − AdamW there | seeds (AdamW, AdamS) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in rows:
        fit = "" if s["fitted"] else " (grid)"
        rule = (f"{s['rbar']:.2f} | {1 / (s['rbar'] * s['ratio']):.2f} | {s['edge'] / (s['rbar'] * s['ratio']):.2f}"
                if math.isfinite(s["rbar"]) else "— | — | —")
        kind, at, cost = s["carry"] or ("", math.nan, math.nan)
        mine = at / s["ratio"]  # the same lr over AdamS's own best
        carry = ("— | — | —" if not kind else f"{at:.2f} | {mine:.2f} | {cost:+.3f}" if kind == "="
                 else f"{kind} {at:.2f} | {kind} {mine:.2f} | —")
        wide = f"{s['ratio_wide']:.2f}" if math.isfinite(s["ratio_wide"]) else "—"
        same = f"{s['same_lr']:+.3f}" if math.isfinite(s["same_lr"]) else "—"
        print(f"| {s['varied']} | {label(s)} | {s['ratio']:.2f}{fit} | {s['ratio_grid']:.2f} | {wide} | {rule} | "
              f"{s['gap']:+.3f} ± {s['gap_std']:.3f} | {carry} | {same} | {s['seeds'][0]}, {s['seeds'][1]} |")
    plot(rows, out_file(args.out, ".png"), args.within)
    plot_tokens(rows, out_file(args.out.with_name(args.out.name + "_tokens"), ".png"))
    return rows


def plot(rows: list[dict], path: Path, within: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scans = list(dict.fromkeys(s["varied"] for s in rows))
    colors = {v: f"C{i}" for i, v in enumerate(scans)}
    y = list(range(len(rows)))[::-1]
    height = max(0.42 * len(rows) + 1.8, 4.0)  # inches: the titles and labels need about 2 even for one row
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, height), sharey=True,
                                      gridspec_kw=dict(width_ratios=(1.3, 1)))
    for yi, s in zip(y, rows):
        c = colors[s["varied"]]
        left.plot(s["ratio"], yi, "o" if s["fitted"] else "s", color=c, mfc=c if s["fitted"] else "white", ms=7)
        left.plot(s["ratio_grid"], yi, "|", color=c, ms=10)
        left.plot(s["ratio_wide"], yi, "*", color=c, ms=6)  # NaN where there is no wide fit: not drawn
        if math.isfinite(s["rbar"]):
            left.plot(1 / s["rbar"], yi, "x", color="black", ms=6)
            left.plot(s["edge"] / s["rbar"], yi, "+", color="black", ms=8)
        if s["carry"]:  # a diamond where the curves cross; a triangle pointing past a bound
            kind, at, _ = s["carry"]
            left.plot(at, yi, {"=": "D", "<": "<", ">": ">"}[kind], color="dimgray", mfc="none", ms=7)
        right.errorbar(s["gap"], yi, xerr=s["gap_std"] or None, fmt="o", color=c, capsize=3, ms=6)
    left.axvline(1, color="black", lw=1.2, ls="--")
    left.set_ylim(-1, len(rows))  # keeps the paper's note (next line) inside: autoscaling ignores text
    left.text(0.97, len(rows) - 0.4, "the paper:\nAdamW's lr", ha="right", va="top", fontsize=8)
    drawn = [v for s in rows for v in (s["ratio"], s["ratio_grid"], s["ratio_wide"], s["carry"] and s["carry"][1])
             if v and math.isfinite(v)]
    right_edge = max([1.3, *(1.15 * v for v in drawn)])  # a crossing past AdamW's best (1.5x at 427K) stays in view
    left.set(xscale="log", xlim=(0.08, right_edge), xlabel="peak lr ÷ AdamW's best",
             title="lr ÷ AdamW's best: AdamS's best (● fit, ○ no fit, | grid, * fit over ≤ 5 points),\n"
                   "× the rule 1/R̄, + the rule from the low edge of AdamW's optimum,\n"
                   "◇ AdamW's lr carries over up to here (◁ ▷ a bound)")
    ticks = [t for t in (0.1, 0.125, 0.25, 0.5, 1, 2, 4) if t <= right_edge]
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
    handles.append(plt.Line2D([], [], marker="+", ls="", color="black", ms=8,
                              label=f"the rule from the lowest lr\nwithin {within:g} of AdamW's best"))
    handles.append(plt.Line2D([], [], marker="D", ls="", color="dimgray", mfc="none",
                              label="AdamS at AdamW's lr is\nbehind above this"))
    fig.tight_layout()
    left.legend(handles=handles, title="what the scan varied", fontsize=8, loc="upper center", ncol=4,
                bbox_to_anchor=(0.5, -0.6 / (height - 1.0)))  # ~0.6 inch below the axes
    save_figure(fig, path, dpi=130, bbox_inches="tight")
    print(f"\nwrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def tokens_per_param(s: dict) -> float:
    return s["batch_tokens"] * s["steps"] / s["params"]


def lengths(rows: list[dict]) -> list[list[dict]]:
    """One model trained for several lengths: the settings that differ only in steps, two or more, shortest first,
    whichever scans they came from."""
    groups: dict[tuple, list] = {}
    for s in rows:
        groups.setdefault((s["text"], s["params"], s["batch_tokens"], s["betas"]), []).append(s)
    return [sorted(g, key=tokens_per_param) for g in groups.values() if len({s["steps"] for s in g}) > 1]


def size(params: int) -> str:
    """A model's size as the READMEs write it: 33K, 0.82M, 124M."""
    return f"{params / 1e3:.0f}K" if params < 5e5 else f"{params / 1e6:.2g}M" if params < 1e7 else f"{params / 1e6:.0f}M"


def crossing(s: dict) -> float:
    """Where AdamS at AdamW's lr stops being level or ahead, over AdamW's best; NaN where only a bound is known."""
    kind, at, _ = s["carry"] or ("", math.nan, math.nan)
    return at if kind == "=" else math.nan


def plot_tokens(rows: list[dict], path: Path) -> None:
    """The settings at the paper's β against tokens per parameter: does a longer run bring AdamS to AdamW's lr?"""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [s for s in rows if s["betas"] == REFERENCE_BETAS]
    if not rows:
        return
    scans = list(dict.fromkeys(s["varied"] for s in rows))
    colors = {v: f"C{i}" for i, v in enumerate(scans)}
    panels = {"ratio": lambda s: s["ratio"], "same_lr": lambda s: s["same_lr"], "gap": lambda s: s["gap"], "carry": crossing}
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.6), sharex=True)
    for group in lengths(rows):  # one model at several lengths: a thin line through its points, named at its end
        scans_here = {s["varied"] for s in group}  # in the scan's colour, grey where it joins several scans
        c, x = colors[group[0]["varied"]] if len(scans_here) == 1 else "0.45", [tokens_per_param(s) for s in group]
        for ax, value in zip(axes, panels.values()):
            points = [(xi, value(s)) for xi, s in zip(x, group) if math.isfinite(value(s))]
            if points:
                ax.plot(*zip(*points), "-", color=c, lw=0.9, alpha=0.6)
                ax.annotate(size(group[0]["params"]), points[-1], xytext=(5, 0), textcoords="offset points",
                            fontsize=7, color=c, va="center")
    for s in rows:
        x, c = tokens_per_param(s), colors[s["varied"]]
        axes[0].plot(x, s["ratio"], "o" if s["fitted"] else "s", color=c, mfc=c if s["fitted"] else "white", ms=7)
        axes[1].plot(x, s["same_lr"], "o", color=c, ms=7)  # NaN where AdamS's grid does not reach: not drawn
        axes[2].errorbar(x, s["gap"], yerr=s["gap_std"] or None, fmt="o", color=c, capsize=3, ms=6)
        kind, at, _ = s["carry"] or ("", math.nan, math.nan)
        if kind:  # a triangle points the way the crossing lies past a bound
            axes[3].plot(x, at, {"=": "o", "<": "v", ">": "^"}[kind], color=c, mfc=c if kind == "=" else "white", ms=7)
    axes[0].axhline(1, color="black", lw=1.2, ls="--")
    axes[0].text(0.03, 0.97, "the paper: 1", transform=axes[0].transAxes, va="top", fontsize=8)
    axes[0].set(yscale="log", ylim=(0.09, 1.3), ylabel="AdamS's best lr ÷ AdamW's",
                title="AdamS's best lr ÷ AdamW's best\n(● both fitted, □ a grid point)")
    ticks = (0.125, 0.25, 0.5, 1)
    axes[0].set_yticks(ticks, [f"{t:g}" for t in ticks])
    axes[0].set_yticks([], minor=True)
    axes[1].set(ylabel="nats", title="AdamS at AdamW's best lr − AdamW there:\nwhat the paper's same lr costs")
    axes[2].set(ylabel="nats", title="AdamS at its best lr − AdamW at its best\n(± seed std)")
    axes[3].axhline(1, color="black", lw=1.2, ls="--")
    axes[3].text(0.03, 0.97, "1: AdamW's own best lr", transform=axes[3].transAxes, va="top", fontsize=8)
    axes[3].set(yscale="log", ylim=(0.09, 3.2), ylabel="÷ AdamW's best lr",  # the top holds the 4-layer width-32 model's 2.71 at 400
                title="AdamW's lr carries over up to\n(AdamS level or ahead below; ▽ △ bounds)")
    axes[3].set_yticks((*ticks, 2), [f"{t:g}" for t in (*ticks, 2)])
    axes[3].set_yticks([], minor=True)
    for ax in axes:
        ax.set(xscale="log", xlabel="tokens per parameter (tokens per step × steps ÷ parameters)")
        ax.grid(alpha=0.3)
    for ax in axes[1:3]:
        ax.axhline(0, color="black", lw=1.2, ls="--")
    handles = [plt.Line2D([], [], marker="o", ls="", color=colors[v], label=v) for v in scans]
    fig.legend(handles=handles, title="what the scan varied", fontsize=8, loc="lower center", ncol=len(scans),
               bbox_to_anchor=(0.5, -0.08))
    fig.suptitle("every lr scan at the paper's β (0.9, 0.95), against how many tokens each parameter saw")
    fig.tight_layout()
    save_figure(fig, path, dpi=130, bbox_inches="tight")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
