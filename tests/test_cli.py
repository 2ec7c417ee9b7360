"""The command-line convention every script shares (cli.py): both spellings of an option, --help, run by path."""

import re
import sys
from pathlib import Path

import pytest

import cli
from scripts import denominator_moments, update_alignment
from tests.helpers import start_together

REPO = Path(__file__).resolve().parents[1]


def test_every_entry_point_takes_both_spellings_of_an_option_and_shows_defaults(capsys):
    # cli.Parser: --block_size and --block-size are one option; --help gives each option's default
    args = update_alignment.parse_args(["--block-size", "64", "--batch_size", "3"])
    assert (args.block_size, args.batch_size) == (64, 3)
    with pytest.raises(SystemExit):
        denominator_moments.main(["--help"])
    help_text = capsys.readouterr().out
    assert "--beta1 BETA1  " in help_text and "(default: 0.9)" in help_text  # one spelling shown where there is one


# every command, as the README runs it from the repository root: python -m scripts.NAME (here from an empty folder,
# with the root on PYTHONPATH as the root itself would put it, so that a command writing on --help shows)
BY_PATH = sorted(".".join(p.relative_to(REPO).with_suffix("").parts)
                 for p in [*REPO.glob("scripts/[a-z]*.py"), *REPO.glob("data/*/prepare.py")])


@pytest.fixture(scope="module")
def help_runs(tmp_path_factory):
    """command -> (its folder, the future of its --help run there), all started together."""
    import os

    folders = {name: tmp_path_factory.mktemp("help") for name in ["train.py", *BY_PATH]}
    env = dict(os.environ, PYTHONPATH=str(REPO))
    commands = {name: [sys.executable, str(REPO / name)] if name.endswith(".py") else [sys.executable, "-m", name]
                for name in folders}
    futures = start_together({name: [*command, "--help"] for name, command in commands.items()}, cwd=folders.get,
                             timeout=180, env=env)
    return {name: (folders[name], futures[name]) for name in folders}


@pytest.mark.parametrize("script", ["train.py", *BY_PATH])
def test_every_command_shows_its_help_and_writes_nothing(script, help_runs):
    # python train.py by its path from anywhere, and every other command as python -m NAME from the root
    folder, future = help_runs[script]
    result = future.result()
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage" in result.stdout.lower() or "keys (default, meaning)" in result.stdout, result.stdout[:500]
    assert not any(folder.iterdir()), "--help wrote files"
    flat = " ".join(result.stdout.split())  # argparse wraps the help: one line to search
    assert "(default: None)" not in flat  # an option without a default says what happens instead, or nothing
    assert not re.search(r"\(default:[^)]*\)[^-]*\(default:", flat), "an option shows its default twice"


def test_progress_in_a_log_is_plain_lines_from_the_first_item(capsys, monkeypatch):
    import time

    clock = iter(range(0, 1000, 10))  # each item takes 10 s
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    assert list(cli.progress(range(7), "steps", every=30)) == list(range(7))  # the items, unchanged
    lines = capsys.readouterr().err.splitlines()  # stderr is no terminal here: no bar, no carriage returns
    # the first item (a sign of life with an estimate), then every 30 s, then the end of a long loop
    assert lines == ["steps: 1/7, 10 s, about 60 s left", "steps: 4/7, 40 s, about 30 s left",
                     "steps: 7/7, 70 s"]
    assert list(cli.progress(iter("ab"), "unsized")) == ["a", "b"] and \
        capsys.readouterr().err.splitlines() == ["unsized: 1/?, 10 s"]  # (a short loop: one line)
