"""The Countdown numbers game as TinyZero poses it, and its reward, for GRPO post-training.

A problem is 3 or 4 numbers and a target that an expression using every number exactly once,
with + - * / and parentheses, reaches. TinyZero (Pan et al., 2025; the AdamS paper's Section 4.3)
draws its problems from the Hub's Countdown-Tasks-3to4; here they are generated from a seed, by
combining the numbers left to right, in the order the prompt lists them, with random operations.
Every problem so has a solution, and the generator's own is available for supervised warm-up; its
fixed shape, ``((a op b) op c) op d``, lets a sub-million-parameter model learn to copy the
numbers, so that what is left to learn (and for GRPO to improve) is the choice of operations.
Any expression that uses every number once and hits the target scores, not only that shape.

The reward follows TinyZero's ``verl/utils/reward_score/countdown.py``: the answer is the last
``<answer>...</answer>`` on the completion's last line; no answer scores 0, an answer that does
not use exactly the given numbers, does not parse or evaluate, or misses the target scores the
format reward 0.1; an answer that hits the target scores 1. Where TinyZero evaluates the
expression with Python's ``eval`` (after a character check), this parses it and computes with
exact fractions: no model output is ever executed.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from fractions import Fraction

FORMAT_SCORE, CORRECT_SCORE = 0.1, 1.0
_ANSWER = re.compile(r"<answer>(.*?)</answer>")
_TOKEN = re.compile(r"\s*(\d+|[-+*/()])")
MAX_ANSWER_CHARS = 200  # longer answers are not evaluated (format score only)
MAX_MISSES = 200_000  # draws in a row that find no new problem before generate() gives up


@dataclass(frozen=True)
class Problem:
    numbers: tuple[int, ...]
    target: int
    solution: str  # one expression that reaches the target (the generator's)


def prompt(problem: Problem) -> str:
    """The text a model completes: the problem, then 'Assistant:' as in TinyZero's template."""
    return f"Using the numbers {list(problem.numbers)}, make {problem.target}. Assistant:"


# The prompt of the paper's runs: TinyZero's template for base models (its
# examples/data_preprocess/countdown.py, template_type 'base'), kept word for word because it is the
# experiment's input: the model is asked to think inside <think> tags and answer inside <answer> tags,
# and the reward reads the answer after "Assistant:" on the completion's last line.
TINYZERO_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer.\n"
    "User: Using the numbers {numbers}, create an equation that equals {target}. You can use basic arithmetic "
    "operations (+, -, *, /) and each number can only be used once. Show your work in <think> </think> tags. And "
    "return the final answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>.\n"
    "Assistant: Let me solve this step by step.\n<think>"
)


def tinyzero_prompt(problem: Problem) -> str:
    """TinyZero's prompt for a base model (the paper's Figure 5 runs)."""
    return TINYZERO_TEMPLATE.format(numbers=list(problem.numbers), target=problem.target)


def completion(problem: Problem) -> str:
    """The supervised answer to a problem: its solution in TinyZero's answer tags, and a newline."""
    return f" <answer>{problem.solution}</answer>\n"


def _fold(rng: random.Random, numbers: tuple[int, ...]) -> tuple[Fraction, str] | None:
    """The numbers combined left to right, in the order given, with random operations:
    ``((a op b) op c) op d``; positive integer intermediate results only (as in the game). None
    if a random choice breaks that rule."""
    value, text = Fraction(numbers[0]), str(numbers[0])
    for k, x in enumerate(numbers[1:]):
        op = rng.choice("+-*/")
        value = {"+": value + x, "-": value - x, "*": value * x, "/": value / x}[op]
        if value <= 0 or value.denominator != 1:
            return None
        text = f"{text} {op} {x}" if k == 0 else f"({text}) {op} {x}"
    return value, text


def generate(n: int, seed: int, max_number: int = 25, max_target: int = 100, operands=(3, 4)) -> list[Problem]:
    """``n`` distinct solvable problems (distinct as a multiset of numbers and a target), a pure
    function of ``seed``. ValueError if the settings allow fewer than ``n`` (single digits: about
    22,800)."""
    # at most every multiset of numbers with every target: too few fails at once, not after MAX_MISSES tries
    bound = sum(math.comb(max_number + k - 1, k) for k in operands) * max_target
    if n > bound:
        raise ValueError(f"there are at most {bound:,} distinct problems with numbers up to {max_number} and targets "
                         f"up to {max_target}; ask for fewer than {n} or allow larger numbers")
    rng = random.Random(seed)
    problems, seen, misses = [], set(), 0
    while len(problems) < n:
        if misses > MAX_MISSES:
            raise ValueError(f"found only {len(problems)} distinct problems with numbers up to {max_number}; "
                             f"ask for fewer than {n} or allow larger numbers")
        misses += 1
        numbers = tuple(rng.randint(1, max_number) for _ in range(rng.choice(operands)))
        made = _fold(rng, numbers)
        if made is None or not 1 <= made[0] <= max_target:
            continue
        key = (tuple(sorted(numbers)), int(made[0]))
        if key in seen:
            continue
        seen.add(key)
        misses = 0
        problems.append(Problem(numbers, int(made[0]), made[1]))
    return problems


def splits(n_train: int, n_test: int, seed: int = 0, **kwargs) -> tuple[list[Problem], list[Problem]]:
    """Train and test problems from one stream, with no problem (numbers and target) in both."""
    problems = generate(n_train + n_test, seed, **kwargs)
    return problems[:n_train], problems[n_train:]


# --- the reward ------------------------------------------------------------------------------------


def extract_answer(text: str) -> str | None:
    """The last <answer>...</answer> on the last line of ``text`` (TinyZero's rule), stripped."""
    lines = text.rstrip("\n").split("\n")
    found = _ANSWER.findall(lines[-1]) if lines else []
    return found[-1].strip() if found else None


class _Parser:
    """expr := term (('+'|'-') term)* ; term := factor (('*'|'/') factor)* ; factor := INT | '(' expr ')'"""

    def __init__(self, text: str):
        self.tokens, pos = [], 0
        while pos < len(text.rstrip()):
            match = _TOKEN.match(text, pos)
            if not match:
                raise ValueError(f"unexpected character at {pos}")
            self.tokens.append(match.group(1))
            pos = match.end()
        self.i = 0
        self.numbers: list[int] = []

    def parse(self) -> Fraction:
        value = self.expr()
        if self.i != len(self.tokens):
            raise ValueError("trailing input")
        return value

    def peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self):
        self.i += 1
        return self.tokens[self.i - 1]

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op, right = self.take(), self.factor()
            if op == "/" and right == 0:
                raise ZeroDivisionError
            value = value * right if op == "*" else value / right
        return value

    def factor(self) -> Fraction:
        token = self.peek()
        if token is None:
            raise ValueError("unexpected end")
        self.take()
        if token == "(":
            value = self.expr()
            if self.peek() != ")":
                raise ValueError("missing )")
            self.take()
            return value
        if token.isdigit():
            self.numbers.append(int(token))
            return Fraction(int(token))
        raise ValueError(f"unexpected {token!r}")


def evaluate(expression: str) -> tuple[Fraction, list[int]]:
    """The exact value of an arithmetic expression (integers, + - * /, parentheses) and the
    numbers it uses; ValueError or ZeroDivisionError if it is not one."""
    if len(expression) > MAX_ANSWER_CHARS:
        raise ValueError("too long")
    parser = _Parser(expression)
    return parser.parse(), parser.numbers


def score(completion_text: str, numbers, target: int) -> float:
    """TinyZero's Countdown reward: 0 (no answer), 0.1 (an answer, but not a right one), 1 (right)."""
    answer = extract_answer(completion_text)
    if answer is None:
        return 0.0
    try:
        value, used = evaluate(answer)
    except (ValueError, ZeroDivisionError):
        return FORMAT_SCORE
    if sorted(used) != sorted(numbers):  # every number exactly once
        return FORMAT_SCORE
    return CORRECT_SCORE if value == target else FORMAT_SCORE
