"""What a run says before and while it trains (reporting.py), and --smoke=True, which shrinks any config in
config/ to a CPU run of a minute or two (configurator.smoke)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import configurator
import reporting
import train
from tests.helpers import tiny_config

REPO = Path(__file__).resolve().parents[1]
# every config file train.py runs (torchtitan_llama2.py is torchtitan's; recipes.py and __init__.py are code)
CONFIGS = sorted(str(p.relative_to(REPO)) for p in (REPO / "config").rglob("*.py")
                 if p.name not in ("__init__.py", "recipes.py", "torchtitan_llama2.py"))
SAMPLED = ("config/train_gpt2_small_adams.py", "config/train_llama2_7b_adamw.py")  # CI runs these; -m slow the rest


def test_a_paper_config_shrunk_by_hand_warns_that_it_ends_in_warmup_and_mostly_evaluates():
    # issue 125's command: GPT-2 Small's config with a 2-layer model and 20 iterations, which keeps the paper's
    # 2,000 warmup iterations and 200 evaluation batches of 1,024 tokens
    cfg = configurator.load(["config/train_gpt2_small_adams.py", "--n_layer=2", "--n_head=2", "--n_embd=64",
                             "--batch_size=2", "--gradient_accumulation_steps=1", "--max_iters=20", "--device=cpu",
                             "--dtype=float32", "--compile=False"])
    lines = reporting.warnings(cfg, train_tokens=10**9, tokens_per_iter=2 * 1024, start=0)
    assert len(lines) == 2
    assert lines[0].startswith("the run ends inside its warmup (max_iters=20 <= warmup_iters=2000): the lr never "
                               "reaches its peak 0.0006")
    # 2 x 200 batches x 2 x 1,024 tokens forward = 819,200 against 20 steps x 2,048 tokens x 3 = 122,880
    assert lines[1].startswith("each evaluation (400 batches) costs more than the training between two (20 steps)")


def test_the_embedded_default_and_a_smoke_run_warn_of_nothing():
    for cfg in (configurator.load([]), configurator.load(["config/train_gpt2_small_adams.py", "--smoke=True"])):
        tokens = cfg.batch_size * cfg.block_size * cfg.gradient_accumulation_steps
        assert reporting.warnings(cfg, train_tokens=10**7, tokens_per_iter=tokens, start=0) == []


def test_a_run_on_data_smaller_than_a_batch_says_so_before_its_first_step(data_dir, tmp_path, capsys):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2, warmup_iters=5, lr_decay_iters=5)
    assert reporting.warnings(cfg, train_tokens=100, tokens_per_iter=256, start=0)[-1] == (
        "the training data (100 tokens) is smaller than one batch (256 tokens): every step sees all of it; "
        "prepare more data or lower batch_size")
    train.main(cfg)
    out = capsys.readouterr().out
    assert "warning: the run ends inside its warmup (max_iters=2 <= warmup_iters=5)" in out
    assert out.index("warning: the run ends inside its warmup") < out.index("iter 0: val loss")
    assert "one evaluation takes" in out


def test_smoke_shrinks_a_paper_config_says_what_it_changed_and_keeps_the_command_lines_keys(capsys):
    cfg, explicit = configurator.load_explicit(["config/train_llama2_7b_adamw.py", "--smoke=True", "--max_iters=30",
                                                "--lr_decay_iters=30"])
    line = capsys.readouterr().out.strip()
    assert line.startswith("smoke run: dataset=pystdlib, n_layer=2, n_head=2, n_embd=64, block_size=64, batch_size=8,")
    assert "max_iters" not in line and (cfg.max_iters, cfg.lr_decay_iters) == (30, 30)  # the command line won
    assert line.endswith("out_dir=out/train_llama2_7b_adamw_smoke (the command line's keys kept)")
    # the optimizer, its hyperparameters and the schedule's shape are the paper config's
    assert (cfg.model, cfg.optimizer, cfg.learning_rate, cfg.eps, cfg.decay_shape) == ("llama", "adamw", 3e-4, 1e-5, "linear")
    assert (cfg.device, cfg.fsdp, cfg.compile, cfg.dtype, cfg.warmup_iters) == ("cpu", False, False, "float32", 6)
    assert {"smoke", "max_iters", "n_layer"} <= explicit
    assert configurator.load(["--smoke=True", "--out_dir=mine"]).out_dir == "mine"


def test_every_train_config_is_listed():
    assert len(CONFIGS) >= 30 and set(SAMPLED) <= set(CONFIGS)


@pytest.mark.parametrize("config", [pytest.param(c, marks=() if c in SAMPLED else pytest.mark.slow) for c in CONFIGS])
def test_every_config_finishes_as_a_smoke_run_on_a_cpu(config, tmp_path):
    result = subprocess.run([sys.executable, "train.py", config, "--smoke=True", f"--out_dir={tmp_path / 'run'}"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("smoke run: ") and "iter 60: val loss" in result.stdout
    assert "warning:" not in result.stdout
