"""How far the seeds spread near each optimizer's best lr, in each lr scan: is the scan's reading noise?

    python -m study.seed_spread study/results/lr_transfer/lr_transfer_depth_*[0-9l].csv

An lr scan is read off each grid point's mean final loss over seeds. Where the seeds differ by more
than neighbouring grid points do, which point is best, and with it the ratio and the crossing, is
partly the seeds'. For each lr_transfer table given (its OUT_points.csv beside it, which holds each
point's mean and standard deviation over seeds), and for each setting and optimizer in it, this takes
the three grid points with the lowest mean and prints the median of the seeds' standard deviation
there, in nats. Above NOISY (0.03 nats, the rule written down in study/report/depth.md for the 16-layer
model at 200 tokens per parameter) a scan gets two more seeds before it is read.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import cli
from errors import UserError
from scripts import read_csv

NOISY = 0.03  # nats
BEST = 3  # grid points


def spread(points: list[tuple[float, float, int]]) -> tuple[float, int]:
    """The median seed standard deviation at the BEST grid points of lowest mean, and the fewest seeds
    among them, from (mean, std, seeds) per grid point; diverged points (an infinite mean) never count."""
    best = sorted(p for p in points if math.isfinite(p[0]))[:BEST]
    if not best:
        return math.nan, 0
    return statistics.median(std for _, std, _ in best), min(n for _, _, n in best)


def read(table: Path) -> dict[tuple, list[tuple[float, float, int]]]:
    """lr_transfer's OUT_points.csv beside OUT.csv: (params, tokens per step, steps, betas, optimizer) ->
    [(mean, std, seeds)] over its lrs."""
    points = table.with_name(table.stem + "_points.csv")
    if not points.is_file():
        raise UserError(f"{points} does not exist; lr_transfer writes it beside {table.name}: "
                         "rerun the lr_transfer command that wrote the table")
    grids: dict[tuple, list] = {}
    for row in read_csv(points, ("params", "batch_tokens", "steps", "betas", "optimizer", "mean", "std", "n"), "an lr_transfer points table (OUT_points.csv)"):
        key = row["params"], row["batch_tokens"], row["steps"], row["betas"], row["optimizer"]
        grids.setdefault(key, []).append((float(row["mean"]), float(row["std"]), int(row["n"])))
    return grids


def main(argv=None) -> list[dict]:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="+", type=cli.file, metavar="CSV", help="lr_transfer tables (OUT.csv)")
    args = parser.parse_args(argv)
    rows = []
    for table in args.tables:
        grids = read(table)
        for params, tokens, steps, betas in sorted({k[:4] for k in grids}, key=lambda k: (int(k[0]), int(k[2]))):
            row = dict(table=table.stem.removeprefix("lr_transfer_"), params=int(params), batch_tokens=int(tokens),
                       tpp=int(tokens) * int(steps) / int(params), betas=betas)
            for optimizer in ("adamw", "adams"):
                sd, n = spread(grids.get((params, tokens, steps, betas, optimizer), []))
                row[optimizer], row[f"{optimizer}_seeds"] = sd, n
            rows.append(row)
    print(f"Median standard deviation over seeds at each optimizer's {BEST} best grid points, in nats "
          f"(* above {NOISY}):\n")
    print("| table | parameters | tokens per step | tokens per parameter | AdamW | AdamS | seeds (AdamW, AdamS) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        cells = [f"{r[o]:.3f}{' *' if r[o] > NOISY else ''}" if math.isfinite(r[o]) else "—" for o in ("adamw", "adams")]
        tpp = f"{r['tpp']:,.0f}" if r["tpp"] >= 10 else f"{r['tpp']:.2g}"
        print(f"| {r['table']} | {r['params']:,} | {r['batch_tokens']:,} | {tpp} | {cells[0]} | {cells[1]} | "
              f"{r['adamw_seeds']}, {r['adams_seeds']} |")
    return rows


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
