"""Countdown (data/countdown) and GRPO (scripts/grpo.py): the generator, TinyZero's reward on
hand-written completions, and a 2-step GRPO run per optimizer through TRL."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vocabulary
from data.countdown import prepare as countdown_prepare
from data.countdown import task
from data.countdown.task import (
    CORRECT_SCORE,
    FORMAT_SCORE,
    Problem,
    completion,
    evaluate,
    extract_answer,
    generate,
    prompt,
    score,
    splits,
)
from errors import UserError
from tokens import read_tokens


def test_problems_are_deterministic_distinct_and_solvable():
    a, b = generate(300, seed=3), generate(300, seed=3)
    assert a == b and a != generate(300, seed=4)
    assert len({(tuple(sorted(p.numbers)), p.target) for p in a}) == 300
    for p in a:
        assert len(p.numbers) in (3, 4) and 1 <= p.target <= 100
        assert evaluate(p.solution) == pytest.approx(p.target, abs=1e-9)  # the solution is right, by our evaluator
        assert eval(p.solution) == pytest.approx(p.target)  # ...and by Python's (trusted input: our own)
        assert score(completion(p).removesuffix("\n"), p.numbers, p.target) == CORRECT_SCORE  # (its newline: the end token)


def test_solutions_take_the_numbers_left_to_right_in_the_prompts_order():
    for p in generate(200, seed=5, max_number=9):
        assert [int(x) for x in re.findall(r"\d+", p.solution)] == list(p.numbers)
        assert p.solution.count("(") == len(p.numbers) - 2  # ((a op b) op c) op d
        assert str(list(p.numbers)) in prompt(p)


def test_asking_for_more_problems_than_exist_is_an_error_not_a_hang(monkeypatch):
    # numbers 1-2: 4 multisets of three and 5 of four, times 100 targets, so 900 at most
    with pytest.raises(ValueError, match="at most 900 distinct problems"):
        generate(901, seed=0, max_number=2)
    # fewer than that bound can be reached (the folds reach few targets): the generator gives up after
    # MAX_MISSES draws in a row find nothing new (made smaller here; at 200,000 that takes ~14 s)
    monkeypatch.setattr(task, "MAX_MISSES", 2_000)
    with pytest.raises(ValueError, match="found only [0-9]+ distinct problems with numbers up to 2"):
        generate(900, seed=0, max_number=2)


def test_train_and_test_share_no_problem():
    train, test = splits(500, 100, seed=0)
    key = lambda p: (tuple(sorted(p.numbers)), p.target)  # noqa: E731
    assert not {key(p) for p in train} & {key(p) for p in test} and len(test) == 100


NUMBERS, TARGET = [3, 7, 25], 46  # 25 + 3 * 7


@pytest.mark.parametrize("text, expected", [
    (" <answer>25 + 3 * 7</answer>", CORRECT_SCORE),
    (" <answer>(7 * 3) + 25</answer>\n", 0.0),  # TinyZero: the last line is the empty one after the newline
    (" thinking... <answer>25+3*7</answer>", CORRECT_SCORE),
    (" <answer>1 + 2</answer> <answer>25 + 3 * 7</answer>", CORRECT_SCORE),  # the last answer counts
    (" <answer>25 + 7 * 3 / 1</answer>", FORMAT_SCORE),  # 1 is not one of the numbers
    (" <answer>25 + 3 + 7</answer>", FORMAT_SCORE),  # wrong value
    (" <answer>25 * 3</answer>", FORMAT_SCORE),  # 7 unused: TinyZero wants every number once
    (" <answer>25 + 3 * 7 + 3 - 3</answer>", FORMAT_SCORE),  # 3 used three times
    (" <answer>25 + 3 * 7)</answer>", FORMAT_SCORE),  # unbalanced
    (" <answer>25 + 3 * (7</answer>", FORMAT_SCORE),
    (" <answer>25 / (3 - 3) * 7</answer>", FORMAT_SCORE),  # division by zero
    (" <answer></answer>", FORMAT_SCORE),
    (" 25 + 3 * 7", 0.0),  # no answer tags
    (" <answer>25 + 3 * 7", 0.0),
    (" <answer>25 + 3 * 7</answer>\nand then more", 0.0),  # TinyZero reads the last line only
])
def test_reward_on_hand_written_completions(text, expected):
    assert score(text, NUMBERS, TARGET) == expected


# Worked out by hand from TinyZero's verl/utils/reward_score/countdown.py: extract_solution keeps the last line
# (split("\n")[-1]) and its last <answer>; validate_equation compares every run of digits with the numbers;
# evaluate_equation checks the characters ^[\d+\-*/().\s]+$ and evals; a value within 1e-5 of the target is right.
TINYZERO = [
    ("<answer>1+2+3</answer>", [1, 2, 3], 6, 1.0),
    ("<answer>1+2+3</answer>\n", [1, 2, 3], 6, 0.0),  # last line empty
    ("<answer>1+2+3</answer>\nDone.", [1, 2, 3], 6, 0.0),  # last line has no answer
    ("thinking\n<answer>1+2+3</answer>", [1, 2, 3], 6, 1.0),  # the answer is the last line
    ("<answer>-(4+2)+6</answer>", [4, 2, 6], 0, 1.0),  # unary minus
    ("<answer>2**3*5</answer>", [2, 3, 5], 40, 1.0),  # a power
    ("<answer>3.5*2</answer>", [3, 5, 2], 7, 1.0),  # a decimal: its digits 3 and 5 are two numbers
    ("<answer>8//3+1</answer>", [8, 3, 1], 3, 1.0),  # floor division
    ("<answer>6/4*2</answer>", [6, 4, 2], 3, 1.0),  # 3.0
    ("<answer>1/3*3</answer>", [1, 3, 3], 1, 1.0),  # 0.999...: within 1e-5
    ("<answer>+5</answer>", [5], 5, 1.0),  # unary plus
    ("<answer> 7 </answer>", [7], 7, 1.0),  # stripped
    ("<answer>1+2</answer> <answer>3*1</answer>", [3, 1], 3, 1.0),  # the last answer
    ("<answer>(1+2)*3</answer>", [1, 2, 3], 9, 1.0),
    ("<answer>(1+2)*3</answer>", [1, 2, 3], 8, 0.1),  # misses the target
    ("<answer>1+2=3</answer>", [1, 2], 3, 0.1),  # '=3' adds the number 3
    ("<answer>4/0+1</answer>", [4, 0, 1], 1, 0.1),  # ZeroDivisionError
    ("<answer>2*(3+4</answer>", [2, 3, 4], 14, 0.1),  # SyntaxError
    ("<answer>5 5</answer>", [5, 5], 10, 0.1),  # SyntaxError
    ("<answer>(5)(5)</answer>", [5, 5], 25, 0.1),  # a call: TypeError
    ("<answer>abc</answer>", [1], 1, 0.1),  # no numbers at all
    ("<answer>(-8)**0.5</answer>", [8, 0, 5], 3, 0.1),  # a complex value, far from 3
    ("<answer>2**-1*4</answer>", [2, 1, 4], 2, 1.0),  # 0.5 * 4
    ("<answer>1e1</answer>", [1, 1], 10, 0.1),  # 'e' fails the character check
    ("no answer", [1], 1, 0.0),
]


@pytest.mark.parametrize("text, numbers, target, expected", TINYZERO)
def test_reward_is_tinyzeros_on_a_table_worked_out_by_hand(text, numbers, target, expected):
    assert score(text, numbers, target) == expected


def test_a_power_too_large_to_compute_scores_as_a_wrong_answer_without_hanging():
    import time

    start = time.time()
    assert score("<answer>9**9**9</answer>", [9, 9, 9], 1) == FORMAT_SCORE  # TinyZero's eval would not finish
    assert time.time() - start < 1.0


@pytest.mark.parametrize("answer", [
    "__import__('os').system('echo pwned')", "25 ** 3 * 7", "2 ** 10 ** 10", "25 + 3 * 7; 1", "25 + 3 * 7 if 1 else 0",
    "[25, 3, 7]", "25e0 + 3 * 7", "0x19 + 3 * 7", "25 + 3 * 7 " + "+ 0 " * 200, "lambda: 46", "46",
])
def test_adversarial_answers_are_parsed_never_executed(answer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert score(f"<answer>{answer}</answer>", NUMBERS, TARGET) == FORMAT_SCORE
    assert not list(tmp_path.iterdir())


# The cases a probe of the reward found (each used to raise, hang or take seconds), with TinyZero's score: its
# validate_equation catches the int-string limit (0.1); eval finishes 1**2**3**9 (2**19,683, then 1) and a long
# padded answer; eval fails on 2,500 unary signs (0.1); 12,500 unclosed <answer> tags hold no answer (0)
ADVERSARIAL = [
    ("<answer>" + "1" * 5000 + "</answer>", [1], 1, 0.1),  # past Python's 4,300-digit int-string limit
    ("<answer>" + "-" * 2500 + "1+2+3</answer>", [1, 2, 3], 4, 0.1),  # past the compiler's nesting limit
    ("<answer>" + "- " * 900 + "1+2+3</answer>", [1, 2, 3], 6, 1.0),  # within it: computed
    ("<answer>" * 12_500 + "1", [1], 1, 0.0),  # quadratic for the pattern, linear for the scan
    ("<answer>1**2**3**9</answer>", [1, 2, 3, 9], 1, 1.0),  # a tower eval finishes at once
    ("<answer>1" + " " * 10_001 + "+2</answer>", [1, 2], 3, 1.0),  # a long answer eval reads at once
    ("<answer>" + "(" * 300 + "1" + ")" * 300 + "</answer>", [1], 1, 0.1),  # too many parentheses for Python
]


@pytest.mark.parametrize("text, numbers, target, expected", ADVERSARIAL)
def test_the_reward_on_hostile_completions_is_tinyzeros_at_once_and_never_raises(text, numbers, target, expected):
    import time

    start = time.perf_counter()
    assert score(text, numbers, target) == expected
    assert time.perf_counter() - start < 0.05


def tinyzeros_rule(text: str, numbers, target) -> float | None:
    """An independent statement of TinyZero's rule (its countdown.py, described above TINYZERO) with Python's eval,
    for texts this test draws (short, at most one power: eval finishes); None where it would need a listed bound."""
    line = text.split("\n")[-1]
    found = re.findall(r"<answer>(.*?)</answer>", line)
    if not found:
        return 0.0
    answer = found[-1].strip()
    try:
        if sorted(int(n) for n in re.findall(r"\d+", answer)) != sorted(numbers):
            return 0.1
    except ValueError:
        return 0.1
    if not re.match(r"^[\d+\-*/().\s]+$", answer):
        return 0.1
    try:
        value = eval(answer, {"__builtins__": None}, {})  # only digits, operators, parentheses, dots and spaces
        return 1.0 if abs(value - target) < 1e-5 else 0.1
    except Exception:
        return 0.1


PIECES = ["<answer>", "</answer>", "\n", " ", "1", "2", "3", "7", "+", "-", "*", "/", "**", "(", ")", ".", "x", "é"]


def test_the_reward_never_raises_on_any_text_and_equals_tinyzeros_rule():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(st.one_of(st.text(max_size=200), st.lists(st.sampled_from(PIECES), max_size=40).map("".join)),
           st.lists(st.integers(0, 9), min_size=1, max_size=4), st.integers(-20, 100))
    def check(text, numbers, target):
        import time

        start = time.perf_counter()
        got = score(text, numbers, target)
        assert time.perf_counter() - start < 0.05
        assert got in (0.0, 0.1, 1.0)
        if text.count("**") <= 1:  # (a tower of powers could run eval for hours: the bound's case)
            assert got == tinyzeros_rule(text, numbers, target), text

    check()


def test_evaluation_is_pythons_arithmetic_without_eval():
    # the values Python's own arithmetic gives, written out by hand
    assert evaluate("(1 + 2) / 3 * 3") == 3.0 and evaluate("7 / 2") == 3.5 and evaluate("7 // 2") == 3
    assert evaluate("10 - 2 - 3") == 5 and evaluate("8 / 4 / 2") == 1.0  # left to right
    assert evaluate("2 ** 3 ** 2") == 512 and evaluate("-2 ** 2") == -4  # right to left; the power binds tighter
    assert extract_answer("x <answer> 1 + 2 </answer>") == "1 + 2"


def test_prepare_writes_disjoint_sets(tmp_path):
    counts = countdown_prepare.prepare(tmp_path, sft=200, sft_val=20, rl_train=30, test=10, seed=1)
    assert counts == {"sft": 200, "sft_val": 20, "rl_train": 30, "test": 10}
    rl = countdown_prepare.read_problems(tmp_path / "rl_train.jsonl")
    test = countdown_prepare.read_problems(tmp_path / "test.jsonl")
    text = bytes(read_tokens(tmp_path / "train.bin")[0].tolist()).decode()
    assert text.count("Assistant: <answer>") == 200 and text.endswith("</answer>\n")
    for p in rl + test:
        assert prompt(Problem(tuple(p["numbers"]), p["target"], "")) not in text  # never seen solved


# --- GRPO through TRL ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    pytest.importorskip("trl")
    import transformers


    folder = tmp_path_factory.mktemp("policy")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=256, n_positions=96, n_embd=32, n_layer=1, n_head=2,
                                     bos_token_id=None, eos_token_id=None)  # as export.py writes a byte-level model
    transformers.GPT2LMHeadModel(config).save_pretrained(folder / "hf")
    vocabulary.byte_tokenizer().save_pretrained(folder / "hf")
    countdown_prepare.prepare(folder / "data", sft=10, sft_val=2, rl_train=16, test=8, seed=0)
    return folder


@pytest.mark.parametrize("optimizer", ["adamw", "adams", "lion"])
def test_grpo_two_steps_with_each_optimizer(optimizer, tiny_policy, tmp_path):
    from scripts import grpo

    out = tmp_path / optimizer
    records = grpo.main([str(tiny_policy / "hf"), "--optimizer", optimizer, "--steps", "2", "--eval-every", "1",
                         "--prompts", "2", "--generations", "4", "--max-completion-length", "8", "--test-problems", "4",
                         "--data", str(tiny_policy / "data"), "--out", str(out), "--lr", "1e-3"])
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all(0 <= r["test_reward"] <= 1 for r in records)
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in lines} == {"eval", "train"}
    trained = [r for r in lines if r["kind"] == "train" and "learning_rate" in r]
    # the trainer stepped our optimizer, at the paper's rule for its lr (Lion: 0.1x)
    assert trained and trained[0]["learning_rate"] == pytest.approx(1e-4 if optimizer == "lion" else 1e-3)
    assert all(r["learning_rate"] == trained[0]["learning_rate"] for r in trained)  # constant, not decayed
    assert grpo.finished(out)


def test_a_byte_level_policys_completion_is_scored_up_to_its_newline(tiny_policy):
    # export.py's byte-level policy ends a completion with the newline, whose token GPT-2's byte alphabet
    # spells 'Ċ': the reward must end the completion there, or TinyZero's last-line rule sees an empty line
    from scripts import grpo

    _, tokenizer = grpo.load_policy(tiny_policy / "hf")
    ids = tokenizer(" <answer>(1 + 2) * 3</answer>\n<answer>7</answer>")["input_ids"]  # the end, then more
    assert grpo.completion_text(tokenizer, ids) == " <answer>(1 + 2) * 3</answer>"
    assert grpo.rewards_of(tokenizer, [ids], [[1, 2, 3]], [9]) == [1.0]


def test_training_and_evaluation_score_the_same_text(tiny_qwen2):
    # TRL hands the reward its sampled ids and its own decoding with special tokens skipped; evaluation decodes
    # generate()'s ids with them kept. Both are scored from the ids, by one rule: up to the end token, specials kept
    from transformers import AutoTokenizer

    from scripts import grpo

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen2 / "hf")
    tokenizer.eos_token = "<|endoftext|>"
    body = tokenizer(" <answer>1+2</answer>")["input_ids"]
    sampled = body + [tokenizer.eos_token_id] + tokenizer("<answer>9</answer>")["input_ids"]  # padding after the end
    assert grpo.completion_text(tokenizer, sampled) == " <answer>1+2</answer>"
    assert grpo.rewards_of(tokenizer, [sampled], [[1, 2]], [3]) == [1.0]


def test_a_flat_rollout_is_every_group_alike():
    from scripts.grpo import flat

    assert flat([0.1, 0.1, 0.0, 0.0], generations=2)  # each prompt's pair alike: no advantage anywhere
    assert not flat([0.1, 0.0, 0.0, 0.0], generations=2)  # one pair differs: that prompt has a gradient
    assert not flat([0.1, 0.1, 0.1, 0.0], generations=4)


def test_a_flat_grpo_run_says_why_once_and_its_redirected_log_holds_our_lines(tiny_policy, tmp_path):
    # an untrained policy writes no answer in 8 bytes: every reward is 0, every advantage 0
    log = tmp_path / "log.txt"
    with open(log, "w") as f:  # redirected, as a log file is: no terminal
        result = subprocess.run([sys.executable, "-m", "scripts.grpo", str(tiny_policy / "hf"), "--steps", "2",
                                 "--prompts", "2", "--generations", "4", "--max-completion-length", "8",
                                 "--test-problems", "4", "--data", str(tiny_policy / "data"), "--out", str(tmp_path / "o")],
                                cwd=Path(__file__).resolve().parents[1], stdout=f, stderr=subprocess.STDOUT, timeout=600,
                                env={k: v for k, v in os.environ.items() if k != "WANDB_MODE"})  # (transformers prints it)
    text = log.read_text()
    assert result.returncode == 0, text[-3000:]
    assert text.count("note: every prompt's 4 completions scored alike in a rollout (all 0), so every advantage") == 1
    assert "2 of the 2 scored batches were flat (no advantage, no gradient)" in text
    meta = json.loads((tmp_path / "o" / "run.json").read_text())
    assert (meta["scored_batches"], meta["flat_batches"]) == (2, 2)
    # our lines only: no progress bars, no dicts of the trainer's numbers, no known-harmless warnings
    lines = text.splitlines()
    ours = ("GRPO memory per process, counted (MiB): ", "adams seed 1 step ", "note: every prompt", "2 of the 2 scored")
    assert all(line.startswith(ours) for line in lines), text


def test_grpo_optimizers_follow_the_papers_rules():
    from adams_optim import AdamS, Lion

    from scripts import grpo

    params = [torch.nn.Parameter(torch.zeros(2))]
    adamw, adams, lion = (grpo.build_optimizer(n, params, 1e-5) for n in ("adamw", "adams", "lion"))
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["betas"] == (0.9, 0.999)
    assert adamw.defaults["weight_decay"] == 0.01
    assert type(adams) is AdamS and adams.defaults["betas"] == (0.9, 0.95) and adams.defaults["lr"] == 1e-5
    assert type(lion) is Lion and lion.defaults["betas"] == (0.95, 0.98)
    assert lion.defaults["lr"] == pytest.approx(1e-6) and lion.defaults["weight_decay"] == pytest.approx(0.1)


def test_grpo_compare_summarizes_mean_and_std(tiny_policy, tmp_path):
    from scripts import grpo

    for name in (*grpo.COMPARED, "adams_lr=3e-05"):  # finished runs, as --compare --adams-lr 3e-5 leaves them
        for seed, reward in ((1, 0.1), (2, 0.3)):
            out = tmp_path / f"{name}_seed={seed}"
            out.mkdir()
            (out / "metrics.jsonl").write_text(
                "".join(json.dumps(dict(kind="eval", step=s, test_reward=reward + s, test_accuracy=0.0)) + "\n" for s in (0, 5))
                + "".join(json.dumps(dict(kind="train", step=s, reward=reward * s, loss=0.0)) + "\n" for s in (1, 2, 3, 4, 5)))
            (out / "run.json").write_text(json.dumps(dict(optimizer=name, seed=seed, lr=1e-4, steps=5, done=True)))
    rows = grpo.main([str(tiny_policy / "hf"), "--compare", "--adams-lr", "3e-5", "--seeds", "1", "2",
                      "--data", str(tiny_policy / "data"), "--out", str(tmp_path)])  # every run finished: summarizes
    assert {r["optimizer"] for r in rows} == {"adamw", "adams", "lion", "adams_lr=3e-05"}
    row = next(r for r in rows if r["optimizer"] == "adams" and r["step"] == 5 and r["quantity"] == "test")
    assert row["reward_mean"] == pytest.approx(5.2) and row["reward_std"] == pytest.approx(2**0.5 / 10)  # 5.1, 5.3
    # Figure 5's own quantity: the training rollouts' mean reward (TRL's logged 'reward'), at every step it was logged
    train = [r for r in rows if r["optimizer"] == "adams" and r["quantity"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5]
    assert [r["reward_mean"] for r in train] == pytest.approx([0.2 * s for s in (1, 2, 3, 4, 5)])  # 0.1s and 0.3s
    assert (tmp_path / "summary.png").exists()
    table = grpo.main(["--table", str(tmp_path / "lion_seed=2"), str(tmp_path / "lion_seed=1")])
    assert "| lion | 2 | 5.200 ± 0.141 | 2.700 ± 0.141 |" in grpo.markdown(table)  # mean ± std over the seeds
    assert [r["seed"] for r in table] == [2, 1]  # the order given; start, best, mean of the last (here 2) evals
    assert [(r["start"], r["best"], r["final"]) for r in table] == [pytest.approx((0.3, 5.3, 2.8)), pytest.approx((0.1, 5.1, 2.6))]


# --- GRPO at the paper's scale: the TinyZero preset ------------------------------------------------------

# TinyZero's scripts/train_tiny_zero.sh and veRL's GRPO settings, typed from their files (not derived from
# scripts/grpo.py): actor lr, prompts per rollout (data.train_batch_size), prompts per optimizer step
# (ppo_mini_batch_size), completions per prompt (rollout.n), response length, KL loss coefficient,
# epochs, test every 100 rollouts (trainer.test_freq) of 4 optimizer steps each
TINYZERO = dict(lr=1e-6, generation_prompts=256, prompts=64, generations=5, max_completion_length=1024, beta=0.001,
                epochs=15, eval_every=400, test_problems=1024, template="tinyzero")


def test_grpo_refuses_a_process_count_that_does_not_divide_the_batch():
    from types import SimpleNamespace

    from scripts import grpo

    args = SimpleNamespace(prompts=64, generations=5, generation_prompts=256, micro_batch=8, steps=None, epochs=15)
    assert grpo.batch_plan(args, 8, 327_680) == dict(per_device_train_batch_size=8, gradient_accumulation_steps=5,
                                                     max_steps=15 * 327_680 // 64, generation_batch_size=1280)
    assert grpo.batch_plan(args, 1, 327_680)["gradient_accumulation_steps"] == 40  # 320 completions a step, 8 at a time
    with pytest.raises(UserError, match="do not split into micro-batches of 8 on each of 3 processes"):
        grpo.batch_plan(args, 3, 327_680)


def test_grpo_tinyzero_preset_is_tinyzeros_settings_and_the_command_line_wins():
    from scripts import grpo

    args = grpo.parse_args(["somewhere", "--preset", "tinyzero"])
    assert {k: getattr(args, k) for k in TINYZERO} == TINYZERO
    assert args.steps is None and args.gradient_checkpointing
    args = grpo.parse_args(["somewhere", "--preset", "tinyzero", "--lr", "3e-7", "--steps", "12"])
    assert (args.lr, args.steps, args.generations) == (3e-7, 12, 5)
    # the paper's Section 4.3: AdamW (0.9, 0.999), weight decay 1e-2; AdamS beta2 0.95; Lion 0.1x lr, 10x decay
    cls, kwargs = grpo.optimizer_spec("adamw", 1e-6)
    assert cls is torch.optim.AdamW and kwargs == dict(lr=1e-6, betas=(0.9, 0.999), weight_decay=0.01)
    assert grpo.optimizer_spec("adams", 1e-6)[1]["betas"] == (0.9, 0.95)
    assert grpo.optimizer_spec("lion", 1e-6)[1] == dict(lr=pytest.approx(1e-7), betas=(0.95, 0.98), weight_decay=pytest.approx(0.1))


def test_grpo_help_shows_each_presets_value_of_the_options_it_sets(capsys):
    from scripts import grpo

    with pytest.raises(SystemExit):
        grpo.parse_args(["--help"])
    flat = " ".join(capsys.readouterr().out.split())
    assert "prompts per optimizer step [cpu: 16, tinyzero: 64]" in flat
    assert "tokens per completion [cpu: 40, tinyzero: 1024]" in flat
    assert "[cpu: 200, tinyzero: unset]" in flat  # --steps: TinyZero counts epochs instead


def test_tinyzero_prompt_is_answered_where_tinyzeros_reward_reads():
    from data.countdown.task import tinyzero_prompt

    text = tinyzero_prompt(Problem((3, 5, 7), 22, ""))
    assert text.startswith("A conversation between User and Assistant.") and text.endswith("Assistant: Let me solve this step by step.\n<think>")
    assert "Using the numbers [3, 5, 7], create an equation that equals 22." in text
    completion = " 3 times 5 is 15, plus 7 is 22 </think>\n<answer> 3 * 5 + 7 </answer>"
    assert score(completion, [3, 5, 7], 22) == 1.0 and score(completion, [3, 5, 7], 23) == 0.1


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory):
    """A two-layer Qwen2 with grouped KV heads (4 query heads, 2 KV heads), built from a config, with the
    byte tokenizer and an end-of-text token as its 257th (a real Qwen tokenizer has one)."""
    pytest.importorskip("trl")
    import transformers


    folder = tmp_path_factory.mktemp("qwen2")
    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=257, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=640)
    transformers.Qwen2ForCausalLM(config).save_pretrained(folder / "hf")
    vocabulary.byte_tokenizer().save_pretrained(folder / "hf")
    countdown_prepare.prepare(folder / "data", sft=10, sft_val=2, rl_train=16, test=8, seed=0)
    return folder


def test_grpo_tinyzero_preset_runs_end_to_end_on_a_tiny_qwen2(tiny_qwen2, tmp_path):
    # TinyZero's structure at toy sizes: a rollout of 4 prompts x 2 completions feeds two optimizer steps of 2
    # prompts, each in micro-batches of 2 completions; TinyZero's prompt, KL term and lr; on CUDA where there is one
    from scripts import grpo

    out = tmp_path / "run"
    records = grpo.main([str(tiny_qwen2 / "hf"), "--preset", "tinyzero", "--optimizer", "adams", "--steps", "2",
                         "--prompts", "2", "--generation-prompts", "4", "--generations", "2", "--micro-batch", "2",
                         "--max-completion-length", "8", "--test-problems", "4", "--eval-every", "1",
                         "--data", str(tiny_qwen2 / "data"), "--out", str(out)])
    assert [r["step"] for r in records] == [0, 1, 2]
    meta = json.loads((out / "run.json").read_text())
    assert meta["preset"] == "tinyzero" and meta["lr"] == 1e-6 and meta["done"]
    assert {k: meta[k] for k in ("prompts_per_rollout", "prompts_per_step", "steps_per_rollout", "epochs")} == \
        dict(prompts_per_rollout=4, prompts_per_step=2, steps_per_rollout=2, epochs=2 * 2 / 16)  # one process: the same
    assert meta["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert meta["dtype"] == ("bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32")
    trained = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "train" and r.get("learning_rate") == pytest.approx(1e-6) for r in trained)
    # TRL's defaults that TinyZero's veRL does not share are off, and said
    assert meta["trl"]["use_bias_correction_kl"] is False and meta["trl"]["vllm_importance_sampling_correction"] is False
    # Figure 5's quantity, once a rollout: one rollout of 4 prompts fed both steps of 2, so one point, at step 1
    assert [r["step"] for r in trained if r["kind"] == "train" and "reward" in r] == [1]


def test_grpo_under_torchrun_builds_our_optimizer_in_the_trainer_and_writes_once(tiny_qwen2, tmp_path):
    # two processes (gloo on CPU), as torchrun or accelerate start them for a policy one GPU cannot hold: the trainer
    # builds our optimizer where it builds its own (Lion logs 0.1x the lr, 0.1, where TRL's AdamW would log 1.0), every
    # process trains and evaluates, and only the first takes the folder's lock and writes the log and run.json
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "scripts.grpo",
         str(tiny_qwen2 / "hf"), "--preset", "tinyzero", "--optimizer", "lion", "--lr", "1.0", "--steps", "2",
         "--prompts", "2", "--generation-prompts", "4", "--generations", "2", "--micro-batch", "2",
         "--max-completion-length", "8", "--test-problems", "4", "--eval-every", "1", "--device", "cpu",
         "--data", str(tiny_qwen2 / "data"), "--out", str(out)],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    meta = json.loads((out / "run.json").read_text())
    assert meta["processes"] == 2 and meta["optimizer"] == "lion" and meta["done"]
    # the batch as the options give it, counted over both processes (each gets its half), read back from TRL's
    # settings: 4 prompts a rollout, 2 an optimizer step, so 2 steps a rollout; 2 steps x 2 prompts of the 16
    assert {k: meta[k] for k in ("prompts_per_rollout", "prompts_per_step", "steps_per_rollout", "epochs")} == \
        dict(prompts_per_rollout=4, prompts_per_step=2, steps_per_rollout=2, epochs=2 * 2 / 16)
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if r["kind"] == "eval"] == [0, 1, 2]  # once, not once per process
    rates = [r["learning_rate"] for r in logged if r["kind"] == "train" and "learning_rate" in r]
    assert rates and all(rate == pytest.approx(0.1) for rate in rates)
    assert result.stdout.count("lion seed 1 step 2: test reward") == 1


def test_grpo_refuses_to_replace_a_finished_run_and_leaves_it_as_it_was(tiny_policy, tmp_path):
    from scripts import grpo

    out = tmp_path / "done"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"kind": "eval", "step": 0, "test_reward": 0.5, "test_accuracy": 0.0}\n')
    (out / "run.json").write_text(json.dumps(dict(optimizer="adams", seed=1, lr=1e-4, steps=2, done=True)))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(UserError, match="holds a finished GRPO run.*--overwrite"):
        grpo.main([str(tiny_policy / "hf"), "--steps", "1", "--data", str(tiny_policy / "data"), "--out", str(out)])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("case", ["train_run", "no_tokenizer", "short_context", "missing", "hub_offline"])
def test_grpo_refuses_a_model_it_cannot_use_in_one_line(case, tiny_policy, tmp_path):
    import shutil

    from scripts import grpo

    model = tmp_path / "model"
    args = ["--steps", "1", "--data", str(tiny_policy / "data"), "--out", str(tmp_path / "out")]
    if case == "train_run":  # a train.py out_dir: checkpoints and a log, not a Hugging Face directory
        (model / "checkpoints").mkdir(parents=True)
        (model / "metrics.jsonl").write_text("")
        (model / "config.json").write_text("{}")
        expected = "is a train.py run.*export.py"
    elif case == "no_tokenizer":
        shutil.copytree(tiny_policy / "hf", model, ignore=shutil.ignore_patterns("tokenizer*", "vocab*", "special*"))
        expected = "has no tokenizer"
    elif case == "short_context":  # 96 positions cannot hold TinyZero's prompt
        shutil.copytree(tiny_policy / "hf", model)
        args += ["--template", "tinyzero"]
        expected = "context is 96 tokens, too short"
    elif case == "missing":
        model = tmp_path / "nowhere" / "model"
        expected = "does not exist"
    else:  # a Hub name, with the Hub out of reach (the tests run with HF_HUB_OFFLINE=1, as CI does)
        if os.environ.get("HF_HUB_OFFLINE") != "1":
            pytest.skip("needs HF_HUB_OFFLINE=1, so that no download is tried")
        model = "no-such-org/no-such-model"
        expected = "no-such-org/no-such-model is not a Hugging Face model that can be loaded: not a local folder, and the Hub"
    with pytest.raises(UserError, match=expected):
        grpo.main([str(model), *args])
    assert not (tmp_path / "out").exists()  # nothing was written


def test_grpo_refuses_a_folder_another_live_run_is_writing(tiny_policy, tmp_path):
    import folders
    from scripts import grpo

    out = tmp_path / "busy"
    lock = folders.Lock(out, "another command")
    lock.acquire("--out")
    try:
        with pytest.raises(UserError, match=r"is in use by another command \(another command, process"):
            grpo.main([str(tiny_policy / "hf"), "--steps", "1", "--prompts", "2", "--generations", "2",
                       "--max-completion-length", "4", "--test-problems", "2", "--data", str(tiny_policy / "data"),
                       "--out", str(out)])
    finally:
        lock.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, the holder's lock gone with it


def test_grpo_plans_memory_from_a_folder_holding_only_a_config(tmp_path, capsys):
    # no weights, no tokenizer, no data: the parameters counted on the meta device, each term by hand below
    pytest.importorskip("trl")
    import transformers

    from scripts import _grpo_memory as grpo_memory
    from scripts import grpo

    config = transformers.Qwen2Config(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    config.save_pretrained(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]
    said = grpo.main([str(tmp_path), "--preset", "tinyzero", "--optimizer", "adams", "--plan", "h100-80gb"])
    assert said[0].startswith("adams: GRPO memory per process, counted (GiB): weights ") and "fits on 1 x h100-80gb" in said[1]
    # embeddings 1000 x 64 (tied); a layer: q 64x64+64, k and v 64x32+32 each, o 64x64, MLP 3 x 64x128, 2 norms of 64
    layer = (64 * 64 + 64) + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64
    shape = grpo_memory.shape(str(tmp_path))
    assert shape.parameters == 1000 * 64 + 2 * layer + 64 and shape.kv_width == 2 * 2 * 16
    terms = grpo_memory.estimate(shape, 80 << 30, 1, "adamw", beta=0.001, vllm=True, micro_batch=8, prompt_tokens=100,
                                 completion_tokens=1024, generation_prompts=256, generations=5, checkpointing=True,
                                 fsdp=False, wrapped_per_layer=True)
    n, tokens = shape.parameters, 8 * 1124
    assert terms == dict(weights=4 * n, gradients=4 * n, optimizer_state=8 * n, reference_model=4 * n,
                         vllm_share=0.4 * (80 << 30), activations=2 * tokens * 64 * 4 + 34 * tokens * 64 * 2,
                         logits=8 * 1024 * 1000 * 10)
    with pytest.raises(UserError, match="give a GPU kind"):
        grpo.main([str(tmp_path), "--plan", "h100"])


def test_grpo_refuses_an_fsdp_launch_that_would_gather_the_whole_model(tiny_qwen2, tmp_path):
    # accelerate launch --use_fsdp with no auto-wrap policy: the model is one FSDP unit, gathered whole on every GPU.
    # Two processes as accelerate starts them (its environment), refused before any weight is loaded, one line
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(ACCELERATE_USE_FSDP="true", FSDP_VERSION="2", OMP_NUM_THREADS="1")
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "scripts.grpo",
         str(tiny_qwen2 / "hf"), "--preset", "tinyzero", "--steps", "1", "--prompts", "2", "--generations", "2",
         "--micro-batch", "2", "--device", "cpu", "--data", str(tiny_qwen2 / "data"), "--out", str(out)],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "--fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP (it wraps each Qwen2DecoderLayer)" in errors[0]
    assert not out.exists()


def test_evaluate_only_checks_the_context_as_training_does(tiny_policy):
    # --evaluate-only used to skip the check: an IndexError deep in transformers
    from scripts import grpo

    with pytest.raises(UserError, match="context is 96 tokens, too short"):
        grpo.main([str(tiny_policy / "hf"), "--evaluate-only", "--template", "tinyzero", "--data", str(tiny_policy / "data")])
