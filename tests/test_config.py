"""Config parsing: precedence, type coercion, and every error a user can make."""

import dataclasses
import json

import pytest

import configurator
from configurator import TrainConfig
from errors import UserError


def write(tmp_path, text, name="cfg.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_precedence_defaults_files_command_line(tmp_path):
    a = write(tmp_path, "batch_size = 4\nlearning_rate = 1e-3\n", "a.py")
    b = write(tmp_path, "batch_size = 8\n", "b.py")
    cfg = configurator.load([a, b, "--learning_rate=2e-3"])
    assert cfg.batch_size == 8  # the later file wins
    assert cfg.learning_rate == 2e-3  # the command line wins
    assert cfg.n_layer == TrainConfig().n_layer  # untouched defaults stay


def test_int_for_float_and_integral_float_for_int(tmp_path):
    cfg = configurator.load([write(tmp_path, "max_iters = 1e4\n"), "--learning_rate=1", "--compile=True"])
    assert cfg.max_iters == 10000 and isinstance(cfg.max_iters, int)
    assert cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)
    assert cfg.compile is True


def test_config_files_may_compute_and_import(tmp_path):
    path = write(tmp_path, "import math\n_per_gpu = 12\nbatch_size = _per_gpu\nwarmup_iters = int(math.sqrt(400))\n")
    cfg = configurator.load([path])
    assert cfg.batch_size == 12 and cfg.warmup_iters == 20


@pytest.mark.parametrize("argv, match", [
    (["--learnig_rate=1e-3"], "unknown config key 'learnig_rate' in the command line \\(did you mean 'learning_rate'\\?\\)"),
    (["--batch_size=four"], "'batch_size' in the command line must be an integer >= 1, got 'four'"),
    (["--max_iters=1.5"], "must be an integer >= 0, got 1.5"),
    (["--compile=yes"], "'compile' in the command line must be bool"),
    (["--batch_size"], "argument --batch_size/--batch-size: expected one argument"),
    (["missing.py"], "config file 'missing.py' does not exist"),
])
def test_command_line_errors(argv, match):
    with pytest.raises(UserError, match=match):
        configurator.load(argv)


def test_unknown_key_in_file_names_file_and_suggestion(tmp_path):
    path = write(tmp_path, "weight_decy = 0.1\n")
    with pytest.raises(UserError, match=f"unknown config key 'weight_decy' in config file '{path}' \\(did you mean 'weight_decay'\\?\\)"):
        configurator.load([path])


def test_file_that_raises_is_reported_in_one_line(tmp_path):
    with pytest.raises(UserError, match="failed to run: ZeroDivisionError"):
        configurator.load([write(tmp_path, "batch_size = 1 // 0\n")])


@pytest.mark.parametrize("overrides, world, match", [
    (dict(warmup_iters=100, lr_decay_iters=50), 1, "warmup_iters=100 is longer than lr_decay_iters=50"),
    (dict(min_lr=1e-2, learning_rate=1e-3), 1, "min_lr=0.01 is above learning_rate=0.001"),
    (dict(gradient_accumulation_steps=3), 2, "not divisible by the world size 2"),
    (dict(optimizer="adamz"), 1, "'optimizer' in the config must be one of adamw, adams, lion"),
    (dict(dtype="fp8"), 1, "'dtype' in the config must be one of auto, float32, bfloat16, float16, got 'fp8'"),
    (dict(beta2=1.0), 1, "beta2. in the config must be a number in \\[0, 1\\)"),
    (dict(learning_rate=-1.0, min_lr=-2.0), 1, "'learning_rate' in the config must be a finite number >= 0, got -1.0"),
    (dict(eps=-1e-8), 1, "'eps' in the config must be a finite number >= 0"),
    (dict(n_embd=100, n_head=3), 1, "n_embd=100 is not divisible by n_head=3"),
    (dict(batch_size=0), 1, "'batch_size' in the config must be an integer >= 1, got 0"),
])
def test_cross_field_checks(overrides, world, match):
    with pytest.raises(UserError, match=match):
        configurator.check(TrainConfig(**overrides), world_size=world)


def test_defaults_pass_their_own_checks():
    configurator.check(TrainConfig())
    json.dumps(configurator.as_dict(TrainConfig()))  # serialisable for config.json


def test_help_lists_every_key_with_its_default():
    text = configurator.usage()
    assert "python train.py [config/file.py ...] [--key=value ...]" in text
    for field in dataclasses.fields(TrainConfig):
        line = next(line for line in text.splitlines() if line.startswith(f"  --{field.name}="))
        assert eval(line.split("=", 1)[1].split("  ")[0]) == field.default, line
