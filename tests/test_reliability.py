"""Reliability: crash-safe checkpoints, bit-exact resume, the NaN guard, restarts, bad inputs."""

import dataclasses
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from adams_optim import OPTIMIZERS

import checkpoint
import train
from errors import UserError
from scripts import sweep
from tests import faults
from tests.helpers import cli_args, losses, lr_for, per_optimizer, read_metrics, tiny_config
from tokens import write_tokens

REPO = Path(__file__).resolve().parents[1]


def subprocess_env(faults: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ADAMS_GPT_FAULTS")}
    if faults:
        env["ADAMS_GPT_FAULTS"] = faults
    return env


def run_train_process(cfg, faults: str = "", timeout=300) -> subprocess.CompletedProcess:
    """train.py in a new process; with faults, through the fault-injecting launcher tests/faults.py."""
    entry = ["-m", "tests.faults"] if faults else ["train.py"]
    return subprocess.run([sys.executable, *entry, *cli_args(cfg)], cwd=REPO, capture_output=True, text=True,
                          env=subprocess_env(faults), timeout=timeout)





def assert_same_losses(a_dir, b_dir):
    """Every iteration logged by both, each loss within 1e-6 relative (a few float32 ulps).

    Exactness is what assert_same_final_state checks, bit for bit. The logged loss is a mean over
    the batch's tokens, and two processes can sum it in a different order (a vectorised reduction
    can depend on where its buffer sits): once, two fresh runs, before any resume, logged 4.831209
    and 4.831210 at one iteration while every loss after the next matched bit for bit, as differing weights would not.
    """
    a, b = losses(a_dir), losses(b_dir)
    assert a.keys() == b.keys()
    assert a == pytest.approx(b, rel=1e-6, abs=0)


def assert_same_tensors(a, b, where="state"):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same_tensors(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_same_final_state(dir_a, dir_b):
    a, b = checkpoint.load(dir_a), checkpoint.load(dir_b)
    assert a["iter_num"] == b["iter_num"]
    assert_same_tensors(a["model"], b["model"], "model")
    assert_same_tensors(a["optimizer"], b["optimizer"], "optimizer")


# --- checkpoint files ------------------------------------------------------------------------------

def test_save_keeps_the_last_k_and_points_latest_at_the_newest(tmp_path):
    for it in (10, 20, 30, 40):
        checkpoint.save(tmp_path, {"iter_num": it, "model": {}, "model_args": {}}, keep=3)
    assert [p.name for p in checkpoint.checkpoints(tmp_path)] == ["ckpt_00000020.pt", "ckpt_00000030.pt", "ckpt_00000040.pt"]
    assert (tmp_path / "checkpoints" / "latest").read_text() == "ckpt_00000040.pt"
    assert checkpoint.load(tmp_path)["iter_num"] == 40
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.endswith(".tmp")]


def test_leftover_temporary_files_and_a_missing_pointer_are_handled(tmp_path):
    checkpoint.save(tmp_path, {"iter_num": 10, "model": {}, "model_args": {}})
    folder = tmp_path / "checkpoints"
    (folder / ".ckpt_00000020.pt.123.tmp").write_bytes(b"half a checkpoint")  # a crash mid-write
    (folder / "latest").unlink()  # a crash between the rename and the pointer update
    assert checkpoint.latest(tmp_path).name == "ckpt_00000010.pt"
    assert checkpoint.load(tmp_path)["iter_num"] == 10


def test_prefixes_from_compile_and_ddp_are_stripped():
    state = {"_orig_mod.transformer.wte.weight": 1, "module._orig_mod.lm_head.weight": 2, "module.x": 3}
    assert checkpoint.clean_state_dict(state) == {"transformer.wte.weight": 1, "lm_head.weight": 2, "x": 3}


# --- bit-exact resume ----------------------------------------------------------------------------------

def exact_config(data_dir, out_dir, name, **overrides):
    values = dict(optimizer=name, learning_rate=lr_for(name), min_lr=lr_for(name) / 10, dropout=0.1,
                  gradient_accumulation_steps=2, max_iters=8, eval_interval=4, lr_decay_iters=8)
    values.update(overrides)
    return tiny_config(data_dir, out_dir, **values)


# AdamS and AdamW resume bit-exactly in a new process in the two SIGKILL tests below too
@pytest.mark.parametrize("name", per_optimizer(OPTIMIZERS, ("adam_mini",)))
def test_resume_in_a_new_process_is_bit_exact(name, data_dir, tmp_path):
    whole = exact_config(data_dir, tmp_path / "whole", name)
    train.main(whole)
    first_half = exact_config(data_dir, tmp_path / "halves", name, max_iters=4)
    train.main(first_half)
    second_half = exact_config(data_dir, tmp_path / "halves", name, init_from="resume")
    result = run_train_process(second_half)
    assert result.returncode == 0, result.stderr[-2000:]
    assert_same_losses(second_half.out_dir, whole.out_dir)
    assert_same_final_state(whole.out_dir, second_half.out_dir)


def test_sigkill_during_a_checkpoint_write_then_resume_is_exact(data_dir, tmp_path):
    whole = exact_config(data_dir, tmp_path / "whole", "adams", max_iters=12, lr_decay_iters=12)
    train.main(whole)
    killed = exact_config(data_dir, tmp_path / "killed", "adams", max_iters=12, lr_decay_iters=12, init_from="auto")
    result = run_train_process(killed, faults="kill_in_save@8")
    assert result.returncode == -signal.SIGKILL
    folder = Path(killed.out_dir) / "checkpoints"
    assert [p.name for p in checkpoint.checkpoints(killed.out_dir)] == ["ckpt_00000004.pt"]
    assert any(p.name.endswith(".tmp") for p in folder.iterdir()), "the write was interrupted midway"
    result = run_train_process(killed)  # init_from=auto resumes from iteration 4
    assert result.returncode == 0, result.stderr[-2000:]
    assert_same_losses(killed.out_dir, whole.out_dir)
    assert_same_final_state(whole.out_dir, killed.out_dir)


def test_sigkill_at_a_random_moment_then_resume_is_exact(data_dir, tmp_path):
    whole = exact_config(data_dir, tmp_path / "whole", "adamw", max_iters=40, eval_interval=5, lr_decay_iters=40,
                         log_interval=1)
    start = time.time()
    train.main(whole)
    duration = time.time() - start
    victim = exact_config(data_dir, tmp_path / "victim", "adamw", max_iters=40, eval_interval=5, lr_decay_iters=40,
                          log_interval=1, init_from="auto")
    proc = subprocess.Popen([sys.executable, "train.py", *cli_args(victim)], cwd=REPO, env=subprocess_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # A random iteration, then a random moment within the one after it (now and then a checkpoint write).
    # Counting iterations, not seconds: on a loaded machine a sleep could outlast the run's last step.
    rng = random.Random(os.getpid())
    target, log = rng.randint(1, 30), Path(victim.out_dir) / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        logged = re.findall(r'"kind": "train", "iter": (\d+)', log.read_text()) if log.exists() else []
        if logged and int(logged[-1]) >= target:
            break
        time.sleep(0.02)
    time.sleep(rng.uniform(0, duration / 40))
    assert proc.poll() is None, "the run finished before the kill; make it longer"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = max((r["iter"] for r in read_metrics(victim.out_dir)[0]), default=0)
    assert target <= done < 40, f"the kill did not land mid-run (target iteration {target}, logged {done})"
    result = run_train_process(victim)
    assert result.returncode == 0, result.stderr[-2000:]
    assert_same_losses(victim.out_dir, whole.out_dir)
    assert_same_final_state(whole.out_dir, victim.out_dir)


def test_torchrun_restart_after_a_crash_finishes_with_the_same_losses(data_dir, tmp_path):
    # One worker: torchrun's restart and init_from=auto's resume are what is under test. (With two
    # gloo workers, the restarted round's connectFullMesh failed or hung now and then on a loaded
    # 2-core machine, inside init_process_group.)
    common = dict(max_iters=8, eval_interval=4, lr_decay_iters=8, gradient_accumulation_steps=2, optimizer="adams",
                  dropout=0.1)
    single = tiny_config(data_dir, tmp_path / "single", **common)
    train.main(single)
    restarted = tiny_config(data_dir, tmp_path / "restarted", init_from="auto", **common)
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "--max-restarts=1",
         "-m", "tests.faults", *cli_args(restarted)], cwd=REPO, capture_output=True, text=True,
        env=subprocess_env("crash@6"),
        timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "injected crash at iteration 6" in result.stderr  # it really crashed once
    assert "resuming from iteration 4" in result.stdout
    assert_same_losses(restarted.out_dir, single.out_dir)
    assert_same_final_state(single.out_dir, restarted.out_dir)


# --- non-finite loss and gradients ---------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["nan_loss", "inf_loss", "nan_grad", "inf_grad"])
def test_a_nonfinite_step_is_skipped_and_changes_nothing(fault, data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=3, keep_checkpoints=3)
    with faults.injected(f"{fault}@3"):
        summary = train.main(cfg)
    assert summary["skipped_steps"] == 1
    before = checkpoint.load_file(checkpoint.checkpoints(cfg.out_dir)[0])  # iteration 3, before the bad step
    after = checkpoint.load(cfg.out_dir)  # iteration 4, after it
    assert (before["iter_num"], after["iter_num"]) == (3, 4)
    assert_same_tensors(before["model"], after["model"], "model")
    # the optimizer's state, step counts included (param_groups' lr follows the schedule regardless)
    assert_same_tensors(before["optimizer"]["state"], after["optimizer"]["state"], "optimizer")
    train_lines, _ = read_metrics(cfg.out_dir)
    assert [r["skipped_steps"] for r in train_lines] == [0, 0, 0, 1]


def test_zero_skips_allowed_stops_at_the_first_and_saves_nothing_bad(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=8, eval_interval=4, max_consecutive_skips=0)
    with faults.injected("nan_loss@5"), pytest.raises(UserError, match="iteration 5: the loss is nan; stopping after 1 "):
        train.main(cfg)
    assert [p.name for p in checkpoint.checkpoints(cfg.out_dir)] == ["ckpt_00000004.pt"]
    # the log says so in its last line, which a sweep reads as a finished point at inf; the curves leave it out
    last = json.loads((Path(cfg.out_dir) / "metrics.jsonl").read_text().splitlines()[-1])
    assert last == {"kind": "diverged", "iter": 6, "reason": "the loss is nan"}
    assert sweep.final_val_loss(Path(cfg.out_dir)) == (math.inf, True)
    train_lines, evals = read_metrics(cfg.out_dir)
    assert [r["iter"] for r in train_lines] == [1, 2, 3, 4, 5] and [r["iter"] for r in evals] == [0, 4]


def test_resuming_a_diverged_run_drops_its_mark(data_dir, tmp_path):
    # resumed from the checkpoint before the bad step (here without the fault: as if at a lower lr), it runs to the end
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=8, eval_interval=4, max_consecutive_skips=0)
    with faults.injected("nan_loss@4"), pytest.raises(UserError, match="iteration 4: the loss is nan"):
        train.main(cfg)
    assert sweep.final_val_loss(Path(cfg.out_dir)) == (math.inf, True)
    train.main(dataclasses.replace(cfg, init_from="resume"))
    loss, finished = sweep.final_val_loss(Path(cfg.out_dir))
    assert finished and math.isfinite(loss)
    assert all(json.loads(line)["kind"] != "diverged" for line in (Path(cfg.out_dir) / "metrics.jsonl").read_text().splitlines())


def test_too_many_consecutive_skips_abort(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=8, max_consecutive_skips=2)
    with faults.injected("inf_grad@2,inf_grad@3,inf_grad@4"), \
            pytest.raises(UserError, match="iteration 4: the gradient norm is .*after 3 non-finite step\\(s\\) in a row"):
        train.main(cfg)


# --- bad inputs: one clear line, exit code 2, nothing lost ---------------------------------------------

def run_cli(argv, capsys) -> tuple[int, str]:
    code = train.cli([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


def base_args(data_dir, out_dir, **overrides):
    cfg = tiny_config(data_dir, out_dir, max_iters=2, eval_interval=2, **overrides)
    return cli_args(cfg)


def make_dataset(root, name, train_tokens, val_tokens=None, vocab=256):
    write_tokens(root / name / "train.bin", train_tokens, vocab)
    write_tokens(root / name / "val.bin", train_tokens[:5000] if val_tokens is None else val_tokens, vocab)
    return root


def test_catalogue_unknown_key_in_a_config_file(tmp_path, capsys):
    (tmp_path / "c.py").write_text("learnig_rate = 1e-3\n")
    code, err = run_cli([tmp_path / "c.py"], capsys)
    assert code == 2 and "unknown config key 'learnig_rate'" in err and "did you mean 'learning_rate'" in err


@pytest.mark.parametrize("arg, message", [
    ("--learning_rate=-1", "'learning_rate' in the command line must be a finite number >= 0, got -1.0"),
    ("--beta1=1.0", "'beta1' in the command line must be a number in [0, 1), got 1.0"),
    ("--eps=-1e-8", "'eps' in the command line must be a finite number >= 0"),
    ("--optimizer=adamz", "must be one of adamw, adams, lion, adam_mini, sgd, adagrad, rmsprop, got 'adamz'"),
    ("--batch_size=1.5", "must be an integer >= 1, got 1.5"),
])
def test_catalogue_invalid_values(arg, message, data_dir, tmp_path, capsys):
    code, err = run_cli([*base_args(data_dir, tmp_path / "out"), arg], capsys)
    assert code == 2 and message in err


def test_catalogue_missing_dataset(data_dir, tmp_path, capsys):
    # a dataset with its own prepare script is told to run it; one without (such as a folder made
    # with another script's --out) is told how to make it, not to run a script that does not exist
    code, err = run_cli([*base_args(data_dir, tmp_path / "out"), "--dataset=openwebtext"], capsys)
    assert code == 2 and "does not exist; run python -m data.openwebtext.prepare first" in err
    code, err = run_cli([*base_args(data_dir, tmp_path / "out"), "--dataset=nowhere"], capsys)
    assert code == 2 and "does not exist and no data/nowhere/prepare.py makes it" in err
    assert f"--out {data_dir / 'nowhere'}" in err


def test_catalogue_truncated_token_file(tmp_path, capsys):
    root = make_dataset(tmp_path / "data", "cut", np.arange(20_000) % 256)
    path = root / "cut" / "train.bin"
    path.write_bytes(path.read_bytes()[:-7])
    code, err = run_cli(base_args(root, tmp_path / "out", dataset="cut"), capsys)
    assert code == 2 and "train.bin is" in err and "truncated or corrupt; regenerate it" in err


@pytest.mark.parametrize("offset, value, message", [(0, b"NANOGPT!", "bad magic"), (12, (4).to_bytes(4, "little"), "stores 4-byte tokens")])
def test_catalogue_wrong_magic_or_dtype(offset, value, message, tmp_path, capsys):
    root = make_dataset(tmp_path / "data", "bad", np.arange(20_000) % 256)
    path = root / "bad" / "val.bin"
    raw = bytearray(path.read_bytes())
    raw[offset:offset + len(value)] = value
    path.write_bytes(bytes(raw))
    code, err = run_cli(base_args(root, tmp_path / "out", dataset="bad"), capsys)
    assert code == 2 and message in err


def test_catalogue_token_id_beyond_the_vocabulary(tmp_path, capsys):
    root = make_dataset(tmp_path / "data", "big", np.arange(20_000) % 256)
    path = root / "big" / "train.bin"
    raw = bytearray(path.read_bytes())
    raw[32:] = np.full(20_000, 300, dtype=np.uint16).tobytes()  # ids the header's vocabulary forbids
    path.write_bytes(bytes(raw))
    code, err = run_cli(base_args(root, tmp_path / "out", dataset="big"), capsys)
    assert code == 2 and "token id 300" in err and "vocabulary is 256" in err


def test_catalogue_block_size_longer_than_the_validation_data(tmp_path, capsys):
    root = make_dataset(tmp_path / "data", "short", np.arange(20_000) % 256, val_tokens=np.arange(20) % 256)
    code, err = run_cli(base_args(root, tmp_path / "out", dataset="short"), capsys)
    assert code == 2 and "val.bin has 20 tokens, too few for block_size=32" in err


def test_catalogue_accumulation_not_divisible_by_world_size(data_dir, tmp_path, capsys, monkeypatch):
    import configurator

    with pytest.raises(UserError, match="gradient_accumulation_steps=3 is not divisible by the world size 2"):
        configurator.check(tiny_config(data_dir, tmp_path, gradient_accumulation_steps=3), world_size=2)


def test_catalogue_out_dir_not_writable(data_dir, tmp_path, capsys):
    (tmp_path / "a_file").write_text("not a folder")
    code, err = run_cli(base_args(data_dir, tmp_path / "a_file" / "out"), capsys)
    assert code == 2 and "is not writable" in err and "choose another --out_dir" in err


def test_catalogue_corrupted_checkpoint_is_refused_and_left_alone(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(base_args(data_dir, out), capsys)[0] == 0
    path = checkpoint.latest(out)
    path.write_bytes(path.read_bytes()[:1000])
    before = path.read_bytes(), (out / "metrics.jsonl").read_bytes()
    code, err = run_cli([*base_args(data_dir, out), "--init_from=resume", "--max_iters=4"], capsys)
    assert code == 2 and f"checkpoint {path} is corrupt" in err
    assert (path.read_bytes(), (out / "metrics.jsonl").read_bytes()) == before


def test_catalogue_checkpoint_of_another_model_shape(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(base_args(data_dir, out), capsys)[0] == 0
    code, err = run_cli([*base_args(data_dir, out, n_layer=3), "--init_from=resume"], capsys)
    assert code == 2 and "holds a run with n_layer=2; n_layer=3 cannot continue it. Drop --n_layer" in err


def test_catalogue_fresh_run_over_an_existing_one_needs_overwrite(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(base_args(data_dir, out), capsys)[0] == 0
    code, err = run_cli(base_args(data_dir, out), capsys)
    assert code == 2 and "already holds a train.py run" in err and "--overwrite=True" in err
    assert run_cli([*base_args(data_dir, out), "--overwrite=True"], capsys)[0] == 0
    assert [r["iter"] for r in read_metrics(out)[0]] == [1, 2]  # the old log was replaced, not appended to


# --- what limits a run from outside: cgroup memory limits, the kernel's out-of-memory killer ---------------------


def write_cgroup(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_cgroup_v1_and_v2_limits_over_the_process_are_read(tmp_path):
    import data_parallel

    gib = 1 << 30
    # docker on a cgroup v1 host: the container sees its own memory group at the mount's root
    v1 = tmp_path / "v1"
    write_cgroup(v1, {"memory/memory.limit_in_bytes": f"{2 * gib}\n", "memory/memory.usage_in_bytes": f"{gib}\n"})
    (tmp_path / "cgroup_v1").write_text("4:memory:/docker/0123abcd\n1:cpu:/docker/0123abcd\n0::/\n")
    assert data_parallel.cgroup_limits(v1, tmp_path / "cgroup_v1") == [(2 * gib, gib, str(v1 / "memory/memory.limit_in_bytes"))]
    # a batch scheduler's nested v2 groups: the job's own group has no limit ("max"), the one above it has
    v2 = tmp_path / "v2"
    write_cgroup(v2, {"jobs/42/memory.max": "max\n", "jobs/42/memory.current": "100\n", "jobs/memory.max": f"{3 * gib}\n",
                      "jobs/memory.current": f"{gib}\n"})
    (tmp_path / "cgroup_v2").write_text("0::/jobs/42\n")
    assert data_parallel.cgroup_limits(v2, tmp_path / "cgroup_v2") == [(3 * gib, gib, str(v2 / "jobs/memory.max"))]
    # v1's "unlimited" is no limit
    write_cgroup(v1, {"memory/memory.limit_in_bytes": "9223372036854771712\n"})
    assert data_parallel.cgroup_limits(v1, tmp_path / "cgroup_v1") == []


def test_a_batch_beyond_a_cgroup_v1_limit_is_refused_naming_the_limit(data_dir, tmp_path, monkeypatch):
    # before: only /proc/meminfo and cgroup v2's memory.max were read, so under a v1 limit the run passed the check and
    # the kernel killed it ("Killed", exit 137, no line)
    import data_parallel

    limit = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    monkeypatch.setattr(data_parallel, "cgroup_limits", lambda: [(64 << 20, 60 << 20, limit)])
    cfg = tiny_config(data_dir, tmp_path / "run", batch_size=256)
    with pytest.raises(UserError, match=rf"GiB are free \(the memory limit in {limit}\); lower batch_size"):
        train.main(cfg)
    assert not (tmp_path / "run").exists()


def test_a_run_killed_without_a_word_is_explained_on_the_next_command(data_dir, tmp_path, capsys):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=20, eval_interval=5)
    run_train_process(cfg, faults="kill@12")  # SIGKILL, as the out-of-memory killer sends it
    last = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["kind"] != "stopped"  # the killed process could not say why
    capsys.readouterr()
    train.main(dataclasses.replace(cfg, init_from="resume"))
    said = capsys.readouterr().out
    assert re.search(r"note: the run in out_dir '.*' ended at iteration 1[0-2] without a word: it was killed from "
                     r"outside, most likely by the kernel's out-of-memory killer", said), said
    # a run stopped by Ctrl-C (or an error) says so in its log, and is not taken for a killed one
    interrupted = tiny_config(data_dir, tmp_path / "int", max_iters=20, eval_interval=5)
    result = run_train_process(interrupted, faults="interrupt@12")
    assert result.returncode == 130
    last = json.loads((tmp_path / "int" / "metrics.jsonl").read_text().splitlines()[-1])
    assert (last["kind"], last["reason"]) == ("stopped", "interrupted")
    capsys.readouterr()
    train.main(dataclasses.replace(interrupted, init_from="resume"))
    assert "without a word" not in capsys.readouterr().out


# --- a file's contents are inputs too -------------------------------------------------------------------------


@pytest.mark.parametrize("content, says", [
    ('{"batch_size": 4, "max_iters": 7}', None),  # a JSON config is applied
    ("x = 1\n", "unknown config key 'x'"),
    ("import os\n", "sets no key"),
    ("import sys\nsys.exit(0)\n", r"called exit\(0\) while it was read"),
    ("raise ValueError('boom')\n", "failed to run: ValueError: boom"),
    ('[1, 2]', "holds a JSON list, not an object of keys"),
    ('{"batch_size": ', "is not readable JSON"),
])
def test_a_config_files_contents_are_applied_or_refused_in_one_line(content, says, tmp_path):
    # before: a JSON file was run as Python and set nothing (the defaults, silently); sys.exit(0) ended train.py, exit 0
    import configurator

    path = tmp_path / ("cfg.json" if content.startswith(("{", "[")) else "cfg.py")
    path.write_text(content)
    if says is None:
        assert configurator.load([str(path)]).batch_size == 4
        return
    with pytest.raises(UserError, match=says):
        configurator.load([str(path)])


@pytest.mark.parametrize("damage, says", [
    ("a stray line", "line 2 is not JSON"),
    ("binary", "is not text"),
    ("deep nesting", "line 2 is not JSON"),
    ("a string for a number", "val_loss is 'low', not a number"),
])
def test_a_run_logs_damaged_contents_are_one_line_in_every_reader(damage, says, data_dir, tmp_path):
    # before: tracebacks in train.py's resume, plot_curves and sweep --summarize
    from scripts import plot_curves

    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=2)
    train.main(cfg)
    log = tmp_path / "run" / "metrics.jsonl"
    lines = log.read_text().splitlines()
    bad = {"a stray line": "not json at all", "binary": None, "deep nesting": "[" * 100_000 + "]" * 100_000,
           "a string for a number": json.dumps(dict(kind="eval", iter=2, val_loss="low"))}[damage]
    if bad is None:
        log.write_bytes(b"\xff\xfe\x00" + log.read_bytes())
    else:
        log.write_text("\n".join([lines[0], bad, *lines[1:]]) + "\n")
    with pytest.raises(UserError, match=says):
        plot_curves.main([str(tmp_path / "run"), "--out", str(tmp_path / "fig")])
    with pytest.raises(UserError, match=says):
        sweep.final_val_loss(tmp_path / "run")


def test_a_run_configs_damaged_contents_are_one_line(data_dir, tmp_path):
    import metrics

    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2)
    train.main(cfg)
    path = tmp_path / "run" / "config.json"
    saved = json.loads(path.read_text())
    saved["config"]["max_iters"] = "twenty"
    path.write_text(json.dumps(saved))
    with pytest.raises(UserError, match=r"config key 'max_iters' in .*config.json must be"):
        metrics.run_config(tmp_path / "run")


@pytest.mark.parametrize("damage, says", [
    ("model_args extra", r"model_args \['surprise'\] that a gpt2 model does not take"),
    ("model_type unknown", "model_type 'mamba', which this project does not build"),
    ("no rng", "has no rng of the kind train.py writes"),
    ("empty optimizer", "holds no optimizer state after 4 iterations"),
    ("wrong shape", "does not fit the run it belongs to"),
])
def test_a_checkpoint_whose_fields_are_not_train_pys_is_refused_naming_it(damage, says, data_dir, tmp_path):
    # before: TypeError, KeyError or RuntimeError tracebacks; an empty optimizer state resumed from zero momentum
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=4)
    train.main(cfg)
    path = checkpoint.latest(tmp_path / "run")
    state = torch.load(path, weights_only=True)
    if damage == "model_args extra":
        state["model_args"]["surprise"] = 1
    elif damage == "model_type unknown":
        state["model_type"] = "mamba"
    elif damage == "no rng":
        del state["rng"]
    elif damage == "empty optimizer":
        state["optimizer"]["state"] = {}
    else:
        key = next(k for k in state["model"] if k.endswith("c_fc.weight"))
        state["model"][key] = state["model"][key][:-1]
    torch.save(state, path)
    with pytest.raises(UserError, match=says):
        train.main(dataclasses.replace(cfg, init_from="resume", max_iters=6))
    if damage in ("model_args extra", "model_type unknown", "wrong shape"):  # the readers of weights alike
        import export

        with pytest.raises(UserError, match="checkpoint"):
            export.export(tmp_path / "run", tmp_path / "hf", overwrite=False)


@pytest.mark.parametrize("environment, says", [
    (dict(RANK="0"), "RANK is set in the environment but LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT are not"),
    (dict(RANK="1"), "RANK is set in the environment but"),  # (its error line used to be silenced: not rank 0)
    (dict(RANK="x", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="1"), "must be numbers"),
    (dict(WANDB_MODE="garbage"), "WANDB_MODE='garbage' is not a mode wandb knows"),
])
def test_environment_variables_the_project_reads_are_checked(environment, says, data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, wandb_log="WANDB_MODE" in environment)
    env = {k: v for k, v in subprocess_env().items() if k not in ("WANDB_MODE", "TORCHELASTIC_RUN_ID")}
    result = subprocess.run([sys.executable, "train.py", *cli_args(cfg)], cwd=REPO, capture_output=True, text=True,
                            env={**env, **environment}, timeout=120)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2 and len(errors) == 1 and says in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()


def test_a_token_file_that_is_a_folder_is_not_called_missing(data_dir, tmp_path):
    import shutil

    shutil.copytree(data_dir / "tiny", tmp_path / "data" / "tiny")
    (tmp_path / "data" / "tiny" / "train.bin").unlink()
    (tmp_path / "data" / "tiny" / "train.bin").mkdir()
    with pytest.raises(UserError, match=r"train.bin is a folder; the dataset folder needs train.bin and val.bin as files"):
        train.main(tiny_config(tmp_path / "data", tmp_path / "run"))


def test_a_nanogpt_uint32_token_file_is_detected_not_read_as_uint16(tmp_path):
    import tokens

    np.arange(5000, dtype=np.uint32).tofile(tmp_path / "u32.bin")
    with pytest.raises(UserError, match="looks like uint32 tokens.*pass --dtype uint32"):
        tokens.convert(tmp_path / "u32.bin", tmp_path / "out.bin", 50257)
    tokens.convert(tmp_path / "u32.bin", tmp_path / "out.bin", 50257, dtype="uint32")
    assert tokens.read_tokens(tmp_path / "out.bin")[0][:5].tolist() == [0, 1, 2, 3, 4]


def test_a_corrupt_parquet_input_is_one_line(tmp_path):
    from data.text import load_local

    bad = tmp_path / "docs.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(UserError, match="is not a readable parquet file"):
        load_local([bad])


def test_a_checkpoint_exceptions_ranks_tracebacks_become_one_cause():
    # torch.distributed.checkpoint's CheckpointException carries every rank's traceback as its text
    from torch.distributed.checkpoint.api import CheckpointException, _wrap_exception

    try:
        raise FileNotFoundError("shard 3 is gone")
    except FileNotFoundError as e:
        wrapped = _wrap_exception(e)
    said = checkpoint.cause(CheckpointException("load", {0: wrapped}))
    assert said == "FileNotFoundError: shard 3 is gone" and "Traceback" not in said
