"""Run a grid of training runs, several seeds each, and tabulate their final validation losses.

    # the paper's Table 2: AdamS over beta1 x beta2, GPT-2 Small on 8 GPUs (prints the commands)
    python -m scripts.sweep config/train_gpt2_small_adams.py --grid beta1=0.9,0.95 \\
        --grid beta2=0.9,0.95,0.98,0.99,0.999 --out out/beta_sweep --print-commands --nproc 8

    # locally, 3 seeds per point, two runs at a time
    python -m scripts.sweep config/repro/cpu_adams.py --grid beta1=0.9,0.95 --grid beta2=0.95,0.999 \\
        --seeds 1 2 3 --jobs 2 --out out/beta_sweep_cpu

A grid key may be any config key, or ``config`` to vary whole config files
(``--grid config=config/a.py,config/b.py``). A ``--set`` value may be a multiple of a grid key,
so a learning-rate grid keeps the paper's floor at a tenth of the peak:
``--grid learning_rate=1e-3,2e-3 --set min_lr=0.1*learning_rate``. Every run gets its own out_dir under ``--out`` and
is started with ``--init_from=auto``, so an interrupted sweep picks up where it stopped: finished
runs are skipped, half-finished ones resume. The summary (``summary.csv``, ``summary.md``, and a
heatmap ``summary.png`` when the grid has two keys) gives the final validation loss per point as
mean ± std over the seeds that have finished (the table says so when some have not); a run that
diverged (train.py stopped it on non-finite steps) counts as inf and is not rerun: delete its
folder to run it again. A run that failed otherwise is reported, and the sweep exits non-zero.
A sweep into a folder that an earlier sweep over the same grid keys wrote adds its points to the
earlier ones' table rather than replacing it, so a grid can be extended.

``--summarize`` tabulates the runs that finished and writes nothing else (the study summarizes its
packed scans through study/packed.py).
"""

from __future__ import annotations

import csv
import itertools
import math
import os
import re
import signal
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cli
import contents
import folders
from errors import UserError
from metrics import records, run_config
from scripts import csv_bytes, figure_bytes

REPO = Path(__file__).resolve().parents[1]


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    grid = {}
    for item in items:
        key, eq, values = item.partition("=")
        if not eq or not values:
            raise UserError(f"--grid {item!r}: write KEY=V1,V2,...")
        grid[key] = values.split(",")
    return grid


SAFE = re.compile(r"[^A-Za-z0-9._,+=-]")  # what a value may keep in a folder name; the rest is %-escaped


def run_name(point: dict[str, str], seed: int) -> str:
    """The folder of one run: each grid value (a config file by its stem) and the seed. Characters that could
    leave the folder (/, spaces, ...) or blur two values into one (%) are %-escaped, and a value that is all dots
    is escaped whole, so a name is one folder inside --out; two points that would still share one (two config
    files of one stem, a value that spells another key) are refused by ``names`` before anything runs."""
    def escape(value: str) -> str:
        text = SAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), value)
        return "".join(f"%{ord(c):02X}" for c in text) if set(text) <= {"."} else text

    parts = [f"{k}={escape(Path(v).stem if k == 'config' else v)}" for k, v in point.items()]
    return "_".join(parts + [f"seed={seed}"])


def names(points: list[dict[str, str]], seeds: list[int], out: Path) -> list[tuple[dict, int, Path]]:
    """(point, seed, run folder) of every run: folders inside ``out``, one per run, or one error line before
    anything runs."""
    runs, taken = [], {}
    for point in points:
        for seed in seeds:
            folder = out / run_name(point, seed)
            if folder.parent != out:
                raise UserError(f"a run folder would lie outside --out {out}: {folder}")
            if folder.name in taken:
                other = taken[folder.name]
                raise UserError(f"the grid points {other} and {point} would share the run folder {folder}; give the "
                                "config files different names (run folders are named by a config file's stem)")
            taken[folder.name] = point
            runs.append((point, seed, folder))
    return runs


OWN_KEYS = {"seed": "--seeds S1 S2 ...", "out_dir": "--out", "init_from": "the sweep (--init_from=auto, so an "
            "interrupted sweep resumes)"}


def check_keys(grid: dict, sets: list[str], seeds: list[int]) -> None:
    """Refuse a --grid or --set key the sweep sets itself (it would be overridden without a word) and a seed
    given twice (one run counted as two)."""
    for key in [*grid, *(item.partition("=")[0] for item in sets)]:
        if key in OWN_KEYS:
            raise UserError(f"{key} is set by the sweep for every run; give it with {OWN_KEYS[key]}, not --grid or --set")
    if len(set(seeds)) != len(seeds):
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        raise UserError(f"--seeds gives {', '.join(map(str, twice))} more than once; each seed is one run: give each once")


SCALED = re.compile(r"^([-+.0-9eE]+)\*([A-Za-z_]\w*)$")  # FACTOR*KEY


def resolve_sets(items: list[str], point: dict[str, str]) -> list[str]:
    """``--set`` items as overrides for one grid point, with ``KEY=FACTOR*GRIDKEY`` evaluated."""
    out = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise UserError(f"--set {item!r}: write KEY=VALUE")
        scaled = SCALED.match(value)
        if scaled:
            factor, source = scaled.groups()
            if source not in point:
                raise UserError(f"--set {item!r}: '{source}' is not a --grid key, so there is nothing to scale")
            value = f"{float(factor) * float(point[source]):.6g}"
        out.append(f"--{key}={value}")
    return out


def command(base: list[str], point: dict[str, str], seed: int, out_dir: Path, sets: list[str], nproc: int,
            train_py: str = "train.py") -> list[str]:
    files = [str(f) for f in base] + ([point["config"]] if "config" in point else [])
    overrides = [f"--{k}={v}" for k, v in point.items() if k != "config"]
    extra = resolve_sets(sets, point)
    launcher = [sys.executable, train_py] if nproc <= 1 else ["torchrun", "--standalone", f"--nproc_per_node={nproc}", train_py]
    return launcher + files + overrides + extra + [f"--seed={seed}", f"--out_dir={out_dir}", "--init_from=auto"]


def final_val_loss(out_dir: Path) -> tuple[float | None, bool]:
    """(the last evaluation's validation loss, whether the run is over): a run is over when it
    reached max_iters, or diverged (train.py stopped it; its loss is then inf)."""
    metrics, config = out_dir / "metrics.jsonl", out_dir / "config.json"
    if not metrics.exists() or not config.exists():
        return None, False
    max_iters = run_config(out_dir).get("max_iters", math.inf)
    lines = records(metrics)  # a last line cut short by a crash is left out
    if lines and lines[-1].get("kind") == "diverged":
        return math.inf, True
    evals = [r for r in lines if "val_loss" in r]
    if not evals:
        return None, False
    return evals[-1]["val_loss"], evals[-1]["iter"] >= max_iters


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", type=cli.file, help="config files every run starts from")
    parser.add_argument("--grid", action="append", type=cli.assignment, default=[], help="KEY=V1,V2,... (repeatable)")
    parser.add_argument("--seeds", type=cli.seed, nargs="+", default=[1337])
    parser.add_argument("--out", type=cli.place, required=True, help="folder for the runs and the summary")
    parser.add_argument("--set", action="append", type=cli.assignment, default=[], metavar="KEY=VALUE", help="override for every run; VALUE may be FACTOR*GRIDKEY (repeatable)")
    parser.add_argument("--jobs", type=cli.integer(1, 1024), default=1, help="runs at a time, locally")
    parser.add_argument("--threads", type=cli.integer(1, 4096),
                        help="CPU threads per process (OMP_NUM_THREADS); default cores // (jobs x nproc)")
    parser.add_argument("--nproc", type=cli.integer(1, 1024), default=1, help="processes per run (torchrun when > 1)")
    parser.add_argument("--print-commands", action="store_true", help="print the commands instead of running them")
    parser.add_argument("--summarize", action="store_true", help="only tabulate the runs that finished; run nothing")
    args = parser.parse_args(argv)

    grid = parse_grid(args.grid)
    for path in [*args.configs, *grid.get("config", [])]:
        if not Path(path).is_file():
            raise UserError(f"config file '{path}' does not exist; pass a path like config/repro/cpu_adams.py")
    check_keys(grid, args.set, args.seeds)
    if args.summarize and not grid:  # the grid an earlier sweep recorded in its runs.csv
        grid = recorded_grid(args.out)
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())] or [{}]
    for point in points:
        resolve_sets(args.set, point)  # a malformed --set fails before anything runs
    runs = names(points, args.seeds, args.out)

    if args.print_commands:
        for point, seed, out_dir in runs:
            print(" ".join(command(args.configs, point, seed, out_dir, args.set, args.nproc)))
        return

    if args.summarize:  # read-only: the table is printed, nothing is written
        source = Path(args.out)
        if not source.is_dir():
            raise UserError(f"--out {args.out} does not exist, so there is nothing to summarize; "
                            "pass the folder a sweep wrote its runs to")
        return summarize([(p, s, source / d.name) for p, s, d in runs], list(grid), source, write=False)
    with folders.Destination(args.out, makes=contents.SCAN, option="--out", command="scripts.sweep") as dest:
        dest.allow(continues=(contents.SCAN,))
        Path(args.out).mkdir(exist_ok=True)
        dest.lock.hold_folder("--out")
        folders.mark(args.out, contents.SCAN, by="scripts.sweep")
        return sweep(args, runs, grid)


def sweep(args, runs: list, grid: dict) -> list[dict]:
    """Run what has not finished, ``args.jobs`` at a time, then tabulate; the caller holds --out's lock."""
    todo = [(p, s, d) for p, s, d in runs if not final_val_loss(d)[1]]
    print(f"{len(runs)} runs, {len(runs) - len(todo)} already finished, {len(todo)} to run, {args.jobs} at a time")
    # pinned: the count changes the numbers; split among every process of every run at once, torchrun's included
    threads = args.threads or max(1, (os.cpu_count() or 1) // (args.jobs * max(1, args.nproc)))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))

    children, stopping = set(), []

    def run(job):
        point, seed, out_dir = job
        if stopping:
            return None
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(out_dir / "train.log", "a") as log:
            # from the folder the sweep was started in, so that relative config and --out paths mean the same to both
            child = subprocess.Popen(command(args.configs, point, seed, out_dir, args.set, args.nproc,
                                             str(REPO / "train.py")), env=env, stdout=log, stderr=subprocess.STDOUT)
            children.add(child)
            try:
                code = child.wait()
            finally:
                children.discard(child)
        loss, done = final_val_loss(out_dir)
        killed = " (killed by SIGKILL: most likely the kernel's out-of-memory killer)" if code in (-9, 137) else ""
        print(f"{out_dir.name}: exit {code}{killed}, final val loss {loss}")
        return code

    pool = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        codes = list(cli.progress(pool.map(run, todo), "sweep, runs", total=len(todo)))
    except BaseException:  # Ctrl-C, or a signal that stops the sweep as Ctrl-C does: its runs stop with it
        stopping.append(True)
        for child in list(children):
            child.send_signal(signal.SIGINT)  # each saves nothing more and says where it stopped, in its train.log
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    summary = summarize(runs, list(grid), args.out)
    failed = [d for (_, _, d), code in zip(todo, codes) if code != 0 and not final_val_loss(d)[1]]
    if failed:
        raise UserError(f"{len(failed)} of {len(todo)} runs failed; the last lines of {failed[0] / 'train.log'} say why")
    return summary


def recorded_grid(out: Path) -> dict[str, list[str]]:
    """The grid an earlier sweep into ``out`` recorded in its runs.csv ({key: values in order}); empty if none."""
    path = out / "runs.csv"
    if not path.is_file():
        return {}
    from scripts import read_csv

    rows = read_csv(path, ("seed", "val_loss", "finished"), "a sweep's runs.csv")
    keys = [k for k in rows[0] if k not in ("seed", "val_loss", "finished")] if rows else []
    return {k: list(dict.fromkeys(r[k] for r in rows)) for k in keys}


def recorded_runs(runs, keys: list[str], out: Path) -> list:
    """The runs an earlier sweep into ``out`` recorded in its runs.csv (over the same grid keys) and
    this one does not repeat: a sweep that extends a grid then tabulates all of it, instead of
    overwriting the earlier points' summary with its own."""
    path = out / "runs.csv"
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != [*keys, "seed", "val_loss", "finished"]:
            return []  # another grid's table: this sweep's replaces it
        rows = list(reader)
    here = {(tuple(point.items()), seed) for point, seed, _ in runs}
    earlier = []
    for row in rows:
        point, seed = {k: row[k] for k in keys}, int(row["seed"])
        if (tuple(point.items()), seed) not in here and (out / run_name(point, seed)).is_dir():
            here.add((tuple(point.items()), seed))
            earlier.append((point, seed, out / run_name(point, seed)))
    return earlier


def summarize(runs, keys: list[str], out: Path, write: bool = True) -> list[dict]:
    """Tabulate the runs, and those an earlier sweep into ``out`` recorded, in grid order; a point's
    mean ± std is over its finished seeds (inf if one diverged). Writes runs.csv, summary.csv,
    summary.md and (for two grid keys) summary.png into ``out`` unless ``write`` is False."""
    runs = sorted(recorded_runs(runs, keys, out) + list(runs),
                  key=lambda run: ([_sort_key(run[0][k]) for k in keys], run[1]))
    rows, by_point = [], {}
    for point, seed, out_dir in runs:
        loss, done = final_val_loss(out_dir)
        value = loss if done and loss is not None and math.isfinite(loss) else math.inf
        rows.append(dict(point, seed=seed, val_loss=value, finished=done))
        by_point.setdefault(tuple(point.items()), []).append((value, done))
    if write:
        out.mkdir(parents=True, exist_ok=True)
        folders.write_atomic(out / "runs.csv", csv_bytes(rows, [*keys, "seed", "val_loss", "finished"]))
    summary = []
    for point, runs_here in by_point.items():
        values = [v for v, done in runs_here if done]
        mean = statistics.mean(values) if values and all(map(math.isfinite, values)) else math.inf
        std = statistics.stdev(values) if len(values) > 1 and math.isfinite(mean) else 0.0
        summary.append(dict(point, mean=mean, std=std, n=len(values), seeds=len(runs_here),
                            finished=len(values) == len(runs_here)))
    if write:
        folders.write_atomic(out / "summary.csv", csv_bytes(summary, [*keys, "mean", "std", "n", "seeds", "finished"]))
    lines = ["| " + " | ".join(keys + ["final val loss (mean ± std)", "seeds"]) + " |", "|" + " --- |" * (len(keys) + 2)]
    for s in summary:
        if not s["n"]:
            cell = "not finished"
        else:
            cell = f"{s['mean']:.4f} ± {s['std']:.4f}" if math.isfinite(s["mean"]) else "diverged"
            cell += "" if s["finished"] else f" ({s['n']} of {s['seeds']} seeds so far)"
        lines.append("| " + " | ".join([str(s[k]) for k in keys] + [cell, str(s["seeds"])]) + " |")
    print("\n".join(lines))
    if write:
        folders.write_atomic(out / "summary.md", ("\n".join(lines) + "\n").encode())
        if len(keys) == 2:
            heatmap(summary, keys, out / "summary.png")
    return summary


def heatmap(summary: list[dict], keys: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = sorted({s[keys[0]] for s in summary}, key=_sort_key)
    cols = sorted({s[keys[1]] for s in summary}, key=_sort_key)
    grid = np.full((len(rows), len(cols)), np.nan)
    labels = np.full((len(rows), len(cols)), "", dtype=object)
    for s in summary:
        i, j = rows.index(s[keys[0]]), cols.index(s[keys[1]])
        grid[i, j] = s["mean"] if s["n"] and math.isfinite(s["mean"]) else np.nan
        labels[i, j] = "not finished" if not s["n"] else ("diverged" if np.isnan(grid[i, j]) else f"{grid[i, j]:.3f}")
        labels[i, j] += "" if s["finished"] or not s["n"] else f"\n({s['n']} of {s['seeds']})"
    fig, ax = plt.subplots(figsize=(1.4 * len(cols) + 2, 0.9 * len(rows) + 1.5))
    cmap = plt.get_cmap("viridis_r").with_extremes(bad="lightgrey")  # unfinished or diverged points in grey
    image = ax.imshow(grid, cmap=cmap)
    for i in range(len(rows)):
        for j in range(len(cols)):
            cell = cmap.get_bad() if np.isnan(grid[i, j]) else cmap(image.norm(grid[i, j]))
            ax.text(j, i, labels[i, j], ha="center", va="center", color=label_color(cell), fontsize=9)
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(keys[1])
    ax.set_ylabel(keys[0])
    ax.set_title("final validation loss (mean over seeds)")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    folders.write_atomic(path, figure_bytes(fig, dpi=130))


def label_color(rgba) -> str:
    """Black text on light cells, white on dark ones (relative luminance, ITU-R BT.709 weights)."""
    r, g, b = rgba[:3]
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def _sort_key(value: str):
    try:
        return (0, float(value))
    except ValueError:
        return (1, value)


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
