"""Does AdamW's learning rate carry over to AdamS? Best learning rates by batch size and run length, from finished runs.

    python -m study.lr_transfer study/results/runs/lr_batch/*/*/ --out study/results/lr_transfer/lr_transfer
    python -m study.lr_transfer RUNS... --noise study/results/analysis/noise_scale.csv     # adds B / B_noise
    python -m study.lr_transfer RUNS... --matched-seeds   # each grid on the seeds all its points share

Reads each run's config.json and metrics.jsonl (runs that did not reach max_iters are left out, but
a run train.py stopped as diverged counts, at an infinite loss),
groups them by model size, tokens per step, number of steps, betas, optimizer and peak learning rate, and
for every (size, batch, steps, betas, optimizer) finds the best learning rate: the grid point with the lowest mean final
validation loss, and a refined estimate from a parabola through it and its two neighbours in
log(lr) (only when the best point has a neighbour on each side, i.e. the optimum is bracketed).
Then the ratio best-lr(AdamS) / best-lr(AdamW) per size, batch, run length and betas (an AdamS grid at
betas no AdamW grid shares gets its best lr and no ratio). One optimizer's runs in one setting must share
one embedding_lr_scale: a grid at two embedding multiples is two grids, and is refused rather than pooled.
Seeds are pooled per grid point as given, so a second seed at one point alone moves that point against its
one-seed neighbours by the seed-to-seed spread; --matched-seeds keeps, in each grid, only the seeds that
every one of its points has (and says what it left out).

Writes OUT_points.csv (every grid point: mean ± std over seeds), OUT_paired.csv (AdamS's final loss
minus AdamW's at every lr both ran, seed by seed: a seed's offset that moves both optimizers' runs
alike cancels here, where it widens each point's std), OUT.csv and OUT.md (best lr per optimizer and
the ratio, per size, batch and run length) and OUT.png (loss against lr; the paired difference against
lr; the ratio against whichever of model size, batch and run length vary, and against B/B_noise when
--noise gives noise_scale.py's CSV; hollow where either optimum sits at its grid's edge, so the ratio
there is not measured).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import cli
import folders
from errors import UserError
from scripts import out_file, read_csv, save_figure, write_csv, write_text
from scripts.sweep import final_val_loss
from study import pack

OPTIMIZERS = ("adamw", "adams")
SETTING = ("params", "batch_tokens", "steps", "betas")  # what a best lr belongs to


def setting_of(point: dict) -> tuple:
    return tuple(point[k] for k in SETTING)


def in_order(setting: tuple) -> tuple:
    """A sort key for settings: numbers as numbers, betas (which may be unknown: None) as text."""
    *numbers, betas = setting
    return (*numbers, str(betas))


def read_runs(dirs: list[Path]) -> list[dict]:
    runs = []
    for d in dirs:
        loss, finished = final_val_loss(d)
        if not finished or loss is None:
            continue
        info = folders.read_json(d / "config.json")
        cfg, derived = info["config"], info["derived"]
        runs.append(dict(params=derived["parameters"], batch_tokens=derived["tokens_per_iter"], optimizer=cfg["optimizer"],
                         lr=cfg["learning_rate"], seed=cfg["seed"], max_iters=cfg["max_iters"],
                         betas=(cfg.get("beta1"), cfg.get("beta2")), embedding_lr_scale=cfg.get("embedding_lr_scale", 1.0),
                         dataset=cfg.get("dataset"), val_loss=loss if math.isfinite(loss) else math.inf, run=pack.shown(d)))
    return runs


def grid_of(run: dict) -> tuple:
    return run["params"], run["batch_tokens"], run["max_iters"], run["betas"], run["optimizer"]


def matched_seeds(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """Keep, in each grid, only the runs whose seed every lr point of that grid has; returns (kept, left out)."""
    seeds_at: dict[tuple, dict[float, set]] = {}
    for r in runs:
        seeds_at.setdefault(grid_of(r), {}).setdefault(r["lr"], set()).add(r["seed"])
    shared = {grid: set.intersection(*by_lr.values()) for grid, by_lr in seeds_at.items()}
    for (params, batch, steps, _, opt), seeds in shared.items():
        if not seeds:
            raise UserError(f"the {opt} grid at {params:,} params, {batch:,} tokens/step, {steps:,} steps has no seed "
                             "that every lr point ran; run one seed at every point, or leave out --matched-seeds")
    kept = [r for r in runs if r["seed"] in shared[grid_of(r)]]
    return kept, [r for r in runs if r["seed"] not in shared[grid_of(r)]]


ONE_PER_GRID = (  # one optimizer's runs that differ in one of these are two grids, not one
    ("embedding_lr_scale", "an lr grid needs one embedding multiple, so pass one multiple's runs per call"),
    ("dataset", "their losses do not compare, so pass one dataset's runs per call"),
)


def grid_points(runs: list[dict]) -> list[dict]:
    """Mean ± std of the final validation loss for every (size, batch, steps, betas, optimizer, lr)."""
    for key, fix in ONE_PER_GRID:
        found_in: dict[tuple, set] = {}
        for r in runs:
            found_in.setdefault(grid_of(r), set()).add(r[key])
        for (*setting, opt), found in found_in.items():
            if len(found) > 1:
                numeric = all(isinstance(v, (int, float)) for v in found)
                values = [f"{v:g}" for v in sorted(found)] if numeric else sorted(map(str, found))
                raise UserError(f"the {opt} runs at {setting[0]:,} params, {setting[1]:,} tokens/step, {setting[2]:,} steps "
                                 f"mix {key} {', '.join(values)}; {fix}")
    groups: dict[tuple, list[float]] = {}
    for r in runs:
        key = *grid_of(r), r["lr"]
        groups.setdefault(key, []).append(r["val_loss"])
    points = []
    for (params, batch, steps, betas, opt, lr), losses in sorted(groups.items(),
                                                                       key=lambda kv: (in_order(kv[0][:4]), kv[0][4:])):
        finite = all(math.isfinite(x) for x in losses)
        points.append(dict(params=params, batch_tokens=batch, steps=steps, betas=betas, optimizer=opt, lr=lr,
                           n=len(losses),
                           mean=statistics.mean(losses) if finite else math.inf,
                           std=statistics.stdev(losses) if finite and len(losses) > 1 else 0.0))
    return points


def paired_differences(runs: list[dict]) -> list[dict]:
    """AdamS's final loss minus AdamW's at the same (size, batch, steps, betas, lr), on each seed both ran.

    One row per setting and lr: the seeds, their differences (seed order), and their mean and std.
    """
    loss = {(*grid_of(r), r["lr"], r["seed"]): r["val_loss"] for r in runs}
    by_point: dict[tuple, list[tuple[int, float]]] = {}
    for (params, batch, steps, betas, opt, lr, seed), adams in loss.items():
        adamw = loss.get((params, batch, steps, betas, "adamw", lr, seed))
        if opt == "adams" and adamw is not None:
            # a diverged run is inf: AdamS behind by inf, ahead by inf, or (both inf) no difference to tell
            diff = adams - adamw if math.isfinite(adams) or math.isfinite(adamw) else math.nan
            by_point.setdefault((params, batch, steps, betas, lr), []).append((seed, diff))
    rows = []
    for (params, batch, steps, betas, lr), pairs in sorted(by_point.items(), key=lambda kv: (in_order(kv[0][:4]), kv[0][4])):
        pairs.sort()
        diffs = [d for _, d in pairs]
        finite = all(math.isfinite(d) for d in diffs)
        rows.append(dict(params=params, batch_tokens=batch, steps=steps, betas=betas, lr=lr, n=len(pairs),
                         seeds=" ".join(str(seed) for seed, _ in pairs), differences=" ".join(f"{d:+.4f}" for d in diffs),
                         mean=statistics.mean(diffs) if finite else math.nan,
                         std=statistics.stdev(diffs) if finite and len(diffs) > 1 else 0.0))
    return rows


def parabola_vertex(xs: tuple[float, float, float], ys: tuple[float, float, float]) -> float | None:
    """x of the vertex of the parabola through three points, if it is a minimum between the outer two."""
    (x0, x1, x2), (y0, y1, y2) = xs, ys
    denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
    a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
    b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / denom
    if a <= 0:
        return None
    vertex = -b / (2 * a)
    return vertex if x0 <= vertex <= x2 else None


def best_lr(points: list[dict]) -> dict:
    """The best grid lr of one (size, batch, steps, optimizer), and the parabola-refined one if bracketed."""
    points = sorted(points, key=lambda p: p["lr"])
    i = min(range(len(points)), key=lambda j: points[j]["mean"])
    best = points[i]
    bracketed = 0 < i < len(points) - 1 and all(math.isfinite(points[j]["mean"]) for j in (i - 1, i + 1))
    fitted = None
    if bracketed:
        xs = tuple(math.log(points[j]["lr"]) for j in (i - 1, i, i + 1))
        vertex = parabola_vertex(xs, tuple(points[j]["mean"] for j in (i - 1, i, i + 1)))
        fitted = math.exp(vertex) if vertex is not None else None
    return dict(best_lr=best["lr"], best_loss=best["mean"], best_std=best["std"], best_n=best["n"],
                bracketed=bracketed, fitted_lr=fitted, lrs_tried=len(points))


def table(points: list[dict]) -> list[dict]:
    rows = []
    for setting in sorted({setting_of(p) for p in points}, key=in_order):
        row = dict(zip(SETTING, setting))
        for opt in OPTIMIZERS:
            mine = [p for p in points if setting_of(p) == setting and p["optimizer"] == opt]
            if mine:
                row.update({f"{opt}_{k}": v for k, v in best_lr(mine).items()})
        if "adamw_best_lr" in row and "adams_best_lr" in row:
            row["ratio_grid"] = row["adams_best_lr"] / row["adamw_best_lr"]
            fitted = row["adams_fitted_lr"], row["adamw_fitted_lr"]
            row["ratio_fitted"] = fitted[0] / fitted[1] if None not in fitted else None
            row["ratio_bracketed"] = row["adams_bracketed"] and row["adamw_bracketed"]  # else not measured
        rows.append(row)
    return rows


def noise_by_batch(path: Path) -> dict[int, float]:
    """Median B_simple (whole model, over checkpoints and runs) for each run batch in noise_scale.py's CSV."""
    by_batch: dict[int, list[float]] = {}
    for r in read_csv(path, ("tensor", "run_batch_tokens", "b_simple_tokens"), "a noise_scale table (python -m study.noise_scale's OUT.csv)"):
        if r["tensor"] == "all":
            by_batch.setdefault(int(r["run_batch_tokens"]), []).append(float(r["b_simple_tokens"]))
    return {b: statistics.median(v) for b, v in by_batch.items()}


def betas_text(betas: tuple) -> str:
    return "β " + ", ".join("?" if b is None else f"{b:g}" for b in betas)


def markdown(rows: list[dict]) -> str:
    def lr(row, opt):
        if f"{opt}_best_lr" not in row:
            return "—"
        text = f"{row[f'{opt}_best_lr']:.3g} ({row[f'{opt}_best_loss']:.3f} ± {row[f'{opt}_best_std']:.3f}, " \
               f"n={row[f'{opt}_best_n']})"
        if not row[f"{opt}_bracketed"]:
            return text + " edge of grid"
        fitted = row[f"{opt}_fitted_lr"]
        return text + (f", fit {fitted:.3g}" if fitted else "")

    betas = len({row["betas"] for row in rows}) > 1  # a column only where they differ
    lines = ["| params | tokens/step | steps | " + ("β1, β2 | " if betas else "") + "AdamW best lr (loss ± std, seeds) | "
             "AdamS best lr (loss ± std, seeds) | ratio (grid) | ratio (fit) |",
             "| ---: | ---: | ---: | " + ("---: | " if betas else "") + "--- | --- | ---: | ---: |"]
    for row in rows:
        grid = f"{row['ratio_grid']:.3g}" if row.get("ratio_grid") else "—"
        fit = f"{row['ratio_fitted']:.3g}" if row.get("ratio_fitted") else "—"
        lines.append(f"| {row['params']:,} | {row['batch_tokens']:,} | {row['steps']:,} | "
                     + (f"{betas_text(row['betas'])} | " if betas else "") + f"{lr(row, 'adamw')} | "
                     f"{lr(row, 'adams')} | {grid} | {fit} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=cli.text("a run folder"), help="run folders (each with config.json and metrics.jsonl), packed scans' included")
    parser.add_argument("--noise", type=cli.file, help="noise_scale.py's CSV, to place each batch against B_noise")
    parser.add_argument("--matched-seeds", action="store_true",
                        help="in each grid, use only the seeds that every one of its lr points has")
    parser.add_argument("--out", type=cli.place, default=Path("out/lr_transfer"))
    args = parser.parse_args(argv)

    runs = read_runs([d for d in pack.expand(args.runs) if d.is_dir()])
    if not runs:
        raise UserError("none of the given folders holds a finished run (config.json + metrics.jsonl up to max_iters)")
    if args.matched_seeds:
        runs, left_out = matched_seeds(runs)
        for r in left_out:
            print(f"--matched-seeds: left out {r['run']} (seed {r['seed']} is not at every lr of its grid)")
    points = grid_points(runs)
    paired = paired_differences(runs)
    rows = table(points)
    noise = noise_by_batch(args.noise) if args.noise else {}
    for row in rows:
        if row["batch_tokens"] in noise:
            row["b_noise_tokens"] = noise[row["batch_tokens"]]
            row["b_over_b_noise"] = row["batch_tokens"] / noise[row["batch_tokens"]]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_table(args.out.with_name(args.out.name + "_points.csv"), points)
    if paired:
        write_table(args.out.with_name(args.out.name + "_paired.csv"), paired)
    write_table(out_file(args.out, ".csv"), rows)
    text = markdown(rows)
    write_text(out_file(args.out, ".md"), text)
    print(text)
    plot(points, paired, rows, out_file(args.out, ".png"))
    print(f"wrote {args.out}.csv, .md, .png and {args.out.name}_points.csv" + (", _paired.csv" if paired else ""))
    return points, rows


def write_table(path: Path, rows: list[dict]) -> None:
    write_csv(path, rows, list(dict.fromkeys(k for r in rows for k in r)))


def plot(points: list[dict], paired: list[dict], rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    settings = sorted({setting_of(p) for p in points}, key=in_order)
    varies = [k for k in SETTING if len({s[SETTING.index(k)] for s in settings}) > 1]
    units = dict(params=lambda v: f"{v / 1e6:.2f}M", batch_tokens=lambda v: f"{v:,} tok", steps=lambda v: f"{v:,} steps",
                 betas=betas_text)

    def name(setting, skip=()):
        return ", ".join(units[k](v) for k, v in zip(SETTING, setting) if k in varies and k not in skip)

    colors = {s: plt.get_cmap("viridis")(i / max(1, len(settings) - 1) * 0.85) for i, s in enumerate(settings)}
    # the ratio against each of size, batch and run length that varies, plus B/B_noise when known
    axes_keys = [k for k in varies if k != "betas"] or ["batch_tokens"]
    axes_keys += ["b_over_b_noise"] if any("b_over_b_noise" in r for r in rows) else []
    labels = dict(params="parameters", batch_tokens="batch (tokens per step)", steps="steps (run length)",
                  b_over_b_noise="batch / B_noise (B_simple)")
    panels = 1 + bool(paired) + len(axes_keys)
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.8))
    ax = axes[0]
    for setting in settings:
        for opt, style in (("adamw", "o-"), ("adams", "s--")):
            mine = sorted((p for p in points if setting_of(p) == setting and p["optimizer"] == opt
                           and math.isfinite(p["mean"])), key=lambda p: p["lr"])
            if mine:
                ax.errorbar([p["lr"] for p in mine], [p["mean"] for p in mine], [p["std"] for p in mine], fmt=style,
                            color=colors[setting], ms=4, lw=1.2, capsize=2, label=", ".join(filter(None, (opt, name(setting)))))
    ax.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss",
           title="AdamW (solid) and AdamS (dashed)")
    ax.xaxis.set_minor_formatter(NullFormatter())  # a grid within one decade labels its minor ticks, overlapping
    ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))  # below: it would hide curves
    if paired:  # the same-lr question directly, free of the seed offsets both optimizers share
        ax = axes[1]
        for setting in settings:
            mine = [p for p in paired if setting_of(p) == setting and math.isfinite(p["mean"])]
            if mine:
                ax.plot([p["lr"] for p in mine], [p["mean"] for p in mine], "o-", color=colors[setting], ms=4, lw=1.2,
                        label=name(setting) or "mean over seeds")
                for p in mine:
                    seeds = [float(d) for d in p["differences"].split()]
                    if len(seeds) > 1:
                        ax.plot([p["lr"]] * len(seeds), seeds, "_", color=colors[setting], ms=9)
        ax.axhline(0, color="gray", lw=0.8)
        ax.set(xscale="log", xlabel="peak learning rate", ylabel="AdamS − AdamW, final validation loss",
               title="AdamS − AdamW at the same lr, seed by seed\n(dashes: each seed; below 0: AdamS ahead)")
        ax.set_xlim(axes[0].get_xlim())  # lr lines up with the loss panel beside it
        ax.xaxis.set_minor_formatter(NullFormatter())
        if len(settings) > 1:
            ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    for ax, key in zip(axes[1 + bool(paired):], axes_keys):
        along = "batch_tokens" if key == "b_over_b_noise" else key
        lines: dict[tuple, list[dict]] = {}  # one line per setting of the other keys
        for r in rows:
            if r.get("ratio_grid") and key in r:
                lines.setdefault(tuple(r[k] if k != along else None for k in SETTING), []).append(r)
        for other, mine in lines.items():
            mine.sort(key=lambda r: r[key])
            label = name(other, skip=(along,)) or "ratio"
            line, = ax.plot([r[key] for r in mine], [r["ratio_grid"] for r in mine], "-", label=f"{label}, grid")
            for r in mine:  # hollow where an optimum sits at its grid's edge: the ratio there is not measured
                ax.plot(r[key], r["ratio_grid"], "o", color=line.get_color(),
                        mfc=line.get_color() if r["ratio_bracketed"] else "none")
            fitted = [r for r in mine if r.get("ratio_fitted")]
            if fitted:
                ax.plot([r[key] for r in fitted], [r["ratio_fitted"] for r in fitted], "x:", label=f"{label}, fit")
        ax.axhline(1, color="gray", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel=labels[key], ylabel="best lr(AdamS) / best lr(AdamW)",
               title="does AdamW's lr carry over? (1 = yes)\nhollow: an optimum at its grid's edge")
        ax.set_yticks([0.1, 0.2, 0.3, 0.5, 1.0], ["0.1", "0.2", "0.3", "0.5", "1"])
        ax.set_yticks([], minor=True)
        ticks = sorted({r[key] for r in rows if key in r})
        names = [units[key](t).split()[0] if key in units else f"{t:.2g}" for t in ticks]
        for i in range(1, len(ticks)):  # a tick close to the one before it goes a line lower, or the two overlap
            if ticks[i] / ticks[i - 1] < 1.5 and not names[i - 1].startswith("\n"):
                names[i] = "\n" + names[i]
        ax.set_xticks(ticks, names)
        ax.set_xticks([], minor=True)
        if ax.get_legend_handles_labels()[0]:  # no ratio where only one optimizer ran; below, as on the left
            below = -0.32 if any(n.startswith("\n") for n in names) else -0.2  # under two-line ticks too
            ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, below))
    fig.tight_layout()
    save_figure(fig, path, dpi=130)


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
