"""The training loop end to end on CPU: every optimizer, the schedule, batches, errors, DDP."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from adams_optim import OPTIMIZERS

import checkpoint
import dataset
import train
from configurator import TrainConfig
from errors import UserError
from tests.helpers import cli_args, lr_for, per_optimizer, read_metrics, start_together, tiny_config

REPO = Path(__file__).resolve().parents[1]
# a learning rate that trains the tiny model for each optimizer (Lion wants ~10x less than AdamW)








def test_lr_schedule_is_warmup_then_cosine():
    cfg = TrainConfig(learning_rate=1.0, min_lr=0.1, warmup_iters=10, lr_decay_iters=110)
    assert train.get_lr(0, cfg) == pytest.approx(1 / 11)
    assert train.get_lr(9, cfg) == pytest.approx(10 / 11)
    assert train.get_lr(10, cfg) == pytest.approx(1.0)
    assert train.get_lr(60, cfg) == pytest.approx(0.55)  # halfway: the mean of max and min
    assert train.get_lr(110, cfg) == pytest.approx(0.1)
    assert train.get_lr(10_000, cfg) == pytest.approx(0.1)
    assert train.get_lr(5, TrainConfig(decay_lr=False, learning_rate=0.3)) == 0.3


def test_batches_depend_only_on_seed_iteration_and_index():
    tokens = np.arange(10_000, dtype=np.uint16)
    args = dict(batch_size=4, block_size=16, vocab_size=10_000, device=torch.device("cpu"))
    x1, y1 = dataset.get_batch(tokens, 1, dataset.TRAIN, 7, 3, **args)
    x2, y2 = dataset.get_batch(tokens, 1, dataset.TRAIN, 7, 3, **args)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(y1[:, :-1], x1[:, 1:])  # targets are the inputs shifted by one
    assert not torch.equal(x1, dataset.get_batch(tokens, 1, dataset.TRAIN, 7, 4, **args)[0])
    assert not torch.equal(x1, dataset.get_batch(tokens, 1, dataset.TRAIN, 8, 3, **args)[0])
    assert not torch.equal(x1, dataset.get_batch(tokens, 1, dataset.EVAL_VAL, 7, 3, **args)[0])


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_optimizer_trains_logs_and_checkpoints(name, data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / name, optimizer=name, learning_rate=lr_for(name), min_lr=lr_for(name) / 10)
    train.main(cfg)
    train_lines, eval_lines = read_metrics(cfg.out_dir)
    assert [r["iter"] for r in train_lines] == list(range(1, 21))
    for r in train_lines:
        assert {"iter", "tokens", "lr", "train_loss", "grad_norm", "elapsed_s"} <= set(r)
        assert math.isfinite(r["train_loss"])
    assert [r["iter"] for r in eval_lines] == [0, 10, 20]
    assert {r["kind"] for r in train_lines} == {"train"} and {r["kind"] for r in eval_lines} == {"eval"}
    assert all({"val_loss", "eval_train_loss"} <= set(r) and "train_loss" not in r for r in eval_lines)
    assert train_lines[-1]["tokens"] == 20 * 8 * 32
    # the loss falls: from ln(256) = 5.5 at the start, clearly lower after 20 steps
    assert eval_lines[-1]["val_loss"] < eval_lines[0]["val_loss"] - 0.5, eval_lines
    state = checkpoint.load(cfg.out_dir)
    assert state["iter_num"] == 20 and state["config"]["optimizer"] == name
    json.loads((Path(cfg.out_dir) / "config.json").read_text())


def test_resume_continues_from_the_checkpoint(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=10, lr_decay_iters=20)
    train.main(cfg)
    resumed = tiny_config(data_dir, tmp_path / "run", max_iters=20, lr_decay_iters=20, init_from="resume")
    train.main(resumed)
    train_lines, _ = read_metrics(cfg.out_dir)
    assert [r["iter"] for r in train_lines] == list(range(1, 21))
    assert train_lines[10]["tokens"] == 11 * 8 * 32  # tokens seen carried over


def test_bfloat16_autocast_and_float16_gradscaler_run_on_cpu(data_dir, tmp_path):
    for dtype in ("bfloat16", "float16"):
        cfg = tiny_config(data_dir, tmp_path / dtype, dtype=dtype, max_iters=4, eval_interval=4)
        summary = train.main(cfg)
        assert math.isfinite(summary["val_loss"])


USER_ERRORS = [
    (["--learnig_rate=1e-3"], "error: unknown config key 'learnig_rate' in the command line (did you mean 'learning_rate'?)"),
    (["--dataset=nope", "--out_dir=OUT"], "error: dataset folder"),
    (["--optimizer=adamz"], f"error: config key 'optimizer' in the command line must be one of {', '.join(OPTIMIZERS)}, got 'adamz'"),
    (["--init_from=resume", "--out_dir=OUT"], "error: no checkpoint in"),
]


@pytest.fixture(scope="module")
def user_error_runs(tmp_path_factory):
    """The command lines of USER_ERRORS (OUT: a folder of their own) -> their train.py runs, started together."""
    commands = {}
    for args, _ in USER_ERRORS:
        out = tmp_path_factory.mktemp("out")
        commands[tuple(args)] = [sys.executable, "train.py", *[a.replace("OUT", str(out)) for a in args]]
    return start_together(commands, cwd=REPO, timeout=300)


@pytest.mark.parametrize("args, message", USER_ERRORS)
def test_user_errors_exit_non_zero_with_one_line(args, message, user_error_runs):
    result = user_error_runs[tuple(args)].result()
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(message)
    assert "Traceback" not in result.stderr


def test_fresh_run_refuses_to_overwrite_an_existing_run(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2)
    train.main(cfg)
    saved = checkpoint.latest(cfg.out_dir)
    before = saved.read_bytes(), (tmp_path / "run" / "metrics.jsonl").read_bytes()
    with pytest.raises(UserError, match="already holds a train.py run .*; continue it with --init_from=resume"):
        train.main(cfg)
    assert (saved.read_bytes(), (tmp_path / "run" / "metrics.jsonl").read_bytes()) == before





# DDP hands every rank's optimizer the same averaged gradient, so one optimizer stands for all in CI
@pytest.mark.parametrize("name", per_optimizer(OPTIMIZERS, representatives=("adams",)))
def test_two_ddp_processes_match_one_process_with_twice_the_accumulation(name, data_dir, tmp_path):
    common = dict(max_iters=6, eval_interval=6, gradient_accumulation_steps=2, optimizer=name,
                  learning_rate=lr_for(name), min_lr=lr_for(name) / 10)
    single = tiny_config(data_dir, tmp_path / "one", **common)
    train.main(single)
    ddp = tiny_config(data_dir, tmp_path / "two", **common)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py", *cli_args(ddp)],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    one, _ = read_metrics(single.out_dir)
    two, _ = read_metrics(ddp.out_dir)
    assert len(one) == len(two) == 6
    for a, b in zip(one, two):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    derived = json.loads((Path(ddp.out_dir) / "config.json").read_text())["derived"]
    assert derived["world_size"] == 2 and derived["micro_steps_per_rank"] == 1


@pytest.mark.parametrize("tokens", [0, 40])
def test_a_run_ends_with_a_sample_of_sample_tokens(tokens, data_dir, tmp_path, capsys):
    train.main(tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2, sample_tokens=tokens))
    out = capsys.readouterr().out
    assert "metrics: " in out and "checkpoint: " in out
    if not tokens:
        assert "--- sample ---" not in out
        return
    text = out.split("--- sample ---\n")[1].split("\n--------------")[0]
    # byte tokens: the prompt's newline, then 40 bytes, some of which may decode to U+FFFD or join into one character
    assert text.startswith("\n") and 1 < len(text) <= 41


def test_main_leaves_no_global_floating_point_state_behind(data_dir, tmp_path):
    import numpy as np

    train.main(tiny_config(data_dir, tmp_path / "run", max_iters=1, eval_interval=1))
    tiny = np.finfo(np.float32).tiny / 4  # a subnormal
    assert torch.tensor(tiny, dtype=torch.float32).item() != 0.0, "flush-to-zero leaked out of train.main"


def test_wandb_logging_works_offline(data_dir, tmp_path, offline_wandb):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=3, eval_interval=3, wandb_log=True, wandb_run_name="t")
    train.main(cfg)
    runs = list(offline_wandb.glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), "wandb wrote no offline run"


def test_embedding_lr_scale_holds_through_the_schedule(data_dir, tmp_path):
    # scale 0: the schedule gives the embedding lr 0 (so no step and no decay) at every iteration
    cfg = tiny_config(data_dir, tmp_path / "run", optimizer="adams", max_iters=4, eval_interval=2, keep_checkpoints=3,
                      embedding_lr_scale=0.0)
    train.main(cfg)
    first, last = (checkpoint.load_file(p)["model"] for p in checkpoint.checkpoints(cfg.out_dir)[-2:])
    assert torch.equal(first["transformer.wte.weight"], last["transformer.wte.weight"])
    assert not torch.equal(first["transformer.h.0.attn.c_attn.weight"], last["transformer.h.0.attn.c_attn.weight"])
    cfg2 = tiny_config(data_dir, tmp_path / "run", optimizer="adams", max_iters=6, eval_interval=2, init_from="resume")
    with pytest.raises(UserError, match="holds a run with embedding_lr_scale=0.0; embedding_lr_scale=1.0 cannot continue it"):
        train.main(cfg2, explicit={"embedding_lr_scale"})  # as --embedding_lr_scale=1 on the command line


@pytest.mark.parametrize("optimizer, max_iters, start", [("adams", 99, "a quarter"), ("adams", 100, "a quarter to half"),
                                                         ("adams", 199, "a quarter to half"), ("adams", 200, "half"),
                                                         ("adamw", 99, None)])
def test_the_run_is_described_in_tokens_per_parameter(optimizer, max_iters, start, tmp_path, capsys):
    # 4 x 8 x 64 = 2,048 tokens per iteration on a model of 1,024 parameters: 2 tokens per parameter per
    # iteration, so 100 iterations are 200 tokens per parameter, below which AdamS's note says a quarter of
    # AdamW's lr, and 200 are 400, from which it says half
    cfg = TrainConfig(optimizer=optimizer, max_iters=max_iters, gradient_accumulation_steps=4, batch_size=8, block_size=64)
    model = SimpleNamespace(num_params=lambda: 1024)
    derived = train.describe(cfg, {}, model, SimpleNamespace(world_size=1, device="cpu"), "float32", micro_steps=4)
    out = capsys.readouterr().out
    assert f"{max_iters:,} iterations = {2 * max_iters:.2f} tokens per parameter" in out
    assert derived["tokens_per_param"] == 2 * max_iters
    # what a run ran on, since the thread count and the CPU's kind change a run's last digits
    assert (derived["torch"], derived["threads"]) == (torch.__version__, torch.get_num_threads())
    cpuinfo = Path("/proc/cpuinfo")
    models = {line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
              if line.startswith("model name")} if cpuinfo.is_file() else set()
    model, isa = derived["hardware"].rsplit(", ", 1)
    assert isa == torch.backends.cpu.get_cpu_capability() and (model in models if models else model)
    notes = [line for line in out.splitlines() if line.startswith("note: AdamS")]
    assert notes == (["note: AdamS usually wants a lower lr than AdamW: start at a quarter to half of a tuned AdamW lr, "
                      "then scan x2 (README.md, 'AdamS in your own code')"] if optimizer == "adams" else [])
