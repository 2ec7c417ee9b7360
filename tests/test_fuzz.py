"""Every command, every option, hostile values (tests/fuzzing.py): one `error:` line or success, never a
traceback, and nothing changed that the command did not make. A sample of the tries runs in CI, every
try under `pytest -m slow`."""

from __future__ import annotations

import random

import pytest

from tests import fuzzing

CI_TRIES_PER_COMMAND = 4
CI_ACCEPTED = 3  # tries that get past their parser and run, each stopped at 8 s (-m slow: every one)
SEED = 20261207


@pytest.fixture(scope="module")
def world(data_dir, tmp_path_factory):
    return fuzzing.build_world(tmp_path_factory.mktemp("fuzz") / "world", data_dir)


def test_every_command_is_found_with_its_parser_and_its_error_wrapper():
    entries = fuzzing.entry_points()
    names = {e.name for e in entries}
    assert {"train", "export", "sample", "tokens", "consolidate", "scripts.sweep", "scripts.grpo", "study.pack",
            "data.pystdlib.prepare", "data.openwebtext.prepare", "data.c4.prepare", "data.countdown.prepare"} <= names
    for entry in entries:
        _, _, parser = fuzzing.parser_of(entry)
        assert parser.__class__.__module__ == "cli" or entry.name == "train", f"{entry.name}: parse with cli.Parser"


def all_tries(world):
    return [(entry, label, argv) for entry in fuzzing.entry_points() for label, argv in fuzzing.tries(entry, world)]


def run(world, chosen, limit: float):
    problems = []
    runner = fuzzing.Runner()
    try:
        for entry, label, argv, *environment in chosen:
            outcome = runner.run(entry, label, argv, world, limit, *environment)
            problem = outcome.problem()
            if problem:
                problems.append(f"{label}: {problem}\n    argv: {argv}\n    stderr: {outcome.stderr[-1500:]}")
    finally:
        runner.close()
    assert not problems, f"{len(problems)} of {len(chosen)} tries went wrong:\n" + "\n".join(problems)


def test_a_sample_of_hostile_values_for_every_command(world):
    # CI's share: for every command, tries its parser refuses at once, and among all commands a few that get past
    # the parser and run (stopped at a short limit as Ctrl-C would stop them, which they must end as it does)
    rng = random.Random(SEED)
    refused, accepted = [], []
    for entry in fuzzing.entry_points():
        mine = [(entry, label, argv) for label, argv in fuzzing.tries(entry, world)]
        rng.shuffle(mine)
        refused += [t for t in mine if fuzzing.refused_at_parsing(t[0], t[2])][:CI_TRIES_PER_COMMAND]
        accepted += [t for t in mine if not fuzzing.refused_at_parsing(t[0], t[2])][:1]
    run(world, refused, limit=30)
    run(world, rng.sample(accepted, min(CI_ACCEPTED, len(accepted))), limit=8)


def test_environment_variables_left_behind_for_train(world):
    # a torchrun job's RANK in a shell, a partial launch, an unknown WANDB_MODE: one error line or success
    entries = {e.name: e for e in fuzzing.entry_points()}
    chosen = [(entries["train"], label, argv, env)  # (train.py reads all three; every command: -m slow)
              for label, argv, env in fuzzing.environment_tries(entries["train"], world)]
    run(world, chosen, limit=30)


@pytest.mark.slow
def test_every_hostile_value_for_every_option_of_every_command(world):
    run(world, all_tries(world), limit=120)


@pytest.mark.slow
def test_every_command_under_every_environment_left_behind(world):
    run(world, [(e, label, argv, env) for e in fuzzing.entry_points() for label, argv, env in
                fuzzing.environment_tries(e, world)], limit=120)
