"""Final validation loss against the token embedding's learning rate, for AdamW and AdamS.

    python -m study.embedding_lr study/results/runs/bpe/adam{w,s,w_emb,s_emb}/*/ \\
        --noise study/results/analysis/noise_scale_bpe.csv study/results/analysis/noise_scale_bpe_emb20.csv --out study/results/embedding_lr_bpe

Reads every finished run (config.json and metrics.jsonl) and groups them by optimizer and peak lr;
a group with runs at more than one ``embedding_lr_scale`` becomes one line. The token embedding
(tied to the output head) trains at lr × embedding_lr_scale. From the same gradients AdamS's step
on it is R_emb times AdamW's; noise_scale.py measures R_emb along AdamW runs (per run, the geometric
mean over its checkpoints of the 'embedding' rows, or of the tied 'transformer.wte.weight' rows in
CSVs written before that row existed). R_emb grows with the embedding's own lr a (the embedding's
gradient changes more from step to step when it moves further), so with runs measured at more than
one a it is fitted as a power law, R_emb(a) = k · a^p (least squares in log-log; p = 0 with one a).
AdamS at embedding lr η then moves as AdamW's would at the a where a = η · R_emb(a):

    effective lr = (η · k)^(1 / (1 − p))       (= η · R_emb for p = 0; η for AdamW).

If that is all that separates the two optimizers' embeddings, both lines fall on one curve against
the effective lr (right panel) though they do not against the scale (left). To say by how much
they miss, each other optimizer's run is compared with AdamW's loss at the same effective lr and
seed, read off AdamW's line by interpolating linearly in log lr (never extrapolated). A measured
run's lr is read from its config.json, looked up beside the runs given (noise_scale.py names a run
by its last two folders).

Writes OUT.csv (one row per run: optimizer, lr, scale, seed, R_emb, effective lr, final val loss) and
OUT.png, and prints the measured R_emb, its fit, the table and the matched differences with their mean.
"""

from __future__ import annotations

import math
from pathlib import Path

import cli
import metrics
from errors import UserError
from scripts import out_file, read_csv, save_figure, write_csv
from scripts.sweep import final_val_loss
from study import pack

TIED = "transformer.wte.weight"


def embedding_ratios(noise_csv: Path) -> dict[str, float]:
    """Per measured run: the geometric mean of AdamS's embedding step length relative to AdamW's over its checkpoints."""
    rows = [r for r in read_csv(noise_csv, ("measured_ratio", "tensor"), "a noise_scale table (python -m study.noise_scale's OUT.csv)") if r["measured_ratio"] not in ("", "nan")]
    picked = [r for r in rows if r["tensor"] == "embedding"] or [r for r in rows if r["tensor"] == TIED]
    if not picked:
        raise UserError(f"{noise_csv} has no measured ratio for the token embedding; make it with "
                         "`python -m study.noise_scale` on AdamW runs")
    logs: dict[str, list[float]] = {}
    for r in picked:
        logs.setdefault(r["run"], []).append(math.log(float(r["measured_ratio"])))
    return {run: math.exp(sum(v) / len(v)) for run, v in logs.items()}


def ratio_law(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(k, p) of R_emb(a) = k · a^p through (AdamW embedding lr a, R_emb) points, least squares in log-log.

    With a single lr among the points p = 0 and k is the geometric mean of their R_emb.
    """
    xs, ys = [math.log(a) for a, _ in points], [math.log(r) for _, r in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    p = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    if p >= 1:
        raise UserError(f"R_emb grows as a^{p:.2f} with the embedding's lr; no lr of AdamW's matches AdamS's step")
    return math.exp(my - p * mx), p


def effective_lr(eta: float, k: float, p: float) -> float:
    """The AdamW embedding lr a at which AdamS at embedding lr eta steps as far: a = eta · k · a^p."""
    return (eta * k) ** (1 / (1 - p))


def measured_lrs(ratios: dict[str, float], dirs: list[Path]) -> list[tuple[float, float]]:
    """(embedding lr, R_emb) per measured run, its lr read from the config.json of the run of that name."""
    roots = {str(r): r for r in (d.resolve().parent.parent for d in dirs)}.values()
    points = []
    for run, r in ratios.items():
        found = [root / run / "config.json" for root in roots if (root / run / "config.json").exists()]
        if not found:
            raise UserError(f"cannot find the measured run {run!r} beside the runs given; pass runs from the same "
                             "results folder as the AdamW runs noise_scale.py measured")
        cfg = metrics.run_config(found[0].parent)
        points.append((cfg["learning_rate"] * cfg.get("embedding_lr_scale", 1.0), r))
    return points


def read_runs(dirs: list[Path], k: float, p: float) -> list[dict]:
    runs = []
    for d in dirs:
        loss, finished = final_val_loss(d)
        if not finished or loss is None:
            continue
        cfg = metrics.run_config(d)
        scale = cfg.get("embedding_lr_scale", 1.0)  # runs made before the setting existed ran at 1
        eta = cfg["learning_rate"] * scale
        effective = effective_lr(eta, k, p) if cfg["optimizer"] == "adams" else eta
        runs.append(dict(optimizer=cfg["optimizer"], lr=cfg["learning_rate"], embedding_lr_scale=scale, seed=cfg["seed"],
                         embedding_lr=eta, embedding_ratio=effective / eta, effective_embedding_lr=effective,
                         val_loss=loss, run=str(d)))
    return sorted(runs, key=lambda r: (r["optimizer"], r["lr"], r["embedding_lr_scale"], r["seed"]))


def lines(runs: list[dict]) -> dict[tuple[str, float], list[dict]]:
    """(optimizer, lr) -> its runs, for the groups tried at more than one embedding_lr_scale."""
    groups: dict[tuple[str, float], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["optimizer"], r["lr"]), []).append(r)
    return {k: v for k, v in groups.items() if len({r["embedding_lr_scale"] for r in v}) > 1}


def matched_differences(groups: dict[tuple[str, float], list[dict]]) -> list[dict]:
    """Each non-AdamW run's loss minus AdamW's at the same effective embedding lr and seed.

    For run r and an AdamW line of the same seed with points (x0, y0), (x1, y1) around r's effective
    lr x: AdamW's loss at x is y0 + (y1 - y0) · ln(x / x0) / ln(x1 / x0). One row per (run, AdamW
    line) that brackets x; runs outside every AdamW line's range are left out.
    """
    rows = []
    for (opt, _), rs in groups.items():
        if opt == "adamw":
            continue
        for r in rs:
            x = r["effective_embedding_lr"]
            for (w_opt, w_lr), ws in groups.items():
                line = sorted((w["effective_embedding_lr"], w["val_loss"]) for w in ws
                              if w_opt == "adamw" and w["seed"] == r["seed"])
                for (x0, y0), (x1, y1) in zip(line, line[1:]):
                    if x0 * (1 - 1e-9) <= x <= x1 * (1 + 1e-9) and x0 < x1:  # an end point, up to rounding, counts
                        adamw = y0 + (y1 - y0) * math.log(x / x0) / math.log(x1 / x0)
                        rows.append(dict(run=r, adamw_lr=w_lr, adamw_val_loss=adamw, difference=r["val_loss"] - adamw))
                        break
    return rows


def plot(groups: dict[tuple[str, float], list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), sharey=True)
    seeds = sorted({r["seed"] for rs in groups.values() for r in rs})
    markers = dict(zip(seeds, "osD^v<>"))
    for i, ((opt, lr), rs) in enumerate(groups.items()):
        color = plt.get_cmap("tab10")(i % 10)
        for ax, key in zip(axes, ("embedding_lr_scale", "effective_embedding_lr")):
            for seed in seeds:
                mine = [r for r in rs if r["seed"] == seed]
                ax.plot([r[key] for r in mine], [r["val_loss"] for r in mine], "-", marker=markers[seed], color=color,
                        alpha=0.85, label=f"{opt} lr {lr:g}, seed {seed}")
    axes[0].set(xscale="log", xlabel="embedding_lr_scale", ylabel="final validation loss",
                title="against the embedding's lr multiple")
    ratios = [r["embedding_ratio"] for rs in groups.values() for r in rs if r["optimizer"] == "adams"] or [1.0]
    axes[1].set(xscale="log", xlabel=f"effective embedding lr = lr × scale × R_emb (R_emb: AdamS "
                f"{min(ratios):.2f}-{max(ratios):.2f}, AdamW 1)",
                title="against the embedding's step, in AdamW's lr units")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=130)


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=cli.text("a run folder"), help="train.py out_dirs (packed scans' too)")
    parser.add_argument("--noise", type=cli.file, nargs="+", required=True,
                        help="noise_scale.py's CSVs from AdamW runs on the same data (at several embedding lrs to fit R_emb's growth)")
    parser.add_argument("--out", type=cli.place, default=Path("out/embedding_lr"))
    args = parser.parse_args(argv)
    args.runs = pack.expand(args.runs)
    ratios = {run: r for path in args.noise for run, r in embedding_ratios(path).items()}
    if len(ratios) == 1:
        k, p = next(iter(ratios.values())), 0.0
        print(f"AdamS's token embedding steps {k:.2f}x AdamW's from the same gradients (one measured run)")
    else:
        points = measured_lrs(ratios, args.runs)
        k, p = ratio_law(points)
        for (a, r), run in zip(points, ratios):
            print(f"R_emb {r:.2f} along {run} (embedding lr {a:.3g})")
        print(f"fit: R_emb(a) = {k:.3g} · a^{p:.3f}, so AdamS's embedding at lr η moves as AdamW's at (η · {k:.3g})^{1 / (1 - p):.3f}")
    runs = read_runs(args.runs, k, p)
    groups = lines(runs)
    if not groups:
        raise UserError("no optimizer and lr was run at more than one embedding_lr_scale among these runs; "
                         "sweep it with `--grid embedding_lr_scale=1,2.5,5`")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fields = ["optimizer", "lr", "embedding_lr_scale", "seed", "embedding_lr", "embedding_ratio", "effective_embedding_lr",
              "val_loss", "run"]
    write_csv(out_file(args.out, ".csv"), [r for rs in groups.values() for r in rs], fields)
    print(f"{'optimizer':9} {'lr':>7} {'scale':>5} {'seed':>4} {'R_emb':>5} {'effective emb lr':>16} {'val loss':>8}")
    for rs in groups.values():
        for r in rs:
            print(f"{r['optimizer']:9} {r['lr']:7.2g} {r['embedding_lr_scale']:5g} {r['seed']:4d} {r['embedding_ratio']:5.2f} "
                  f"{r['effective_embedding_lr']:16.3g} {r['val_loss']:8.3f}")
    matched = matched_differences(groups)
    if matched:
        print("at the same effective embedding lr and seed (AdamW's loss interpolated in log lr):")
        print(f"{'optimizer':9} {'lr':>7} {'scale':>5} {'seed':>4} {'val loss':>8} {'AdamW':>12} {'difference':>10}")
        for m in matched:
            r = m["run"]
            print(f"{r['optimizer']:9} {r['lr']:7.2g} {r['embedding_lr_scale']:5g} {r['seed']:4d} {r['val_loss']:8.3f} "
                  f"{m['adamw_val_loss']:6.3f} ({m['adamw_lr']:.2g}) {m['difference']:+10.3f}")
        diffs = [m["difference"] for m in matched]
        print(f"mean difference {sum(diffs) / len(diffs):+.3f} over {len(diffs)} runs "
              f"(from {min(diffs):+.3f} to {max(diffs):+.3f})")
    plot(groups, out_file(args.out, ".png"))
    print(f"wrote {out_file(args.out, '.csv')} and {out_file(args.out, '.png')}")
    return runs


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
