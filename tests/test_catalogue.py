"""The catalogue of mistakes and faults (issue #114): across train.py, sample.py, export.py, the
sweep, data preparation and the optimizers, every user mistake ends in one `error:` line, a
non-zero exit and no traceback, and leaves every run folder, export and committed result exactly
as it was (compared byte for byte, file by file).

Each case is a row: what it breaks, the command, and the text its one line must hold. The
commands run in this process (their `main`), so the whole table takes seconds; the cases that
need a process of their own (Ctrl-C, torchrun, a second live writer) are at the end.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from adams_optim import AdamMini, AdamS, Lion

import checkpoint
import cli
import export
import folders
import metrics
import sample
import train
from data.openwebtext import prepare as owt_prepare
from scripts import sweep
from tests.helpers import cli_args, tiny_config
from tokens import write_tokens

REPO = Path(__file__).resolve().parents[1]


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``root``, by relative path: a folder's whole state."""
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def run_entry(entry, argv) -> tuple[int, str]:
    """(exit code, what it printed to stderr) of an entry point called in this process, through the error
    wrapper every command's ``__main__`` uses (cli.main)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = cli.main(entry, [str(a) for a in argv])
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
                code = 1
            else:
                code = e.code or 0
    return code, err.getvalue()


def assert_one_error_line(code: int, err: str, message: str) -> None:
    assert code not in (0, None), f"exit code {code}: {err}"
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert message in lines[0], lines[0]


# --- a finished run, an export of it, and data, shared by the cases (which must leave them unchanged) ---


@pytest.fixture(scope="module")
def world(data_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("catalogue")
    cfg = tiny_config(data_dir, root / "run", max_iters=4, eval_interval=2)
    train.main(cfg)
    export.export(cfg.out_dir, root / "hf")
    bad = root / "data"
    tokens = np.arange(20_000) % 256
    for name in ("cut", "nanogpt", "short"):
        write_tokens(bad / name / "train.bin", tokens, 256)
        write_tokens(bad / name / "val.bin", tokens[:5000] if name != "short" else tokens[:20], 256)
    cut = bad / "cut" / "train.bin"
    cut.write_bytes(cut.read_bytes()[:-7])
    (bad / "nanogpt" / "val.bin").write_bytes(tokens.astype(np.uint16).tobytes())  # nanoGPT's headerless format
    (root / "log_only").mkdir()
    (root / "log_only" / "metrics.jsonl").write_text('{"kind": "eval", "iter": 0, "val_loss": 5.5}\n')
    (root / "prompt.bin").write_bytes(b"\xff\xfe\xfa not utf-8")
    (root / "raises.py").write_text("learning_rate = 1 / 0\n")
    docs = root / "docs"
    docs.mkdir()
    (docs / "empty.jsonl").write_text("")
    (docs / "one.jsonl").write_text('{"text": "a single document"}\n')
    (docs / "bad.jsonl").write_text("this is not JSON\n")
    return dict(root=root, cfg=cfg, run=Path(cfg.out_dir), hf=root / "hf", bad=bad, data_dir=data_dir)


def train_args(w, **overrides) -> list[str]:
    return cli_args(tiny_config(w["data_dir"], w["run"], max_iters=4, eval_interval=2, **overrides))


# (id, entry, argv from the world, the text of the one error line)
CASES = [
    # train.py: configuration
    ("unknown key", train.cli, lambda w: [*train_args(w), "--learnig_rate=1e-3"], "did you mean 'learning_rate'"),
    ("wrong type", train.cli, lambda w: [*train_args(w), "--batch_size=four"], "must be an integer >= 1, got 'four'"),
    ("negative lr", train.cli, lambda w: [*train_args(w), "--learning_rate=-1"], "'learning_rate' in the command line must be a finite number >= 0"),
    ("no value", train.cli, lambda w: ["--batch_size"], "argument --batch_size/--batch-size: expected one argument"),
    ("warmup > decay", train.cli, lambda w: [*train_args(w), "--warmup_iters=9", "--lr_decay_iters=4", "--overwrite=True"],
     "warmup_iters=9 is longer than lr_decay_iters=4"),
    ("min_lr > lr", train.cli, lambda w: [*train_args(w), "--min_lr=1", "--overwrite=True"], "min_lr=1.0 is above"),
    ("heads", train.cli, lambda w: [*train_args(w), "--n_head=3", "--overwrite=True"], "not divisible by n_head=3"),
    ("llama bias", train.cli, lambda w: [*train_args(w), "--model=llama", "--bias=True", "--overwrite=True"],
     "model='llama' has no biases"),
    ("fsdp in one process", train.cli, lambda w: [*train_args(w), "--fsdp=True", "--overwrite=True"],
     "fsdp=True shards over the processes that torchrun starts"),
    ("config file missing", train.cli, lambda w: [w["root"] / "nope.py"], "config file"),
    ("config file raises", train.cli, lambda w: [w["root"] / "raises.py"], "failed to run: ZeroDivisionError"),
    # train.py: validate before destroying
    ("overwrite, missing dataset", train.cli, lambda w: [*train_args(w), "--dataset=nowhere", "--overwrite=True"],
     "does not exist"),
    ("overwrite, truncated data", train.cli,
     lambda w: [*train_args(w), f"--data_dir={w['bad']}", "--dataset=cut", "--overwrite=True"], "truncated or corrupt"),
    ("overwrite, nanoGPT .bin", train.cli,
     lambda w: [*train_args(w), f"--data_dir={w['bad']}", "--dataset=nanogpt", "--overwrite=True"], "bad magic"),
    ("overwrite, block too long", train.cli,
     lambda w: [*train_args(w), f"--data_dir={w['bad']}", "--dataset=short", "--overwrite=True"], "too few for block_size"),
    ("fresh over a run", train.cli, lambda w: train_args(w), "already holds a train.py run"),
    # train.py: a new folder that fails leaves no folder behind
    ("new folder, missing dataset", train.cli,
     lambda w: [*train_args(w), "--dataset=nowhere", f"--out_dir={w['root'] / 'new_run'}"], "does not exist"),
    ("new folder, nanoGPT .bin", train.cli,
     lambda w: [*train_args(w), f"--data_dir={w['bad']}", "--dataset=nanogpt", f"--out_dir={w['root'] / 'new_run'}"],
     "bad magic"),
    ("new folder, fsdp in one process", train.cli,
     lambda w: [*train_args(w), "--fsdp=True", f"--out_dir={w['root'] / 'new_run'}"], "torchrun starts"),
    # train.py: resume
    ("resume, other optimizer", train.cli, lambda w: ["--init_from=resume", f"--out_dir={w['run']}", "--optimizer=adamw"],
     "holds a run with optimizer='adams'"),
    ("resume, other dataset", train.cli, lambda w: ["--init_from=resume", f"--out_dir={w['run']}", "--dataset=pystdlib"],
     "holds a run with dataset='tiny'"),
    ("resume, other shape", train.cli, lambda w: ["--init_from=resume", f"--out_dir={w['run']}", "--n_layer=3"],
     "holds a run with n_layer=2"),
    ("resume, no checkpoint yet", train.cli, lambda w: ["--init_from=resume", f"--out_dir={w['root'] / 'log_only'}"],
     "has no checkpoint yet"),
    ("resume, nothing there", train.cli, lambda w: ["--init_from=resume", f"--out_dir={w['root'] / 'empty'}"],
     "no checkpoint in"),
    ("out_dir is a file", train.cli, lambda w: [*train_args(w), f"--out_dir={w['root'] / 'prompt.bin' / 'x'}"],
     "is not writable"),
    # sample.py
    ("sample top_k 0", sample.main, lambda w: [f"--out_dir={w['run']}", "--top_k=0"], "argument --top_k/--top-k: must be an integer >= 1, got '0'"),
    ("sample nan temperature", sample.main, lambda w: [f"--out_dir={w['run']}", "--temperature=nan"],
     "argument --temperature: must be 0 (greedy) or a number from 0.001 to 1e6, got 'nan'"),
    ("sample tiny temperature", sample.main, lambda w: [f"--out_dir={w['run']}", "--temperature=1e-300"],
     "argument --temperature: must be 0 (greedy) or a number from 0.001 to 1e6, got '1e-300'"),  # it overflowed
    ("sample negative tokens", sample.main, lambda w: [f"--out_dir={w['run']}", "--max_new_tokens=-1"],
     "must be an integer from 0 to 10000000, got '-1'"),
    ("sample prompt not UTF-8", sample.main, lambda w: [f"--out_dir={w['run']}", f"--start=FILE:{w['root'] / 'prompt.bin'}"],
     "is not UTF-8 text"),
    ("sample prompt missing", sample.main, lambda w: [f"--out_dir={w['run']}", "--start=FILE:/no/such/prompt"], "no such file"),
    ("sample empty prompt", sample.main, lambda w: [f"--out_dir={w['run']}", "--start="], "the prompt is empty"),
    ("sample no checkpoint", sample.main, lambda w: [f"--out_dir={w['root'] / 'log_only'}"], "no checkpoint in"),
    # export.py
    ("export over its run", export.main, lambda w: [w["run"], w["run"], "--overwrite"],
     "holds a train.py run (finished at iteration 4, with checkpoints), which this command does not make"),
    ("export into its checkpoints", export.main, lambda w: [w["run"], w["run"] / "checkpoints", "--overwrite"],
     "which this command does not make and will not replace"),
    ("export over the run's parent", export.main, lambda w: [w["run"] / "checkpoints" / checkpoint.latest(w["run"]).name,
                                                              w["root"], "--overwrite"], "will not replace"),
    ("export over an export", export.main, lambda w: [w["run"], w["hf"]], "holds a Hugging Face model (an export)"),
    ("export from nowhere", export.main, lambda w: [w["root"] / "nowhere", w["root"] / "new_hf"],
     "argument source: must be an existing file or folder"),
    # the sweep
    ("sweep summarize nowhere", sweep.main, lambda w: ["--summarize", "--out", w["root"] / "no_sweep"], "does not exist"),
    ("sweep jobs 0", sweep.main, lambda w: ["--jobs", "0", "--out", w["root"] / "no_sweep"], "argument --jobs: must be an integer from 1 to 1024, got '0'"),
    ("sweep nproc 0", sweep.main, lambda w: ["--nproc", "0", "--out", w["root"] / "no_sweep"], "argument --nproc: must be an integer from 1 to 1024, got '0'"),
    ("sweep missing config", sweep.main, lambda w: [w["root"] / "nope.py", "--out", w["root"] / "no_sweep"],
     "argument configs: must be an existing file"),
    ("sweep bad grid", sweep.main, lambda w: ["--grid", "learning_rate", "--out", w["root"] / "no_sweep"],
     "argument --grid: must be KEY=VALUE, got 'learning_rate'"),
    ("sweep bad scale", sweep.main, lambda w: ["--grid", "beta1=0.9", "--set", "min_lr=0.1*lr", "--out", w["root"] / "no_sweep"],
     "is not a --grid key"),
    # data preparation
    ("prepare empty input", owt_prepare.main, lambda w: ["--input", w["root"] / "docs/empty.jsonl", "--out", w["root"] / "prep"],
     "is empty"),
    ("prepare one document", owt_prepare.main, lambda w: ["--input", w["root"] / "docs/one.jsonl", "--out", w["root"] / "prep",
                                                          "--num-proc", "1"], "cannot be split"),
    ("prepare not JSON", owt_prepare.main, lambda w: ["--input", w["root"] / "docs/bad.jsonl", "--out", w["root"] / "prep"],
     "is not JSON lines"),
    ("prepare missing input", owt_prepare.main, lambda w: ["--input", w["root"] / "docs/none.jsonl", "--out", w["root"] / "prep"],
     "argument --input: must be an existing file, got"),
]


@pytest.mark.parametrize("name, entry, argv, message", CASES, ids=[c[0] for c in CASES])
def test_a_mistake_is_one_error_line_and_changes_nothing(name, entry, argv, message, world):
    before = tree(world["root"])
    code, err = run_entry(entry, argv(world))
    assert_one_error_line(code, err, message)
    assert tree(world["root"]) == before, "the command changed files it had no business changing"


def test_evaluation_only_reads_the_run(world, capsys):
    before = tree(world["root"])
    assert train.cli(["--init_from=resume", f"--out_dir={world['run']}", "--eval_only=True"]) == 0
    assert "val loss" in capsys.readouterr().out
    assert tree(world["root"]) == before


def test_sample_and_export_read_the_run_and_exports_are_readable_by_others(world, tmp_path, capsys):
    before = tree(world["run"])
    assert cli.main(sample.main, [f"--out_dir={world['run']}", "--max_new_tokens=4"]) == 0
    old = os.umask(0o022)
    try:
        export.export(world["run"], tmp_path / "hf")
    finally:
        os.umask(old)
    assert tree(world["run"]) == before
    assert "Writing model shards" not in capsys.readouterr().err  # stderr is no terminal here: no library bars
    assert (tmp_path / "hf").stat().st_mode & 0o777 == 0o755
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in (tmp_path / "hf").iterdir())


@pytest.mark.parametrize("make, load_into", [
    (lambda ps: torch.optim.AdamW(ps), lambda ps: AdamS(ps)),
    (lambda ps: AdamS(ps), lambda ps: Lion(ps)),
    (lambda ps: torch.optim.AdamW(ps), lambda ps: AdamMini([("w.weight", ps[0])], n_head=1, rules=((r"weight$", "row"),))),
], ids=["adamw->adams", "adams->lion", "adamw->adam_mini"])
def test_an_optimizer_refuses_another_optimizers_state_at_load(make, load_into):
    w = torch.nn.Parameter(torch.randn(3, 4))
    saved = make([w])
    w.grad = torch.randn(3, 4)
    saved.step()
    target = load_into([w])
    with pytest.raises(ValueError, match="this state_dict was not saved by"):
        target.load_state_dict(saved.state_dict())
    assert not target.state  # nothing half-loaded


def test_adam_mini_refuses_complex_parameters_at_construction():
    z = torch.nn.Parameter(torch.randn(3, 4, dtype=torch.complex64))
    with pytest.raises(ValueError, match="does not support complex parameters"):
        AdamMini([("w.weight", z)], n_head=1, rules=((r"weight$", "row"),))


# --- faults during a run ---------------------------------------------------------------------------------


def test_a_full_disk_while_checkpointing_is_one_line_and_the_last_checkpoint_survives(data_dir, tmp_path, monkeypatch):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=6, eval_interval=2)
    save = torch.save
    calls = {"n": 0}

    def full_disk(obj, f, *args, **kwargs):
        if isinstance(obj, dict) and obj.get("iter_num") == 4:
            raise OSError(28, "No space left on device")
        calls["n"] += 1
        return save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    code, err = run_entry(train.cli, cli_args(cfg))
    assert_one_error_line(code, err, "could not be written (No space left on device); nothing of it is left, and the last complete checkpoint is")
    assert "No space left on device" in err and "ckpt_00000002.pt" in err
    monkeypatch.setattr(torch, "save", save)
    assert checkpoint.latest(cfg.out_dir).name == "ckpt_00000002.pt"
    checkpoint.load(cfg.out_dir)  # whole
    assert train.cli(["--init_from=resume", f"--out_dir={cfg.out_dir}"]) == 0  # and the run goes on from it


def test_a_half_written_last_log_line_is_tolerated_on_resume_and_in_summaries(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "sweep" / "seed=1337", max_iters=4, eval_interval=2, max_consecutive_skips=10)
    train.main(cfg)
    log = Path(cfg.out_dir) / "metrics.jsonl"
    log.write_text(log.read_text() + '{"kind": "train", "iter": 5, "train_lo')  # a crash mid-line
    assert sweep.final_val_loss(Path(cfg.out_dir))[1]  # the sweep still reads it as finished
    assert train.cli(["--init_from=resume", f"--out_dir={cfg.out_dir}", "--max_iters=6", "--lr_decay_iters=6"]) == 0
    assert [r["iter"] for r in metrics.read(cfg.out_dir)[1]] == [0, 2, 4, 6]


def test_a_run_stopped_before_its_first_checkpoint_restarts_with_the_same_command(data_dir, tmp_path, capsys):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=2)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text('{"kind": "eval", "iter": 0, "val_loss": 5.5}\n')
    assert train.cli(cli_args(cfg)) == 0
    assert "stopped before its first checkpoint; starting it again" in capsys.readouterr().out


def test_resume_takes_the_runs_own_settings_and_says_what_it_overrides(data_dir, tmp_path, capsys):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=2, n_layer=1, learning_rate=2e-3)
    train.main(cfg)
    capsys.readouterr()
    # nanoGPT's resume: only the folder and what changes (here the length) on the command line
    assert train.cli(["--init_from=resume", f"--out_dir={cfg.out_dir}", "--max_iters=6", "--lr_decay_iters=6"]) == 0
    out = capsys.readouterr().out
    assert "resuming with max_iters=6 (the run had 4), lr_decay_iters=6 (the run had 20)" in out  # the config's order
    saved = checkpoint.load(cfg.out_dir)["config"]
    assert (saved["n_layer"], saved["learning_rate"], saved["dataset"], saved["max_iters"]) == (1, 2e-3, "tiny", 6)


# --- cases that need a process of their own ------------------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_first_and_a_dead_ones_lock_blocks_nothing(world, data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=2)
    args = [sys.executable, "train.py", *cli_args(cfg)]
    (tmp_path / "run").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time, folders; lock = folders.Lock(sys.argv[1], 'train.py');"
                               " lock.acquire('--out_dir'); print('held', flush=True); time.sleep(60)", cfg.out_dir], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = tree(tmp_path)
        second = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
        assert_one_error_line(second.returncode, second.stderr, f"is in use by another command (train.py, process {holder.pid} on")
        assert tree(tmp_path) == before
    finally:
        holder.kill()  # SIGKILL: the kernel drops its lock, and the file stays behind
        holder.wait()
    assert folders.lock_path(tmp_path / "run").exists()
    assert subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300).returncode == 0


def test_ctrl_c_says_where_the_last_checkpoint_is_and_how_to_resume(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=100_000, lr_decay_iters=100_000, eval_interval=2)
    proc = subprocess.Popen([sys.executable, "train.py", *cli_args(cfg)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while checkpoint.latest(cfg.out_dir) is None and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert_one_error_line(proc.returncode, err, "interrupted; the last checkpoint is")
    assert proc.returncode == 130 and f"python train.py --init_from=resume --out_dir={cfg.out_dir}" in err
    checkpoint.load(cfg.out_dir)


def test_torchrun_with_the_defaults_fails_once_on_rank_0_with_the_fix(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2)  # gradient_accumulation_steps=1
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "train.py", *cli_args(cfg)], cwd=REPO, capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode != 0 and len(lines) == 1, result.stderr[-3000:]
    assert "gradient_accumulation_steps=1 is not divisible by the world size 2" in lines[0]
    assert not (tmp_path / "run").exists()  # nothing was written


def test_resume_on_changed_data_is_refused_unless_allowed_and_then_said(data_dir, tmp_path, capsys):
    import shutil

    from tokens import read_tokens, write_tokens

    data = tmp_path / "data"
    shutil.copytree(data_dir / "tiny", data / "tiny")
    cfg = tiny_config(data, tmp_path / "run", max_iters=4, eval_interval=2)
    train.main(cfg)
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())["derived"]["data"]
    assert recorded["train"]["bytes"] == (data / "tiny" / "train.bin").stat().st_size
    # the dataset prepared again, differently (here: the training tokens reversed), then the run resumed
    tokens, vocab = read_tokens(data / "tiny" / "train.bin")
    write_tokens(data / "tiny" / "train.bin", np.ascontiguousarray(tokens[::-1]), vocab_size=vocab)
    capsys.readouterr()
    before = tree(tmp_path / "run")
    resume = ["--init_from=resume", f"--out_dir={cfg.out_dir}", "--max_iters=6", "--lr_decay_iters=20"]
    code = train.cli(resume)
    assert_one_error_line(code, capsys.readouterr().err, "the run was trained on other data: train.bin (same size, "
                          "other content)")
    assert tree(tmp_path / "run") == before
    assert train.cli([*resume, "--allow_new_data=True"]) == 0
    out = capsys.readouterr().out
    assert "warning: resuming on changed data (--allow_new_data=True): train.bin (same size, other content)" in out
    # its checkpoints now hold the new data's fingerprint: the next resume needs no flag
    assert train.cli(["--init_from=resume", f"--out_dir={cfg.out_dir}", "--max_iters=8", "--lr_decay_iters=20"]) == 0
