"""The Countdown numbers game as TinyZero poses it, and its reward, for GRPO post-training.

A problem is 3 or 4 numbers and a target that an expression using every number exactly once,
with + - * / and parentheses, reaches. TinyZero (Pan et al., 2025; the AdamS paper's Section 4.3)
draws its problems from the Hub's Countdown-Tasks-3to4; here they are generated from a seed, by
combining the numbers left to right, in the order the prompt lists them, with random operations.
Every problem so has a solution, and the generator's own is available for supervised warm-up; its
fixed shape, ``((a op b) op c) op d``, lets a sub-million-parameter model learn to copy the
numbers, so that what is left to learn (and for GRPO to improve) is the choice of operations.
Any expression that uses every number once and hits the target scores, not only that shape.

The reward is TinyZero's ``verl/utils/reward_score/countdown.py`` (``score``): the answer is the
last ``<answer>...</answer>`` on the completion's last line; no answer scores 0, an answer that
does not use exactly the given numbers, does not evaluate, or misses the target scores the format
reward 0.1; an answer that hits the target scores 1. Where TinyZero evaluates the expression with
Python's ``eval`` (after a character check), this parses it and computes the same value node by
node: no model output is ever executed. The two differ only where eval cannot finish (a power
such as ``9**9**9``), which scores 0.1 here. TinyZero scores prompt and completion together and
keeps what follows "Assistant:"; with its prompt that is the completion this scores.
"""

from __future__ import annotations

import ast
import math
import operator
import random
import re
import warnings
from dataclasses import dataclass
from fractions import Fraction

FORMAT_SCORE, CORRECT_SCORE = 0.1, 1.0
_ANSWER = re.compile(r"<answer>(.*?)</answer>")
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

# TinyZero's character check: digits, + - * / ( ) . and white space, nothing else
_ALLOWED = re.compile(r"^[\d+\-*/().\s]+$")
MAX_ANSWER_CHARS = 100_000  # longer answers are not evaluated (scored 0.1): far beyond any completion's length
MAX_POWER_BITS = 100_000  # a power whose integer result would need more bits is not computed (9**9**9): scored 0.1


def extract_answer(text: str) -> str | None:
    """The last <answer>...</answer> on the last line of ``text``, stripped: TinyZero's ``extract_solution``
    (``text.split("\n")[-1]``, so a text ending in a newline has an empty last line and no answer; its pattern
    ``<answer>(.*?)</answer>``, matched left to right without overlaps). Found by a scan in linear time, where the
    pattern takes quadratic time over many unclosed ``<answer>`` tags."""
    line, answer, pos = text.split("\n")[-1], None, 0
    while (start := line.find("<answer>", pos)) >= 0:
        end = line.find("</answer>", start + 8)
        if end < 0:
            break
        answer, pos = line[start + 8 : end], end + 9
    return None if answer is None else answer.strip()


class Unsafe(ValueError):
    """An answer whose value cannot be computed in bounded time and memory."""


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _apply(op: ast.operator, left, right):
    if isinstance(op, ast.Pow) and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0 \
            and right * math.log2(abs(left)) > MAX_POWER_BITS:
        raise Unsafe("the power is too large to compute")
    return _BINARY[type(op)](left, right)


def _value(root: ast.AST):
    """What Python's ``eval`` gives for an arithmetic syntax tree, computed node by node (numbers, the unary and
    binary operators), with a stack of its own: any depth Python's compiler accepts. Anything else (a call, a name,
    a tuple) raises ValueError, as eval would fail on it with no names to look up; a power too large to compute
    raises Unsafe."""
    todo, values = [(root, False)], []
    while todo:
        node, ready = todo.pop()
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            values.append(node.value)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            if ready:
                values.append(_UNARY[type(node.op)](values.pop()))
            else:
                todo += [(node, True), (node.operand, False)]
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            if ready:
                right = values.pop()
                values.append(_apply(node.op, values.pop(), right))
            else:
                todo += [(node, True), (node.right, False), (node.left, False)]
        else:
            raise ValueError(f"not arithmetic: {type(node).__name__}")
    return values[0]


def evaluate(expression: str):
    """The value Python's ``eval`` would give the expression under TinyZero's character check, computed without
    running anything; ValueError (or ZeroDivisionError, OverflowError...) where eval would fail (Python's own
    compiler is asked, not run: an expression nested past its limits fails as eval fails), Unsafe where the value
    cannot be computed in bounded time and memory."""
    if len(expression) > MAX_ANSWER_CHARS:
        raise Unsafe("too long")
    if not _ALLOWED.match(expression):
        raise ValueError("characters besides digits, + - * / ( ) . and spaces")
    try:
        with warnings.catch_warnings():  # (its SyntaxWarnings, such as "'int' object is not callable", are not ours)
            warnings.simplefilter("ignore")
            compile(expression, "<answer>", "eval")  # eval's first step, and where eval fails first
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as e:
        raise ValueError("not an expression") from e
    return _value(tree.body)


def score(completion_text: str, numbers, target: int) -> float:
    """TinyZero's Countdown reward (verl/utils/reward_score/countdown.py ``compute_score``), on the completion's
    text: 0 without an answer on its last line; 0.1 (the format reward) for an answer whose numbers (every run of
    digits, so 3.5 is 3 and 5) are not exactly the given ones, that does not evaluate, or that misses the target by
    1e-5 or more; 1 for one that hits it. Python's arithmetic, as TinyZero's eval (``**``, ``//``, unary minus,
    decimals), is computed from the parsed expression, never executed.

    It never raises and takes at most milliseconds, on any text. Where it departs from TinyZero's rule, to stay
    so (each scores the format reward 0.1 here): an answer longer than MAX_ANSWER_CHARS (100,000 characters; a
    completion of TinyZero's 1,024 tokens is far shorter), and a power whose integer value would pass
    MAX_POWER_BITS (``9**9**9``, on which TinyZero's eval runs for hours; ``1**2**3**9`` is computed: 1)."""
    answer = extract_answer(completion_text)
    if answer is None:
        return 0.0
    try:
        used = sorted(int(n) for n in re.findall(r"\d+", answer))
    except ValueError:  # a run of digits past Python's int-string limit: TinyZero's validate_equation fails the same way
        return FORMAT_SCORE
    if used != sorted(int(n) for n in numbers):
        return FORMAT_SCORE  # every number exactly once
    try:
        value = evaluate(answer)
        return CORRECT_SCORE if abs(value - target) < 1e-5 else FORMAT_SCORE
    except (ArithmeticError, ValueError, TypeError, RecursionError, MemoryError):  # Unsafe is a ValueError
        return FORMAT_SCORE
