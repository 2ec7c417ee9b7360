"""scripts/sweep.py: grids of runs x seeds, run locally or printed as torchrun commands, and their tables."""

import csv
import json
import math
import shutil
from pathlib import Path

import pytest

from errors import UserError
from scripts import (
    sweep,
)

REPO = Path(__file__).resolve().parents[1]


def fake_runs(codes, seen=None):
    """A stand-in for subprocess.Popen that ends at once with the next of ``codes`` (noting each env in ``seen``)."""
    codes = iter(codes)

    class Done:
        def __init__(self, cmd, env=None, **_):
            if seen is not None:
                seen.append(env["OMP_NUM_THREADS"])
            self.code = next(codes)

        def wait(self):
            return self.code

    return Done


def nothing_runs(*a, **k):
    pytest.fail("nothing should run")


def test_sweep_runs_every_point_and_seed_and_tabulates(sweep_out):
    out, _ = sweep_out
    with open(out / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 8 and all(r["finished"] == "True" for r in runs)
    with open(out / "summary.csv") as f:
        summary = list(csv.DictReader(f))
    assert len(summary) == 4 and all(r["n"] == "2" for r in summary)
    point = next(r for r in summary if (r["beta1"], r["beta2"]) == ("0.9", "0.95"))
    losses = [float(r["val_loss"]) for r in runs if (r["beta1"], r["beta2"]) == ("0.9", "0.95")]
    assert float(point["mean"]) == pytest.approx(sum(losses) / 2)
    assert "± " in (out / "summary.md").read_text() and (out / "summary.png").exists()
    config = json.loads((out / "beta1=0.95_beta2=0.999_seed=2" / "config.json").read_text())["config"]
    assert (config["beta1"], config["beta2"], config["seed"]) == (0.95, 0.999, 2)


def test_heatmap_labels_are_readable_on_both_ends_of_the_colormap():
    import matplotlib

    cmap = matplotlib.colormaps["viridis_r"]
    assert sweep.label_color(cmap(0.0)) == "black"  # viridis_r's low end is pale yellow
    assert sweep.label_color(cmap(1.0)) == "white"  # its high end is dark purple
    assert sweep.label_color(matplotlib.colors.to_rgba("lightgrey")) == "black"


def test_sweep_skips_finished_runs(sweep_out, capsys):
    out, args = sweep_out
    before = {p: p.stat().st_mtime for p in out.glob("*/metrics.jsonl")}
    sweep.main(args)
    assert "8 runs, 8 already finished, 0 to run" in capsys.readouterr().out
    assert before == {p: p.stat().st_mtime for p in out.glob("*/metrics.jsonl")}


def test_sweep_prints_torchrun_commands(tmp_path, capsys):
    sweep.main(["config/train_gpt2_small_adams.py", "--grid", "beta2=0.95,0.99", "--out", str(tmp_path), "--nproc", "8",
                "--print-commands"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_small_adams.py --beta2=0.95")
    assert "--init_from=auto" in lines[0]


def test_sweep_from_another_folder_keeps_relative_paths_relative_to_it(data_dir, tmp_path, monkeypatch):
    # the runs used to start in the repository root, so a relative --out sent them there while the summary looked here
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text(f"data_dir = {str(data_dir)!r}\ndataset = 'tiny'\n")
    sets = ["n_layer=1", "n_head=2", "n_embd=32", "block_size=32", "batch_size=4", "max_iters=2", "lr_decay_iters=2",
            "warmup_iters=1", "eval_interval=2", "eval_iters=1", "device=cpu", "dtype=float32", "sample_tokens=0"]
    rows = sweep.main(["mine.py", "--out", "rel", *[a for item in sets for a in ("--set", item)]])
    assert (tmp_path / "rel" / "seed=1337" / "metrics.jsonl").exists()
    assert rows[0]["finished"] and math.isfinite(rows[0]["mean"])


def test_sweep_refuses_a_missing_config_before_running_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep.subprocess, "Popen", nothing_runs)
    with pytest.raises(UserError, match="argument configs: must be an existing file, got 'config/nope.py'"):
        sweep.main(["config/nope.py", "--grid", "learning_rate=1e-3", "--out", str(tmp_path / "out")])
    with pytest.raises(UserError, match="config file 'config/typo.py' does not exist"):
        sweep.main(["--grid", "config=config/repro/cpu_adams.py,config/typo.py", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_sweep_exits_nonzero_when_a_run_fails_and_says_where_to_look(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep.subprocess, "Popen", fake_runs([0, 2]))
    with pytest.raises(UserError, match=r"1 of 2 runs failed; the last lines of .*learning_rate=2e-3_seed=1337.*train.log"):
        sweep.main(["--grid", "learning_rate=1e-3,2e-3", "--out", str(tmp_path)])
    assert "| 2e-3 | not finished | 1 |" in (tmp_path / "summary.md").read_text()  # tabulated before exiting


def test_sweep_counts_a_diverged_run_as_inf_and_does_not_rerun_it(tmp_path, monkeypatch, capsys):
    # the folder as train.py leaves a run it stopped on non-finite steps: its last metrics line says so
    run = tmp_path / "learning_rate=1e-2_seed=1337"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"config": {"max_iters": 10}}))
    (run / "metrics.jsonl").write_text(json.dumps(dict(kind="eval", iter=0, val_loss=4.0)) + "\n"
                                       + json.dumps(dict(kind="diverged", iter=4, reason="the loss is nan")) + "\n")
    monkeypatch.setattr(sweep.subprocess, "Popen", nothing_runs)  # a diverged run is not rerun
    rows = sweep.main(["--grid", "learning_rate=1e-2", "--out", str(tmp_path)])
    assert "1 runs, 1 already finished, 0 to run" in capsys.readouterr().out
    assert rows[0]["mean"] == math.inf and rows[0]["finished"]
    assert "| 1e-2 | diverged | 1 |" in (tmp_path / "summary.md").read_text()


def test_sweep_set_scales_a_grid_key(tmp_path, capsys):
    sweep.main(["--grid", "learning_rate=1e-3,4e-3", "--set", "min_lr=0.1*learning_rate", "--set", "max_iters=5",
                "--out", str(tmp_path), "--print-commands"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert "--learning_rate=1e-3 --min_lr=0.0001 --max_iters=5" in lines[0]
    assert "--learning_rate=4e-3 --min_lr=0.0004 --max_iters=5" in lines[1]
    with pytest.raises(UserError, match="'beta1' is not a --grid key"):
        sweep.main(["--grid", "learning_rate=1e-3", "--set", "min_lr=0.1*beta1", "--out", str(tmp_path), "--print-commands"])


def test_sweep_summarize_only_runs_nothing(sweep_out, tmp_path, capsys):
    out, args = sweep_out
    more = [a if a != "beta2=0.95,0.999" else "beta2=0.95,0.999,0.9" for a in args]
    sweep.main([*more, "--summarize"])
    text = capsys.readouterr().out
    assert "| 0.9 | 0.9 | not finished | 2 |" in text
    assert not list(out.glob("beta1=0.9_beta2=0.9_seed=*"))  # nothing was started


def test_sweep_summary_of_a_partly_finished_point_counts_its_finished_seeds(sweep_out, tmp_path, capsys):
    out, args = sweep_out
    i = args.index("--seeds")
    more = args[: i + 3] + ["3"] + args[i + 3 :]  # the same grid and seeds 1 2, plus a seed 3 never run
    summary = sweep.main([*more, "--summarize"])
    text = capsys.readouterr().out
    assert "(2 of 3 seeds so far) | 3 |" in text and "not finished |" not in text
    with open(out / "runs.csv") as f:
        losses = [float(r["val_loss"]) for r in csv.DictReader(f) if (r["beta1"], r["beta2"], r["seed"]) in
                  (("0.9", "0.95", "1"), ("0.9", "0.95", "2"))]
    point = next(s for s in summary if (s["beta1"], s["beta2"]) == ("0.9", "0.95"))
    assert (point["n"], point["seeds"], point["finished"]) == (2, 3, False)
    assert point["mean"] == pytest.approx(sum(losses) / 2)  # the unfinished seed does not make it inf


def test_sweep_extending_a_grid_keeps_the_earlier_points_in_the_summary(sweep_out, tmp_path):
    out, args = sweep_out
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    i = args.index("--out")
    narrow = [a if a != "beta1=0.9,0.95" else "beta1=0.9" for a in args[:i]] + ["--out", str(copy)] + args[i + 2:]
    summary = sweep.main([*narrow, "--summarize"])  # a later sweep over part of the same grid
    # all four points, in grid order although the earlier sweep's 0.95 points come first in the merge
    assert [(s["beta1"], s["beta2"]) for s in summary] == [("0.9", "0.95"), ("0.9", "0.999"), ("0.95", "0.95"), ("0.95", "0.999")]
    assert all(s["n"] == 2 for s in summary)
    with open(copy / "runs.csv") as f:
        assert len(list(csv.DictReader(f))) == 8
    # another grid's keys: its table is replaced, not mixed in
    summary = sweep.main(["--grid", "learning_rate=1e-3", "--out", str(copy), "--summarize"])
    assert [s["learning_rate"] for s in summary] == ["1e-3"]


def test_sweep_pins_each_runs_threads(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(sweep.subprocess, "Popen", fake_runs([0] * 6, seen))
    monkeypatch.setattr(sweep.os, "cpu_count", lambda: 8)
    grid = ["--grid", "learning_rate=1e-3,2e-3", "--out", str(tmp_path)]
    sweep.main(grid + ["--jobs", "2"])
    sweep.main(grid + ["--jobs", "2", "--threads", "1"])
    sweep.main(grid + ["--jobs", "1", "--nproc", "4"])
    assert seen == ["4", "4", "1", "1", "2", "2"]  # cores // (jobs x processes per run) unless told


def test_two_config_files_of_one_name_are_refused_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep.subprocess, "Popen", nothing_runs)
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "opt.py").write_text("max_iters = 2\n")
    with pytest.raises(UserError, match=r"would share the run folder .*config=opt_seed=1337; give the config files "
                                        r"different names"):
        sweep.main(["--grid", f"config={tmp_path / 'x/opt.py'},{tmp_path / 'y/opt.py'}", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["../../escaped", "..", "a/b", "/abs", "a%2Fb"])
def test_a_grid_value_never_leads_a_run_folder_out_of_the_sweeps_folder(value, tmp_path, capsys):
    out = tmp_path / "out"
    sweep.main(["--grid", f"wandb_run_name={value},plain", "--out", str(out), "--print-commands"])
    lines = capsys.readouterr().out.strip().splitlines()
    folders = [Path(line.split("--out_dir=")[1].split()[0]) for line in lines]
    assert [f.parent for f in folders] == [out, out] and len(set(folders)) == 2
    assert f"--wandb_run_name={value} " in lines[0]  # the value itself reaches train.py unchanged


@pytest.mark.parametrize("args, says", [
    (["--grid", "seed=1,2"], "seed is set by the sweep for every run; give it with --seeds"),
    (["--set", "seed=5"], "seed is set by the sweep for every run"),
    (["--set", "out_dir=../elsewhere"], "out_dir is set by the sweep for every run; give it with --out"),
    (["--grid", "init_from=scratch,resume"], "init_from is set by the sweep"),
    (["--seeds", "1", "1"], "--seeds gives 1 more than once"),
])
def test_a_seed_or_folder_the_sweep_would_override_is_refused(args, says, tmp_path, monkeypatch):
    # before: every run trained with the sweep's seed 1337 while labelled 1 and 2 (a std of 0, no word)
    monkeypatch.setattr(sweep.subprocess, "Popen", nothing_runs)
    with pytest.raises(UserError, match=says):
        sweep.main([*args, "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_summarize_writes_nothing_and_reads_the_grid_the_sweep_recorded(sweep_out, capsys):
    out, args = sweep_out
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    summary = sweep.main(["--out", str(out), "--seeds", "1", "2", "--summarize"])  # no --grid: the recorded one
    assert [(s["beta1"], s["beta2"], s["n"]) for s in summary] == [("0.9", "0.95", 2), ("0.9", "0.999", 2),
                                                                   ("0.95", "0.95", 2), ("0.95", "0.999", 2)]
    i = args.index("--out")
    sweep.main([*args[:i], "--out", str(out), "--summarize"])  # and with it
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not list(out.parent.glob(f".{out.name}.lock*"))  # read-only: no lock taken either


def test_sigterm_stops_a_sweep_and_its_runs_as_ctrl_c_does(data_dir, tmp_path):
    # before: the sweep died and its train.py children trained on as orphans holding their folders
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    sets = [f"data_dir={data_dir}", "dataset=tiny", "n_layer=1", "n_head=2", "n_embd=32", "block_size=32",
            "batch_size=4", "max_iters=100000", "lr_decay_iters=100000", "warmup_iters=1", "eval_interval=5",
            "eval_iters=1", "device=cpu", "dtype=float32", "sample_tokens=0", "log_interval=1"]
    cmd = [sys.executable, "-m", "scripts.sweep", "--grid", "learning_rate=1e-3,2e-3", "--jobs", "2", "--out", str(out),
           *[a for item in sets for a in ("--set", item)]]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    sweep_process = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True)  # its own group: the signal goes to the sweep alone
    logs = [out / f"learning_rate={lr}_seed=1337" / "metrics.jsonl" for lr in ("1e-3", "2e-3")]
    deadline = time.time() + 120
    while not all(log.is_file() and '"checkpoint"' in log.read_text() for log in logs):
        assert time.time() < deadline and sweep_process.poll() is None, sweep_process.communicate()
        time.sleep(0.5)
    sweep_process.send_signal(signal.SIGTERM)
    _, err = sweep_process.communicate(timeout=120)
    assert sweep_process.returncode == 130 and err.strip().splitlines()[-1] == "error: interrupted", err
    for log in logs:  # each run stopped with the sweep, saying why, and is not running any more
        last = json.loads(log.read_text().splitlines()[-1])
        assert last["kind"] == "stopped" and last["reason"] == "interrupted"
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(out) not in ps
