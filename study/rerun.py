"""How far a rerun of the same command lands from the first run, against the spread between seeds.

    python -m study.rerun FIRST RERUN [--seeds RUN ...] [--from STEP]

FIRST and RERUN are two run folders (config.json + metrics.jsonl) of one command and seed, e.g. one
run on two VMs. Prints how many evaluations both made (step 0 left out), the mean and largest
absolute difference of their validation losses, the largest from STEP on, and, given the same
point's runs on other seeds, the range of the seeds' standard deviation over those evaluations.
A run need not have finished: an interrupted one counts up to its last evaluation.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import cli
from errors import UserError
from study import pack


def evals(run: Path) -> dict[int, float]:
    """{iteration: validation loss} of a run's evaluations."""
    run = pack.resolve(run)  # a run inside a packed scan reads as its folder
    if not (run / "metrics.jsonl").is_file():
        raise UserError(f"'{run}' has no metrics.jsonl; pass a run folder as train.py leaves it")
    rows = (json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"val_loss"' in line)
    return {r["iter"]: r["val_loss"] for r in rows}


def compare(first: Path, rerun: Path, seeds: list[Path], start: int = 0) -> dict:
    a, b = evals(first), evals(rerun)
    steps = sorted(set(a) & set(b) - {0})
    if not steps:
        raise UserError(f"'{first}' and '{rerun}' share no evaluation after step 0")
    diff = [abs(a[k] - b[k]) for k in steps]
    late = [d for k, d in zip(steps, diff) if k >= start]
    if not late:
        raise UserError(f"--from {start:,} is past the last evaluation both runs made (step {steps[-1]:,}); pass a smaller step")
    out = dict(evaluations=len(steps), last_step=steps[-1], mean_abs=statistics.fmean(diff), max_abs=max(diff),
               max_abs_from=max(late))
    if len(seeds) >= 2:
        runs = [evals(s) for s in seeds]
        shared = [k for k in steps if all(k in r for r in runs)]
        spread = [statistics.stdev(r[k] for r in runs) for k in shared]
        out["seed_std"] = (min(spread), max(spread)) if spread else None
    return out


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=cli.existing)
    parser.add_argument("rerun", type=cli.existing)
    parser.add_argument("--seeds", type=cli.existing, nargs="+", default=[], help="the same point's runs on other seeds")
    parser.add_argument("--from", dest="start", type=cli.natural, default=0, help="also report the largest difference from this step on")
    args = parser.parse_args(argv)
    r = compare(args.first, args.rerun, args.seeds, args.start)
    print(f"{r['evaluations']} shared evaluations (to step {r['last_step']:,}): |difference| mean {r['mean_abs']:.4f}, "
          f"max {r['max_abs']:.4f}" + (f", max from step {args.start:,} {r['max_abs_from']:.4f}" if args.start else ""))
    if r.get("seed_std"):
        print(f"std over {len(args.seeds)} seeds at those evaluations: {r['seed_std'][0]:.4f}-{r['seed_std'][1]:.4f}")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
