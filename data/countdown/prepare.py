"""Countdown problems for post-training: a supervised warm-up corpus and the GRPO problem sets.

    python -m data.countdown.prepare                 # data/countdown/{train,val}.bin, rl_train.jsonl, test.jsonl

From one seeded stream of distinct problems (data/countdown/task.py), disjoint sets:

- ``train.bin`` / ``val.bin``: byte-level token files of solved problems, one per line
  (``prompt + completion``), for ``train.py`` to warm a small GPT up on (config/repro/countdown_sft.py);
- ``rl_train.jsonl``: the problems GRPO trains on (never seen solved);
- ``test.jsonl``: the problems every reward curve is measured on.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import cli
import folders
from data.countdown.task import completion, generate, prompt
from errors import UserError
from tokens import write_tokens

FILES = ("train.bin", "val.bin", "rl_train.jsonl", "test.jsonl")


def corpus(problems) -> np.ndarray:
    return np.frombuffer("".join(prompt(p) + completion(p) for p in problems).encode("utf-8"), dtype=np.uint8)


def write_problems(path: Path, problems) -> None:
    path.write_text("".join(json.dumps(dict(numbers=list(p.numbers), target=p.target, solution=p.solution)) + "\n"
                            for p in problems))


def read_problems(path: Path) -> list[dict]:
    """The problems of a jsonl file this module wrote, or one error naming the file and the line."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        raise UserError(f"{path} does not exist; run python -m data.countdown.prepare first") from None
    problems = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            problem = json.loads(line)
            numbers, target = [int(n) for n in problem["numbers"]], int(problem["target"])
        except (ValueError, KeyError, TypeError):
            raise UserError(f"{path} line {i} is not a Countdown problem (JSON with numbers and target); regenerate it with "
                            "python -m data.countdown.prepare") from None
        problems.append(dict(problem, numbers=numbers, target=target))
    return problems


def prepare(out: Path, sft: int = 16_000, sft_val: int = 500, rl_train: int = 2_000, test: int = 256,
            seed: int = 0, max_number: int = 9, overwrite: bool = False) -> dict[str, int]:
    """Write the four files into ``out`` (folders.dataset: all of them, or none); a set already there is
    replaced only with ``overwrite``."""
    with folders.dataset(out, FILES, overwrite, command="data.countdown.prepare") as staged:
        problems = generate(sft + sft_val + rl_train + test, seed, max_number=max_number)
        parts = np.split(np.array(problems, dtype=object), np.cumsum([sft, sft_val, rl_train]))
        write_tokens(staged / "train.bin", corpus(parts[0]), 256)
        write_tokens(staged / "val.bin", corpus(parts[1]), 256)
        write_problems(staged / "rl_train.jsonl", parts[2])
        write_problems(staged / "test.jsonl", parts[3])
    return {name: len(part) for name, part in zip(("sft", "sft_val", "rl_train", "test"), parts)}


def main(argv=None) -> dict[str, int]:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=cli.place, default=Path(__file__).resolve().parent)
    parser.add_argument("--sft", type=cli.natural, default=16_000, help="solved problems to warm up on")
    parser.add_argument("--rl-train", type=cli.count, default=2_000, help="problems for GRPO")
    parser.add_argument("--test", type=cli.count, default=256, help="problems the reward curves are measured on")
    parser.add_argument("--seed", type=cli.seed, default=0)
    parser.add_argument("--max-number", type=cli.integer(2, 10_000), default=9,
                        help="numbers are 1..this (TinyZero's go to 99; single digits suit a sub-million-parameter model)")
    parser.add_argument("--overwrite", action="store_true", help="replace the problem sets already in --out")
    args = parser.parse_args(argv)
    try:
        counts = prepare(args.out, sft=args.sft, rl_train=args.rl_train, test=args.test, seed=args.seed,
                         max_number=args.max_number, overwrite=args.overwrite)
    except ValueError as e:
        raise UserError(f"data.countdown.prepare: {e}") from None
    print(f"{counts} -> {args.out}")
    return counts


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
