"""The figure, table and benchmark scripts run at small scale on CPU and write what they promise."""

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from errors import UserError
from scripts import (
    bench_memory,
    bench_optim,
    bench_train,
    denominator_moments,
    embedding_lr,
    kernel_cycles,
    lr_transfer,
    plot_curves,
    step_matched,
    sweep,
    update_alignment,
    update_magnitude,
)
from tests.conftest import start_together

REPO = Path(__file__).resolve().parents[1]


def test_moments_closed_forms_match_the_papers_numbers():
    # the paper: at b1 = 0.9, b2 = 0.95, Var[S] = 0.0256 (2 s^4 + 4 m^2 s^2), Var[V] = 0.005 * 2 s^4 + 0.05 * 4 m^2 s^2
    for mu, sigma in ((0.0, 1.0), (2.0, 0.5)):
        f = denominator_moments.closed_forms(mu, sigma, 0.9, 0.95)
        assert f["Var[S]"] == pytest.approx(0.05 / 1.95 * (2 * sigma**4 + 4 * mu**2 * sigma**2))
        assert f["Var[V]"] == pytest.approx(0.005 * 2 * sigma**4 + 0.05 * 4 * mu**2 * sigma**2, rel=1e-3)
        assert f["E[S]"] == mu**2 + sigma**2


def test_moments_monte_carlo_agrees_with_closed_forms(tmp_path):
    rows = denominator_moments.main(["--chains", "40000", "--steps", "200", "--beta2", "0.9", "--out", str(tmp_path / "moments")])
    assert max(r["rel_error"] for r in rows) < 0.08  # sampling error at 40k chains
    assert (tmp_path / "moments.png").stat().st_size > 0 and (tmp_path / "moments.csv").exists()


def test_update_magnitude_matches_the_formula_and_the_bound(tmp_path):
    ratios, curves = update_magnitude.main(["--points", "261", "--out", str(tmp_path / "update_magnitude")])
    for b2, curve in curves.items():
        for r, step in zip(ratios.tolist()[::20], curve.tolist()[::20]):
            assert step == pytest.approx(abs(0.9 + 0.1 * r) / math.sqrt(b2 + (1 - b2) * r * r), rel=1e-9)
        assert curve.max().item() <= math.sqrt(0.81 / b2 + 0.01 / (1 - b2)) + 1e-12
    assert (tmp_path / "update_magnitude.png").exists()


@pytest.fixture(scope="module")
def sweep_out(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    args = ["--grid", "beta1=0.9,0.95", "--grid", "beta2=0.95,0.999", "--seeds", "1", "2", "--out", str(out), "--jobs", "2"]
    for item in (f"data_dir={data_dir}", "dataset=tiny", "n_layer=1", "n_head=2", "n_embd=32", "block_size=32",
                 "batch_size=4", "max_iters=6", "lr_decay_iters=6", "warmup_iters=1", "eval_interval=3",
                 "eval_iters=2", "device=cpu", "dtype=float32", "sample_tokens=0"):
        args += ["--set", item]
    sweep.main(args)
    return out, args


def test_a_sweep_into_the_committed_runs_says_how_to_pack_its_scan(sweep_out, tmp_path, monkeypatch, capsys):
    out, args = sweep_out  # finished: sweeping it again only tabulates
    at = args.index("--out")
    sweep.main(args[:at] + args[at + 2:] + ["--out", str(out)])
    assert "scripts.pack" not in capsys.readouterr().out  # a sweep outside results/runs: nothing to say
    part = tmp_path / "repo" / "results" / "runs" / "toy" / "part"
    shutil.copytree(out, part)
    monkeypatch.setattr(sweep, "REPO", tmp_path / "repo")
    sweep.main(args[:at] + args[at + 2:] + ["--out", str(part)])
    assert "commit it packed: python -m scripts.pack results/runs/toy" in capsys.readouterr().out


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


def test_sweep_pins_each_runs_threads(tmp_path, monkeypatch):
    seen = []

    def fake_run(cmd, env, **_):
        seen.append(env["OMP_NUM_THREADS"])
        return type("Done", (), {"returncode": 0})()

    monkeypatch.setattr(sweep.subprocess, "run", fake_run)
    monkeypatch.setattr(sweep.os, "cpu_count", lambda: 8)
    grid = ["--grid", "learning_rate=1e-3,2e-3", "--out", str(tmp_path)]
    sweep.main(grid + ["--jobs", "2"])
    sweep.main(grid + ["--jobs", "2", "--threads", "1"])
    sweep.main(grid + ["--jobs", "1", "--nproc", "4"])
    assert seen == ["4", "4", "1", "1", "2", "2"]  # cores // (jobs x processes per run) unless told


def test_sweep_refuses_a_missing_config_before_running_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep.subprocess, "run", lambda *a, **k: pytest.fail("nothing should run"))
    with pytest.raises(UserError, match="argument configs: must be an existing file, got 'config/nope.py'"):
        sweep.main(["config/nope.py", "--grid", "learning_rate=1e-3", "--out", str(tmp_path / "out")])
    with pytest.raises(UserError, match="config file 'config/typo.py' does not exist"):
        sweep.main(["--grid", "config=config/repro/cpu_adams.py,config/typo.py", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_sweep_exits_nonzero_when_a_run_fails_and_says_where_to_look(tmp_path, monkeypatch):
    codes = iter([0, 2])
    monkeypatch.setattr(sweep.subprocess, "run", lambda *a, **k: type("Done", (), {"returncode": next(codes)})())
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
    monkeypatch.setattr(sweep.subprocess, "run", lambda *a, **k: pytest.fail("a diverged run should not rerun"))
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


def test_plot_curves_groups_seeds(sweep_out, tmp_path):
    out, _ = sweep_out
    rows = plot_curves.main([*map(str, sorted(out.glob("beta1=0.9_*"))), "--group", "beta2", "--out", str(tmp_path / "c")])
    assert {r["group"] for r in rows} == {"0.95", "0.999"}
    assert all(r["n"] == 2 for r in rows)
    assert (tmp_path / "c.png").exists() and (tmp_path / "c.csv").exists()


def test_plot_curves_styles_each_value_of_the_first_group_key_alike():
    labels = ["optimizer=adamw, learning_rate=0.001", "optimizer=adams, learning_rate=0.0002",
              "optimizer=adamw, learning_rate=0.002", "optimizer=adams, learning_rate=0.0004"]
    styles = plot_curves.line_styles(labels, ["optimizer", "learning_rate"])
    assert styles[labels[0]] == styles[labels[2]] != styles[labels[1]] == styles[labels[3]]
    assert {styles[labels[0]], styles[labels[1]]} == {"-", "--"}
    assert set(plot_curves.line_styles(labels[:2], ["optimizer"]).values()) == {"-"}  # one key: colour alone


def test_plot_curves_minus_panel_subtracts_the_named_curve(sweep_out, tmp_path):
    out, _ = sweep_out
    runs = [*map(str, sorted(out.glob("beta1=0.9_*")))]
    rows = plot_curves.main([*runs, "--group", "beta2", "--minus", "0.95", "--out", str(tmp_path / "c")])
    mean = {(r["group"], r["x"]): r["mean"] for r in rows}
    assert all(r["minus"] == 0.0 for r in rows if r["group"] == "0.95")
    other = [r for r in rows if r["group"] == "0.999"]
    assert other and all(r["minus"] == pytest.approx(r["mean"] - mean["0.95", r["x"]]) for r in other)
    assert any(r["minus"] != 0.0 for r in other)  # the two betas did train differently
    assert "minus" in (tmp_path / "c.csv").read_text().splitlines()[0]
    with pytest.raises(UserError, match="names no curve; the curves are: '0.95'; '0.999'"):
        plot_curves.main([*runs, "--group", "beta2", "--minus", "0.9", "--out", str(tmp_path / "d")])
    assert not (tmp_path / "d.png").exists()


def test_plot_curves_gives_a_setting_newer_than_the_run_its_default(sweep_out, tmp_path):
    out, _ = sweep_out
    old = tmp_path / "old_run"
    shutil.copytree(out / "beta1=0.9_beta2=0.95_seed=1", old)
    saved = json.loads((old / "config.json").read_text())
    del saved["config"]["embedding_lr_scale"]  # as written before the setting existed
    (old / "config.json").write_text(json.dumps(saved))
    rows = plot_curves.main([str(old), "--group", "beta2", "embedding_lr_scale", "--out", str(tmp_path / "c")])
    assert {r["group"] for r in rows} == {"beta2=0.95, embedding_lr_scale=1.0"}
    with pytest.raises(UserError, match="has no key 'no_such_key'"):
        plot_curves.main([str(old), "--group", "no_such_key", "--out", str(tmp_path / "c")])


def test_plot_curves_leaves_out_a_run_that_has_only_just_started(sweep_out, tmp_path, capsys):
    out, _ = sweep_out
    started = tmp_path / "started"  # config.json and the untrained model's evaluation, nothing more
    started.mkdir()
    shutil.copy(out / "beta1=0.9_beta2=0.95_seed=1" / "config.json", started / "config.json")
    first = next(line for line in (out / "beta1=0.9_beta2=0.95_seed=1" / "metrics.jsonl").read_text().splitlines()
                 if '"eval"' in line)
    (started / "metrics.jsonl").write_text(first + "\n")
    runs = [*map(str, sorted(out.glob("beta1=0.9_beta2=0.999_*"))), str(started)]
    rows = plot_curves.main([*runs, "--group", "beta2", "--out", str(tmp_path / "c")])
    assert {r["group"] for r in rows} == {"0.999"} and "left out 0.95" in capsys.readouterr().out


def test_bench_optim_small_writes_json(tmp_path):
    result = bench_optim.main(["--small", "--repeats", "2", "--only", "adamw fused", "adams foreach", "adam_mini",
                               "--json", str(tmp_path / "b.json")])
    labels = [r["optimizer"] for r in json.loads((tmp_path / "b.json").read_text())["rows"]]
    assert labels == ["adamw fused (torch)", "adams foreach", "adam_mini"]
    assert all(r["ms"] > 0 and r["ratio_to_adamw_fused"] > 0 for r in result["rows"])
    for r in result["rows"]:  # the median of the paired ratios lies between their quartiles
        q1, q3 = r["ratio_quartiles"]
        assert q1 <= r["ratio_to_adamw_fused"] <= q3


def test_bench_optim_no_math_floor_moves_every_byte():
    # the floor case must load p, g and m and store p and m, or it is no floor: p + g and m + g exactly
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in ((70, 70), (5,))]
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(dtype)
        before = [p.detach().clone() for p in params]
        floor = bench_optim.NoMath(params)
        floor.step(), floor.step()
        for p, b, m in zip(params, before, floor.momenta):
            want_p = (b.float() + p.grad.float()).to(dtype)  # one rounding per add, as in the kernel
            torch.testing.assert_close(p.detach(), (want_p.float() + p.grad.float()).to(dtype), rtol=0, atol=0)
            torch.testing.assert_close(m, (2 * p.grad.float()).to(dtype), rtol=0, atol=0)
    rows = bench_optim.main(["--small", "--repeats", "2", "--only", "floor"])["rows"]
    assert [r["optimizer"] for r in rows] == ["adamw fused (torch)", "no-math floor (C++)"]


def test_kernel_cycles_times_each_kernel_and_refuses_a_bad_revision(capsys):
    rows = kernel_cycles.main(["--elements", "4099", "--rounds", "2", "--calls", "2", "--dtypes", "float32", "bfloat16"])
    assert {(r["dtype"], r["kernel"]) for r in rows} == {(d, k) for d in ("float32", "bfloat16")
                                                          for k in ("adams", "lion", "no-math")}
    assert all(r["ns_per_element"] > 0 and r["revision"] == "this tree" for r in rows)
    with pytest.raises(UserError, match="cannot read optim/_cpu_kernels.cpp at revision 'no-such-rev'"):
        kernel_cycles.main(["--against", "no-such-rev"])


def test_update_alignment_heatmaps(data_dir, tmp_path):
    out = tmp_path / "align"
    grids = update_alignment.main(["--dataset", "tiny", "--data_dir", str(data_dir), "--n_layer", "1", "--n_head", "2",
                                   "--n_embd", "32", "--block_size", "32", "--batch_size", "4", "--steps", "6",
                                   "--every", "3", "--out", str(out)])
    # (the script itself fails if its AdamW update differs from torch.optim.AdamW's actual step)
    # step 1: AdamW moves by g/(|g| + eps) and AdamS by g/(sqrt(1 - beta2)|g| + eps): the same
    # direction, up to eps, which weighs differently where a gradient is tiny
    assert grids["cos_adams"][:, 0] == pytest.approx(1.0, abs=1e-3)
    assert grids["cos_adams"][:, 0].mean() > grids["cos_adam_mini"][:, 0].mean()
    # ... and AdamS's step is 1/sqrt(1 - beta2) = sqrt(20) times AdamW's (up to eps)
    assert grids["norm_adams"][:, 0] == pytest.approx(20**0.5, rel=1e-2)
    for key in ("cos_adams", "cos_adam_mini"):
        grid = grids[key]
        assert grid.shape[1] == 3 and ((grid >= -1 - 1e-9) & (grid <= 1 + 1e-9)).all()
    assert (grids["norm_adam_mini"] > 0).all()
    assert out.with_suffix(".png").exists() and out.with_suffix(".csv").exists()


def test_update_alignment_paper_recipe_is_section_4_1_as_the_authors_ran_it():
    # typed from the paper (GPT-2 Small, lr 6e-4, 480 x 1,024 tokens, warmup 2,000, cosine to 0.1x) and the
    # authors' code (12 x 12 micro-batches x 40, bias=False, the cosine over 600K iterations), not from the script
    args = update_alignment.parse_args(["--recipe", "paper"])
    assert (args.n_layer, args.n_head, args.n_embd, args.block_size) == (12, 12, 768, 1024)
    assert args.batch_size * args.accum == 480 and (args.batch_size, args.accum) == (12, 40)
    assert (args.lr, args.warmup, args.decay_iters, args.min_lr) == (6e-4, 2000, 600_000, 6e-5)
    assert ((args.beta1, args.beta2), args.weight_decay, args.dataset, args.steps) == ((0.9, 0.95), 0.1, "openwebtext", 100_000)
    assert update_alignment.parse_args(["--recipe", "paper", "--steps", "50"]).steps == 50  # the command line wins
    # the schedule: linear warmup, then the cosine; constant with decay_iters 0 (worked by hand)
    assert update_alignment.get_lr(1, 6e-4, 2000, 600_000, 6e-5) == pytest.approx(6e-4 / 2001)
    assert update_alignment.get_lr(2001, 6e-4, 2000, 600_000, 6e-5) == pytest.approx(6e-4)
    assert update_alignment.get_lr(301_001, 6e-4, 2000, 600_000, 6e-5) == pytest.approx(3.3e-4)  # halfway: the mean
    assert update_alignment.get_lr(7, 3e-3, 0, 0, 3e-3) == 3e-3


def test_update_alignment_accumulates_micro_batches_as_one_step(data_dir, tmp_path):
    # two micro-batches a step, under a warmup: step 1 still aligns AdamS with AdamW and steps sqrt(20) longer
    grids = update_alignment.main(["--dataset", "tiny", "--data_dir", str(data_dir), "--n_layer", "1", "--n_head", "2",
                                   "--n_embd", "32", "--block_size", "32", "--batch_size", "2", "--accum", "2",
                                   "--steps", "4", "--every", "2", "--warmup", "2", "--decay_iters", "10",
                                   "--min_lr", "3e-4", "--out", str(tmp_path / "align")])
    assert grids["cos_adams"][:, 0] == pytest.approx(1.0, abs=1e-3)
    assert grids["norm_adams"][:, 0] == pytest.approx(20**0.5, rel=1e-2)


def test_every_entry_point_takes_both_spellings_of_an_option_and_shows_defaults(capsys):
    # cli.Parser: --block_size and --block-size are one option; --help gives each option's default
    args = update_alignment.parse_args(["--block-size", "64", "--batch_size", "3"])
    assert (args.block_size, args.batch_size) == (64, 3)
    with pytest.raises(SystemExit):
        denominator_moments.main(["--help"])
    help_text = capsys.readouterr().out
    assert "--beta1 BETA1  " in help_text and "(default: 0.9)" in help_text  # one spelling shown where there is one


def test_bench_memory_state_bytes_on_cpu(tmp_path):
    result = bench_memory.main(["--small", "--sizes", "small", "--block-size", "32", "--global-batch", "4",
                                "--json", str(tmp_path / "m.json")])
    per_param = {r["optimizer"]: r["state_bytes_per_param"] for r in result["rows"]}
    assert per_param == {"adamw": 8.0, "adams": 4.0}  # fp32: AdamW keeps m and v, AdamS only m
    assert all(r["seconds_per_iter"] > 0 and r["accumulation"] == 4 for r in result["rows"])
    assert json.loads((tmp_path / "m.json").read_text())["rows"][0]["peak_bytes"] is None  # CPU: not measured


def test_bench_memory_splits_a_global_batch_into_micro_batches_of_the_largest_size():
    assert bench_memory.micro_batches(60, 16) == [16, 16, 16, 12]  # 480 sequences over 8 GPUs, micro-batch 16
    assert bench_memory.micro_batches(60, 60) == [60] and bench_memory.micro_batches(3, 1) == [1, 1, 1]


def test_bench_memory_under_torchrun_gives_each_rank_its_share_of_the_batch(tmp_path):
    # the paper's Table 1 runs DDP over 8 GPUs; here 2 CPU processes (gloo) share 4 sequences, 2 each
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "scripts.bench_memory", "--small", "--sizes", "small", "--block-size", "32",
                             "--global-batch", "4", "--device", "cpu", "--json", str(tmp_path / "t.json")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    table = json.loads((tmp_path / "t.json").read_text())
    assert table["world_size"] == 2 and table["command"].startswith("torchrun --nproc_per_node=2 -m scripts.bench_memory")
    assert {r["optimizer"]: (r["accumulation"], r["state_bytes_per_param"]) for r in table["rows"]} == \
        {"adamw": (2, 8.0), "adams": (2, 4.0)}
    assert bench_memory.main(["--small", "--sizes", "small", "--block-size", "32", "--global-batch", "4"])["world_size"] == 1


def test_bench_train_runs_train_py_and_reads_its_metrics(tmp_path):
    rows = bench_train.main(["--iters", "6", "--batch-size", "2", "--set", "n_layer=1", "--set", "n_head=2",
                             "--set", "n_embd=32", "--set", "block_size=32", "--set", "compile=False",
                             "--set", "device=cpu", "--json", str(tmp_path / "t.json")])
    assert [r["optimizer"] for r in rows] == ["adamw", "adams"]
    assert all(r["tokens_per_s"] > 0 and r["mfu"] is None for r in rows)  # no peak FLOPs known for a CPU
    assert rows[1]["config"]["config"]["optimizer"] == "adams"
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["torch"] == torch.__version__ and saved["device"] and saved["rows"] == rows
    assert saved["command"].startswith("python -m scripts.bench_train --iters 6 --batch-size 2")


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


def fake_run(folder, optimizer, lr, loss, seed=1, batch_tokens=2048, params=1000, max_iters=10, **settings):
    """A finished run as train.py leaves it, for the analysis scripts: config.json and metrics.jsonl
    (loss=inf: a run train.py stopped on non-finite steps, whose log ends with a ``diverged`` line)."""
    folder.mkdir(parents=True)
    config = dict(config=dict(optimizer=optimizer, learning_rate=lr, seed=seed, max_iters=max_iters, **settings),
                  derived=dict(parameters=params, tokens_per_iter=batch_tokens))
    (folder / "config.json").write_text(json.dumps(config))
    lines = [dict(iter=max_iters, val_loss=loss)] if math.isfinite(loss) else \
        [dict(kind="eval", iter=0, val_loss=11.0), dict(kind="diverged", iter=max_iters // 2, reason="the loss is nan")]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


def test_parabola_vertex_is_exact_for_a_parabola():
    f = lambda x: 3 * (x - 0.7) ** 2 + 2
    assert lr_transfer.parabola_vertex((0.0, 1.0, 2.0), (f(0.0), f(1.0), f(2.0))) == pytest.approx(0.7)
    assert lr_transfer.parabola_vertex((0.0, 1.0, 2.0), (0.0, 1.0, 0.0)) is None  # a maximum


def test_lr_transfer_finds_each_optimizers_best_lr_and_the_ratio(tmp_path):
    # loss = (log2(lr / lr*))^2 + c: AdamW's optimum at 4e-3, AdamS's at 1e-3 -> ratio 1/4, exactly
    # on the grid at batch 2048; at 8192 AdamS's best sits at the grid's edge (not bracketed)
    runs = []
    for batch, opt, best in ((2048, "adamw", 4e-3), (2048, "adams", 1e-3), (8192, "adamw", 4e-3), (8192, "adams", 1e-4)):
        for lr in (5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
            for seed in (1, 2):
                loss = math.log2(lr / best) ** 2 + 2 + 0.01 * seed
                runs.append(fake_run(tmp_path / f"{opt}_{batch}_{lr}_{seed}", opt, lr, loss, seed, batch))
    fake_run(tmp_path / "unfinished", "adamw", 4e-3, 0.0, max_iters=20)  # never reached max_iters: ignored
    (tmp_path / "unfinished" / "metrics.jsonl").write_text(json.dumps(dict(iter=10, val_loss=0.0)) + "\n")
    points, rows = lr_transfer.main([*map(str, runs), str(tmp_path / "unfinished"), "--out", str(tmp_path / "t")])
    assert len(points) == 20 and all(p["n"] == 2 for p in points)
    first, second = rows
    assert (first["adamw_best_lr"], first["adams_best_lr"]) == (4e-3, 1e-3)
    assert first["ratio_grid"] == pytest.approx(0.25) and first["ratio_fitted"] == pytest.approx(0.25)
    assert first["adamw_best_loss"] == pytest.approx(2.015) and first["adamw_best_std"] == pytest.approx(0.01 / 2**0.5)
    assert second["adams_best_lr"] == 5e-4 and not second["adams_bracketed"] and second["ratio_fitted"] is None
    assert first["ratio_bracketed"] and not second["ratio_bracketed"]  # drawn filled and hollow
    assert "edge of grid" in (tmp_path / "t.md").read_text()
    assert (tmp_path / "t.png").exists() and (tmp_path / "t_points.csv").exists()


def test_lr_transfer_keeps_run_lengths_apart(tmp_path):
    # the same size and batch at two run lengths: AdamW's optimum 4e-3 over 10 steps and 2e-3 over 80,
    # AdamS's 1e-3 at both. Pooled, the two lengths would blur into one optimum; kept apart, each is exact.
    runs = []
    for steps, opt, best in ((10, "adamw", 4e-3), (10, "adams", 1e-3), (80, "adamw", 2e-3), (80, "adams", 1e-3)):
        for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
            runs.append(fake_run(tmp_path / f"{opt}_{steps}_{lr}", opt, lr, math.log2(lr / best) ** 2 + 2,
                                 max_iters=steps))
    points, rows = lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "t")])
    assert len(points) == 24 and [r["steps"] for r in rows] == [10, 80]
    assert [r["ratio_fitted"] for r in rows] == [pytest.approx(0.25), pytest.approx(0.5)]
    assert [line.split("|")[3].strip() for line in (tmp_path / "t.md").read_text().splitlines()[2:]] == ["10", "80"]


def test_lr_transfer_keeps_betas_apart(tmp_path):
    # AdamS at beta2 0.95 (best 1e-3) and 0.99 (best 5e-4), AdamW at 0.95 only (best 4e-3): pooled, the
    # two AdamS grids would blur into one optimum; apart, each is exact, and only 0.95 has a ratio
    runs = []
    for opt, beta2, best in (("adamw", 0.95, 4e-3), ("adams", 0.95, 1e-3), ("adams", 0.99, 5e-4)):
        for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
            runs.append(fake_run(tmp_path / f"{opt}_{beta2}_{lr}", opt, lr, math.log2(lr / best) ** 2 + 2,
                                 beta1=0.9, beta2=beta2))
    points, rows = lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "t")])
    assert len(points) == 18 and [r["betas"] for r in rows] == [(0.9, 0.95), (0.9, 0.99)]
    assert rows[0]["ratio_fitted"] == pytest.approx(0.25) and rows[1]["adams_fitted_lr"] == pytest.approx(5e-4)
    assert "adamw_best_lr" not in rows[1] and rows[1].get("ratio_grid") is None
    table = (tmp_path / "t.md").read_text().splitlines()
    assert "β1, β2" in table[0] and [line.split("|")[4].strip() for line in table[2:]] == ["β 0.9, 0.95", "β 0.9, 0.99"]
    assert (tmp_path / "t.png").exists()
    # an --out prefix with a dot keeps it: two prefixes differing after the dot write different files
    for prefix in ("t_b0.95", "t_b0.99"):
        lr_transfer.main([*map(str, runs), "--out", str(tmp_path / prefix)])
    assert {f"{p}{ext}" for p in ("t_b0.95", "t_b0.99") for ext in (".md", ".csv", ".png", "_points.csv")} <= \
        {f.name for f in tmp_path.iterdir()}


def test_lr_transfer_refuses_a_grid_at_two_embedding_multiples(tmp_path):
    # AdamS at 1e-3 with the embedding at 20x and at 40x would otherwise be averaged as two seeds of one
    # grid point; AdamW at another multiple than AdamS's is a fair pairing and stays allowed
    runs = [fake_run(tmp_path / f"adams_{scale}", "adams", 1e-3, 2.0, embedding_lr_scale=scale) for scale in (20.0, 40.0)]
    runs.append(fake_run(tmp_path / "adamw", "adamw", 4e-3, 2.0, embedding_lr_scale=1.0))
    out = tmp_path / "t"
    with pytest.raises(UserError, match="the adams runs at 1,000 params.* mix embedding_lr_scale 20, 40"):
        lr_transfer.main([*map(str, runs), "--out", str(out)])
    assert not any(tmp_path.glob("t*"))  # nothing written
    points, _ = lr_transfer.main([str(runs[0]), str(runs[2]), "--out", str(out)])
    assert [p["optimizer"] for p in points] == ["adams", "adamw"]


def test_lr_transfer_refuses_a_grid_on_two_datasets(tmp_path):
    # the same grid on the full corpus and on a quarter of it would be averaged as seeds of one point
    runs = [fake_run(tmp_path / f"adamw_{d}", "adamw", 4e-3, 2.0, dataset=d) for d in ("pystdlib", "pystdlib_q4")]
    with pytest.raises(UserError, match="the adamw runs at 1,000 params.* mix dataset pystdlib, pystdlib_q4; their losses"):
        lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "t")])
    assert not any(tmp_path.glob("t*"))


def test_lr_transfer_matched_seeds_keeps_each_grid_on_its_shared_seeds(tmp_path):
    # AdamW's loss is (log2(lr / 4e-3))^2 + 2 on seed 1 and 0.5 higher on seed 2, which ran at 4e-3 alone.
    # Pooled, 4e-3 reads 2.25 against neighbours at 3 and the std is 0.354; matched, seed 2 is left out, the
    # point reads 2.0 on one seed and the parabola through 2e-3, 4e-3, 8e-3 puts the optimum at 4e-3 exactly.
    runs = [fake_run(tmp_path / f"w_{lr}_1", "adamw", lr, math.log2(lr / 4e-3) ** 2 + 2) for lr in (2e-3, 4e-3, 8e-3)]
    runs.append(fake_run(tmp_path / "w_4e-3_2", "adamw", 4e-3, 2.5, seed=2))
    points, _ = lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "pooled")])
    assert [(p["n"], p["mean"]) for p in points] == [(1, 3.0), (2, 2.25), (1, 3.0)]
    points, rows = lr_transfer.main([*map(str, runs), "--matched-seeds", "--out", str(tmp_path / "matched")])
    assert [(p["n"], p["mean"]) for p in points] == [(1, 3.0), (1, 2.0), (1, 3.0)]
    assert rows[0]["adamw_fitted_lr"] == pytest.approx(4e-3)
    # a grid whose points share no seed at all is refused, naming it, and nothing is written
    lone = fake_run(tmp_path / "s_1e-3_1", "adams", 1e-3, 2.0, seed=1), fake_run(tmp_path / "s_2e-3_2", "adams", 2e-3, 2.0, seed=2)
    with pytest.raises(UserError, match="the adams grid at 1,000 params, 2,048 tokens/step, 10 steps has no seed"):
        lr_transfer.main([*map(str, runs + list(lone)), "--matched-seeds", "--out", str(tmp_path / "none")])
    assert not any(tmp_path.glob("none*"))


def test_lr_transfer_pairs_adams_with_adamw_seed_by_seed(tmp_path):
    # seed 2 ends 0.3 higher than seed 1 for both optimizers: each grid point's std is 0.212, but AdamS - AdamW
    # is the same on both seeds (+0.1 at 4e-3, -0.2 at 1e-3), so the paired std is 0 up to rounding. AdamS's
    # 5e-4 has no AdamW beside it and AdamW's 1e-3 seed 3 no AdamS: neither is paired. A diverged AdamS run
    # (inf) is a difference of +inf, and a point with one leaves its mean undefined rather than finite.
    runs = []
    for opt, lr, base in (("adamw", 1e-3, 2.5), ("adamw", 4e-3, 2.0), ("adams", 5e-4, 2.4), ("adams", 1e-3, 2.3),
                          ("adams", 4e-3, 2.1)):
        for seed in (1, 2):
            runs.append(fake_run(tmp_path / f"{opt}_{lr}_{seed}", opt, lr, base + 0.3 * (seed - 1), seed))
    runs.append(fake_run(tmp_path / "adamw_1e-3_3", "adamw", 1e-3, 9.0, seed=3))
    for opt, loss in (("adamw", 2.2), ("adams", math.inf)):
        runs.append(fake_run(tmp_path / f"{opt}_1.6e-2_1", opt, 1.6e-2, loss))
    points, _ = lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "t")])
    assert next(p for p in points if (p["optimizer"], p["lr"]) == ("adams", 4e-3))["std"] == pytest.approx(0.3 / 2**0.5)
    with open(tmp_path / "t_paired.csv") as f:
        paired = list(csv.DictReader(f))
    assert [(r["lr"], r["seeds"], r["differences"]) for r in paired] == [
        ("0.001", "1 2", "-0.2000 -0.2000"), ("0.004", "1 2", "+0.1000 +0.1000"), ("0.016", "1", "+inf")]
    assert [float(r["mean"]) for r in paired[:2]] == [pytest.approx(-0.2), pytest.approx(0.1)]
    assert [float(r["std"]) for r in paired[:2]] == [pytest.approx(0, abs=1e-12)] * 2 and math.isnan(float(paired[2]["mean"]))
    # one optimizer alone: nothing to pair, no file, and the figure keeps its two panels
    lr_transfer.main([str(r) for r in runs if "adamw" in r.name] + ["--out", str(tmp_path / "w")])
    assert not (tmp_path / "w_paired.csv").exists() and (tmp_path / "w.png").exists()


def test_cuda_step_host_time_takes_the_triton_branch():
    # results/cpu/cuda_step_host_time.py stubs Triton to time the CUDA step's CPU work; it asserts that
    # each step launched the (stubbed) kernel once, so a refactor that bypasses the branch fails here.
    repo = REPO
    result = subprocess.run([sys.executable, "results/cpu/cuda_step_host_time.py", "--repeats", "5"], cwd=repo,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split() for line in result.stdout.splitlines()[2:]]
    assert [(r[0], int(r[1])) for r in rows] == [("small", 148), ("medium", 292), ("large", 436), ("xl", 580)]
    assert all(0 < float(x) < 100 for r in rows for x in r[2:])


def test_beta2_lr_divides_adamws_best_by_each_beta2s_rbar(tmp_path, capsys):
    # results/analysis/beta2_lr.py on a made-up repo: AdamW best 4e-3 (exact parabola), AdamS at beta2
    # 0.95 (best 1e-3) and 0.99 (best 5e-4); R-bar of the body 4 (geometric mean of 2 and 8) and 5. AdamS
    # at beta1 0.95 (best 2.5e-4) is kept apart and gets no R-bar: the probe's momentum is beta1 0.9
    import importlib.util

    spec = importlib.util.spec_from_file_location("beta2_lr", REPO / "results/analysis/beta2_lr.py")
    beta2_lr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(beta2_lr)
    runs = []
    for opt, beta1, beta2, best in (("adamw", 0.9, 0.95, 4e-3), ("adams", 0.9, 0.95, 1e-3), ("adams", 0.9, 0.99, 5e-4),
                                    ("adams", 0.95, 0.95, 2.5e-4)):
        for lr in (1.25e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
            runs.append(fake_run(tmp_path / "runs" / f"{opt}_{beta1}_{beta2}_{lr}", opt, lr,
                                 math.log2(lr / best) ** 2 + 2, beta1=beta1, beta2=beta2))
    (tmp_path / "results/analysis").mkdir(parents=True)
    lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "results/beta2_lr")])
    for beta2, ratios in ((0.95, (2.0, 8.0)), (0.99, (5.0,))):
        folder = tmp_path / f"results/analysis/noise_scale_beta2/beta2={beta2}"
        folder.mkdir(parents=True)
        with open(folder / "noise_scale.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["run", "iter", "tensor", "measured_ratio", "adams_beta2"])
            writer.writeheader()
            for i, r in enumerate(ratios):  # the whole model's row must not be the one read
                writer.writerow(dict(run="p", iter=i, tensor="body", measured_ratio=r, adams_beta2=beta2))
                writer.writerow(dict(run="p", iter=i, tensor="all", measured_ratio=100.0, adams_beta2=beta2))
    with pytest.raises(UserError, match="does not exist"):
        beta2_lr.main(["--lr", "results/missing"], root=tmp_path)
    table = beta2_lr.main([], root=tmp_path)
    assert [(t["beta1"], t["beta2"]) for t in table] == [(0.9, 0.95), (0.9, 0.99), (0.95, 0.95)]
    assert [t["rbar"] for t in table[:2]] == [pytest.approx(4.0), pytest.approx(5.0)]
    assert math.isnan(table[2]["rbar"])
    assert [t["fitted_lr"] for t in table] == [pytest.approx(1e-3), pytest.approx(5e-4), pytest.approx(2.5e-4)]
    assert table[0]["pure_noise"] == pytest.approx(10**0.5)  # 1/sqrt(c) at (0.9, 0.95)
    out = capsys.readouterr().out
    assert "| 0.9, 0.95 | 4.00 | 3.16 | 0.001 | 0.001 (fit 0.001) | 2.000 (1) | 1.00 |" in out
    assert "| 0.9, 0.99 | 5.00 | 4.01 | 0.0008 | 0.0005 (fit 0.0005) | 2.000 (1) | 1.60 |" in out
    assert "| 0.95, 0.95 | — | 3.67 | — | 0.00025 (fit 0.00025) | 2.000 (1) | — |" in out
    assert (tmp_path / "out/beta2_lr.png").stat().st_size > 0  # the default: under out/, never into results/


def parabola_scans(tmp_path):
    """lr_transfer tables of made-up runs, loss = log2(lr / best)^2 + c, under tmp_path/results, and R-bar 4 for
    AdamS at beta2 0.95: AdamW's best 4e-3 (c = 2.0 + 0.02 seed), AdamS's 1e-3 at beta2 0.95 (c = 2.1 + 0.01 seed)
    and 5e-4 at 0.99, two seeds each. Returns lr_ratio's (scans, rbar)."""
    runs = []
    for opt, beta2, best, c in (("adamw", 0.95, 4e-3, 2.0), ("adams", 0.95, 1e-3, 2.1), ("adams", 0.99, 5e-4, 2.1)):
        for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
            for seed in (1, 2):
                loss = math.log2(lr / best) ** 2 + c + (0.02 if opt == "adamw" else 0.01) * seed
                runs.append(fake_run(tmp_path / "runs" / f"{opt}_{beta2}_{lr}_{seed}", opt, lr, loss, seed=seed,
                                     beta1=0.9, beta2=beta2))
    lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "results/t")])
    (tmp_path / "results/analysis").mkdir()
    scans = (("results/t.csv", "AdamS's β2", "bytes"), ("results/t.csv", "again", "bytes"))  # the second: all seen
    # R-bar along the AdamW run for beta2 0.95 only: the body's geometric mean over checkpoints (2 and 8 -> 4),
    # not the whole model's row, and not another run's
    write_noise_csv(tmp_path / "results/analysis/noise.csv", [("body", 2.0), ("all", 100.0), ("body", 8.0)], run="w")
    write_noise_csv(tmp_path / "results/analysis/noise_other.csv", [("body", 50.0)], run="other")
    rbar = (((1000, 2048, 10, (0.9, 0.95)), "results/analysis/noise.csv", "w"),)
    return scans, rbar


def test_lr_ratio_pairs_each_adams_optimum_with_adamws(tmp_path, capsys, lr_ratio):
    # results/analysis/lr_ratio.py over parabola_scans: ratios 1/4 and 1/8 from the fits, gap 2.115 - 2.03
    # with the two seed stds in quadrature
    scans, rbar = parabola_scans(tmp_path)
    rows = lr_ratio.main([], root=tmp_path, scans=scans, rbar=rbar)
    assert [(r["betas"], r["varied"]) for r in rows] == [((0.9, 0.95), "AdamS's β2"), ((0.9, 0.99), "AdamS's β2")]
    assert [r["ratio"] for r in rows] == [pytest.approx(0.25), pytest.approx(0.125)] and all(r["fitted"] for r in rows)
    assert rows[0]["gap"] == pytest.approx(2.115 - 2.03)
    assert rows[0]["gap_std"] == pytest.approx(math.hypot(0.01, 0.02) / 2**0.5)
    assert rows[0]["rbar"] == pytest.approx(4.0) and math.isnan(rows[1]["rbar"])
    # where AdamS's loss crosses AdamW's at the same lr: two parabolas of equal width differ by a line in
    # log2 lr, so with u = log2(lr / AdamS's best) the difference is 4u - 4 + 0.085 at beta2 0.95 (bests two
    # octaves apart) and 6u - 9 + 0.085 at 0.99 (three apart); zero at u = 0.97875 and 1.485833, i.e. AdamW's
    # best x 2^(u - 2) and x 2^(u - 3). The grid's linear reading is exact for a line. Both crossings lie
    # between 1e-3 and 2e-3, where AdamW's grid reads 6.03 and 3.03 (two and one octaves from its best),
    # so the loss there is the chord's, 6.03 - 3t at u = t (beta2 0.95) and u = 1 + t (0.99), minus 2.03
    assert rows[0]["carry"] == ("=", pytest.approx(2 ** (0.97875 - 2)), pytest.approx(6.03 - 3 * 0.97875 - 2.03))
    assert rows[1]["carry"] == ("=", pytest.approx(2 ** (8.915 / 6 - 3)), pytest.approx(6.03 - 3 * (8.915 / 6 - 1) - 2.03))
    out = capsys.readouterr().out
    # the crossing over AdamS's own best: 2^0.97875 = 1.97 and 2^1.485833 = 2.80
    # AdamW's optimum's low edge: its grid means read 3.03 at 2e-3 and 2.03 at 4e-3, so the line between them
    # reaches 2.03 + 0.01 at 2e-3 x 2^0.99, i.e. AdamW's best x 2^-0.01; over R-bar 4 and AdamS's best (1/4 of
    # AdamW's) that is 2^-0.01 = 0.993
    assert rows[0]["edge"] == pytest.approx(2 ** -0.01)
    assert rows[0]["ratio_wide"] == pytest.approx(0.25) and rows[1]["ratio_wide"] == pytest.approx(0.125)  # exact parabolas
    assert "| AdamS's β2 | 0.001M, bytes, 10 steps × 2,048 tok | 0.25 | 0.25 | 0.25 | 4.00 | 1.00 | 0.99 | +0.085 ± 0.016 | 0.49 " \
        "| 1.97 | +1.064 | +4.085 | 2, 2 |" in out
    # 0.125 and 2.5425: which way the last digit rounds is up to the float
    assert "| AdamS's β2 | 0.001M, bytes, 10 steps × 2,048 tok, AdamS β 0.9, 0.99 | 0.12 | 0.12 | 0.1" in out
    assert "| — | — | — | +0.085 ± 0.016 | 0.35 | 2.80 | +2.54" in out
    # AdamS at AdamW's best grid lr (4e-3), two octaves above AdamS's best at beta2 0.95 and three at 0.99:
    # 4 + 2.115 and 9 + 2.115 (AdamS's seed means), against AdamW's 2.03 there
    assert rows[0]["same_lr"] == pytest.approx(4.085) and rows[1]["same_lr"] == pytest.approx(9.085)
    assert "| +9.085 | 2, 2 |" in out
    # the tokens figure's crossing panel draws a crossing, and leaves a bound (no crossing in the grids) to its marker
    assert lr_ratio.crossing(rows[0]) == pytest.approx(2 ** (0.97875 - 2))
    assert math.isnan(lr_ratio.crossing(dict(carry=("<", 0.33, math.nan)))) and math.isnan(lr_ratio.crossing(dict(carry=None)))
    assert (tmp_path / "out/lr_ratio.png").stat().st_size > 0  # the default: under out/, never into results/
    assert (tmp_path / "out/lr_ratio_tokens.png").stat().st_size > 0
    with pytest.raises(UserError, match="results/missing.csv does not exist"):
        lr_ratio.main([], root=tmp_path, scans=(("results/missing.csv", "x", "y"),), rbar=rbar)
    with pytest.raises(UserError, match="noise_other.csv has no run 'w'"):
        lr_ratio.main([], root=tmp_path, scans=scans, rbar=(((1000, 2048, 10, (0.9, 0.95)), "results/analysis/noise_other.csv", "w"),))
    (tmp_path / "results/t_points.csv").unlink()
    with pytest.raises(UserError, match="t_points.csv does not exist; lr_transfer writes it"):
        lr_ratio.main([], root=tmp_path, scans=scans, rbar=rbar)


def test_start_lr_costs_each_start_against_adams_best_grid_point(tmp_path, capsys, start_lr):
    # AdamW's best grid lr 8e-3 (1.6e-2 diverged, left out); AdamS 1.10, 1.05 and 1.09 at 2e-3, 4e-3 and 8e-3:
    # AdamW's lr costs 1.09 - 1.05, half of it nothing, a quarter 1.10 - 1.05; over R-bar 2^1.5 the start is
    # 2e-3 x 2^0.5, halfway between 2e-3 and 4e-3 in log lr, where the line reads 1.075
    adamw = [(2e-3, 1.2), (4e-3, 1.1), (8e-3, 1.0), (1.6e-2, math.inf)]
    adams = [(1e-3, 1.3), (2e-3, 1.10), (4e-3, 1.05), (8e-3, 1.09)]
    costs = start_lr.start_costs(adamw, adams, 2**1.5)
    assert list(costs.values())[:4] == [pytest.approx(0.04), pytest.approx(0.0), pytest.approx(0.05), pytest.approx(0.025)]
    # no R-bar measured, and an AdamS grid that stops below AdamW's lr: those starts are blank, not guessed
    costs = start_lr.start_costs(adamw, adams[:3], math.nan)
    assert math.isnan(costs["AdamW's lr"]) and math.isnan(costs["AdamW's / R̄"]) and costs["½ of it"] == pytest.approx(0.0)
    # the three-point scans read their best point: with AdamS falling all the way to AdamW's 8e-3, 1e-3-4e-3
    # (an eighth to a half) ends 1.1 - 1.0 short and 2e-3-8e-3 (a quarter to 1x) reaches it; a scan with a
    # point outside AdamS's grid is blank, though its other two points are read
    falling = [(1e-3, 1.3), (2e-3, 1.2), (4e-3, 1.1), (8e-3, 1.0)]
    costs = start_lr.start_costs(adamw, falling, math.nan)
    assert (costs["best of ⅛, ¼, ½"], costs["best of ¼, ½, 1×"]) == (pytest.approx(0.1), pytest.approx(0.0))
    costs = start_lr.start_costs(adamw, falling[:3], math.nan)
    assert costs["best of ⅛, ¼, ½"] == pytest.approx(0.0) and math.isnan(costs["best of ¼, ½, 1×"])
    # over parabola_scans (AdamW best 4e-3, AdamS's 1e-3 at beta2 0.95, R-bar 4): two octaves above AdamS's
    # best cost 4, one octave 1, a quarter and R-bar nothing; AdamS at beta2 0.99 is not at the paper's beta
    scans, rbar = parabola_scans(tmp_path)
    rows = start_lr.main(["--out", str(tmp_path / "start")], root=tmp_path, scans=scans, rbar=rbar)
    assert len(rows) == 1 and list(rows[0]["costs"].values()) == [pytest.approx(v) for v in (4.0, 1.0, 0.0, 0.0, 0.0, 0.0)]
    out = capsys.readouterr().out
    assert "| 20.5 | 0.001M, bytes, 10 steps × 2,048 tok | 0.25 | 4.000 | 1.000 | 0.000 | 0.000 | 0.000 | 0.000 | 2, 2 |" in out
    assert "| below 50 | 1 | 4.000 (0 of 1) | 1.000 (0 of 1) | 0.000 (1 of 1) | 0.000 (1 of 1) | 0.000 (1 of 1) | 0.000 (1 of 1) |" in out
    # against AdamW at its best (2.03 on the seeds' means, AdamS's best 2.115): each cost + 0.085
    assert "| below 50 | 1 | +4.085 | +1.085 | +0.085 | +0.085 | +0.085 | +0.085 |" in out
    assert (tmp_path / "start.png").stat().st_size > 0
    # the counts redrawn from the seeds' standard errors: costs of 1 and 4 nats never fall within 0.01, and with
    # every point's seeds removed (one seed: no noise to redraw) each count is what was read
    assert "- below 50: AdamW's lr 0-0; ½ of it 0-0;" in out
    one_seed = [dict(s, spreads=tuple({lr: (sd, 1) for lr, (sd, _) in sp.items()} for sp in s["spreads"])) for s in rows]
    bands = [("below 50", one_seed)]
    assert "- below 50: AdamW's lr 0-0; ½ of it 0-0; ¼ of it 1-1; AdamW's / R̄ 1-1" in start_lr.resampled(
        one_seed, bands, [n for n, _ in start_lr.STARTS + start_lr.SCANS3], draws=50)


def test_lr_sensitivity_reads_each_miss_and_the_optimums_width(tmp_path, capsys, lr_sensitivity):
    # best grid lr 2e-3 (1.00); x2 too high (4e-3) costs 0.02, x2 too low (1e-3) 0.10. The 0.01 level is crossed a
    # tenth of an octave below (0.01 of the 0.10 rise) and half an octave above (0.01 of 0.02): 0.6 octaves, exact
    curve = [(1e-3, 1.10), (2e-3, 1.00), (4e-3, 1.02), (8e-3, 1.20), (1.6e-2, math.inf)]
    got = lr_sensitivity.sensitivity(curve)
    assert (got["×2 too high"], got["×2 too low"]) == (pytest.approx(0.02), pytest.approx(0.10))
    assert got["width"] == pytest.approx(0.6) and not got["bound"]
    # still within 0.01 at the grid's lowest point: a lower bound, one octave down plus 0.01 / 0.5 of one up;
    # x2 too low lies off the grid, so blank rather than guessed
    edge = [(2e-3, 1.005), (4e-3, 1.0), (8e-3, 1.5)]
    got = lr_sensitivity.sensitivity(edge)
    assert got["width"] == pytest.approx(1.02) and got["bound"] and math.isnan(lr_sensitivity.sensitivity(edge[1:])["×2 too low"])
    # narrower: settled by an exact width below the other's (even a bound), not by a bound alone or a tie
    exact, bound = dict(width=0.6, bound=False), dict(width=1.02, bound=True)
    assert lr_sensitivity.narrower(exact, bound) is True and lr_sensitivity.narrower(bound, exact) is False
    assert lr_sensitivity.narrower(dict(width=2.0, bound=False), bound) is None
    # over parabola_scans (loss = log2(lr / best)^2 + c): every miss costs 1 nat and each optimum is 0.02 octaves
    # wide (0.01 either side, the parabola read as lines); AdamS at beta2 0.99 is not at the paper's beta
    scans, rbar = parabola_scans(tmp_path)
    rows = lr_sensitivity.main(["--out", str(tmp_path / "sens")], root=tmp_path, scans=scans, rbar=rbar)
    assert len(rows) == 1
    out = capsys.readouterr().out
    assert "| 20.5 | 0.001M, bytes, 10 steps × 2,048 tok | 1.000 | 1.000 | 1.000 | 1.000 | 0.0 | 0.0 |" in out
    assert "| below 50 | 1 | 1.000 / 1.000 (AdamS larger in 0 of 1) | 1.000 / 1.000 (AdamS larger in 0 of 1) | 0 of 1 | 0 of 1 (0 wider, 1 not settled) | 0.0 / 0.0 | 0 of 1 |" in out
    assert (tmp_path / "sens.png").stat().st_size > 0


def test_optimum_drift_follows_each_optimum_over_run_length(tmp_path, capsys, optimum_drift):
    # the slope of log2 optimum on log2 run length, as a factor per doubling: halving each doubling reads 0.5
    assert optimum_drift.drift([100, 200, 400], [4e-3, 2e-3, 1e-3]) == pytest.approx(0.5)
    assert optimum_drift.drift([100, 400], [1e-3, 1e-3]) == pytest.approx(1.0)
    # one model at 10 and 40 steps (20.5 and 81.9 tokens per parameter, two doublings), loss = log2(lr / best)^2:
    # AdamW's best falls from 4e-3 to 1e-3 (spread 4, x0.5 per doubling), AdamS's stays at 1e-3 (spread 1, x1)
    runs = []
    for steps, adamw_best in ((10, 4e-3), (40, 1e-3)):
        for opt, best in (("adamw", adamw_best), ("adams", 1e-3)):
            for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
                runs.append(fake_run(tmp_path / "runs" / f"{opt}_{steps}_{lr}", opt, lr, math.log2(lr / best) ** 2 + 2.0,
                                     max_iters=steps, beta1=0.9, beta2=0.95))
    lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "results/t")])
    scans = (("results/t.csv", "run length", "bytes"),)
    (m,) = optimum_drift.main(["--out", str(tmp_path / "drift")], root=tmp_path, scans=scans, rbar=())
    assert m["tpp"] == [pytest.approx(20.48), pytest.approx(81.92)]
    assert m["spread"] == dict(AdamW=pytest.approx(4.0), AdamS=pytest.approx(1.0))
    assert m["carried"] == dict(AdamW=pytest.approx(0.25), AdamS=pytest.approx(1.0))
    # at the longest run (82 tokens per parameter: a quarter of AdamW's lr), AdamS's shortest-run best (1e-3) and a
    # quarter of AdamW's shortest-run best (4e-3 / 4) land on AdamS's best; a quarter of AdamW's longest-run best
    # (2.5e-4) is two octaves below it: log2(1/4)^2 = 4 nats
    assert list(m["costs"].values()) == [pytest.approx(0.0), pytest.approx(0.0), pytest.approx(4.0)]
    assert m["drift"] == dict(AdamW=pytest.approx(0.5), AdamS=pytest.approx(1.0))
    out = capsys.readouterr().out
    assert "| 1K, bytes, 2,048 tok | 20, 82 | 0.004, 0.001 | 0.001, 0.001 | 4.00 / 1.00 | 0.25 / 1.00 | 0.50 / 1.00 | 1, 1 |" in out
    assert "AdamS's spread the smaller in 1 of 1 models" in out and "within ×2 of the longest's in 0 (AdamW) and 1 (AdamS) of 1" in out
    assert "| 1K, bytes, 2,048 tok | 20.5 → 81.9 | 0.000 | 0.000 | 4.000 |" in out
    assert "¼ or ½ of AdamW's best on the longest run: 0 of 1, worst 4.000" in out
    assert (tmp_path / "drift.png").stat().st_size > 0
    # a model at one run length has nothing to drift over: a clear error, not an empty table
    scans, rbar = parabola_scans(tmp_path / "one")
    with pytest.raises(UserError, match="no model was scanned at two or more run lengths"):
        optimum_drift.main(["--out", str(tmp_path / "none")], root=tmp_path / "one", scans=scans, rbar=rbar)


def test_lr_ratio_carry_over_reads_the_shared_lr_range_only(lr_ratio):
    carry_over = lr_ratio.carry_over
    adamw = [(1e-3, 2.0), (2e-3, 1.9)]
    # AdamS behind at both shared lrs (its 4e-3 point lies outside AdamW's grid, read at 2e-3 as 2.3): a bound
    assert carry_over(adamw, [(1e-3, 2.1), (4e-3, 2.5)]) == ("<", pytest.approx(1e-3), 2.0)
    assert carry_over(adamw, [(5e-4, 1.5), (4e-3, 1.8)]) == (">", pytest.approx(2e-3), pytest.approx(1.9))
    # no shared range: apart, or touching at one lr
    assert carry_over(adamw, [(4e-3, 1.0), (8e-3, 1.0)]) is None
    assert carry_over(adamw, [(5e-4, 1.0), (1e-3, 1.0)]) is None
    # two crossings upward: the higher one, midway in log lr between 4e-3 and 8e-3; a diverged point is left out
    flat = [(lr, 2.0) for lr in (1e-3, 2e-3, 4e-3, 8e-3)]
    wavy = [(1e-3, 1.9), (2e-3, 2.1), (4e-3, 1.9), (8e-3, 2.1), (1.6e-2, math.inf)]
    assert carry_over(flat, wavy) == ("=", pytest.approx((4e-3 * 8e-3) ** 0.5), pytest.approx(2.0))
    with pytest.raises(ValueError, match="outside the grid"):
        lr_ratio.read([(0.0, 1.0), (1.0, 2.0)], 1.5)


def test_lr_ratio_joins_one_models_runs_of_different_lengths(lr_ratio):
    # the tokens figure draws a line through settings that differ in steps only: here the 33K model at 400,
    # 1,600 and 3,200 steps (shortest first; the 3,200-step one from another scan), not its single 800-step run
    # at another batch, another model, AdamS at another beta2 over the same runs, or the same model on other text
    def row(params, batch, steps, betas=(0.9, 0.95), varied="run length", text="bytes"):
        return dict(varied=varied, text=text, params=params, batch_tokens=batch, steps=steps, betas=betas)
    rows = [row(32928, 2048, 1600), row(32928, 8192, 800), row(115008, 2048, 5625), row(32928, 2048, 400),
            row(32928, 2048, 400, betas=(0.9, 0.99)), row(32928, 2048, 3200, varied="width"),
            row(32928, 2048, 6400, text="GPT-2 tokens")]
    groups = lr_ratio.lengths(rows)
    assert [[r["steps"] for r in g] for g in groups] == [[400, 1600, 3200]]
    assert lr_ratio.tokens_per_param(rows[0]) == pytest.approx(2048 * 1600 / 32928)
    assert [lr_ratio.size(n) for n in (32928, 115008, 823296, 3213568, 124475904)] == ["33K", "115K", "0.82M", "3.2M", "124M"]


def test_lr_ratio_low_edge_is_the_lowest_lr_within_reach_of_the_best(lr_ratio):
    low_edge = lr_ratio.low_edge
    # a plateau: 2e-3 and 8e-3 within 0.01 of the best (4e-3), 1e-3 0.1 above it: from 1e-3 to 2e-3 the line
    # falls from 2.1 to 2.005 and crosses 2.01 a fraction (2.1 - 2.01) / 0.095 of the way, in log lr (unsorted
    # input; a diverged point is left out)
    curve = [(8e-3, 2.008), (1e-3, 2.1), (4e-3, 2.0), (2e-3, 2.005), (1.6e-2, math.nan)]
    assert low_edge(curve, 0.01) == pytest.approx(1e-3 * 2 ** (0.09 / 0.095))
    assert low_edge(curve, 0.0) == pytest.approx(4e-3)  # within nothing: the best grid point
    assert low_edge(curve, 0.2) == pytest.approx(1e-3)  # the grid's lowest lr is already within reach
    # the line is read in log lr: from 3.0 at 1e-3 to 1.0 at 4e-3 it passes 2.0 at 2e-3, not at 2.5e-3
    assert low_edge([(1e-3, 3.0), (4e-3, 1.0)], 1.0) == pytest.approx(2e-3)


def test_lr_ratio_prints_a_bound_where_the_grids_do_not_cross(tmp_path, capsys, lr_ratio):
    # loss = log2(lr / best)^2 + c: AdamW's best 4e-3 (c = 2), AdamS's 1e-3 (c = 1). In the lrs both grids
    # span, 1e-3 to 2e-3, AdamS is ahead (1 against 6, 2 against 3), so AdamW's lr carries over at least
    # to 2e-3: 0.5x AdamW's best and 2x AdamS's, with no loss at a crossing to report
    runs = [fake_run(tmp_path / "runs" / f"{opt}_{lr}", opt, lr, math.log2(lr / best) ** 2 + c, beta1=0.9, beta2=0.95)
            for opt, best, c, lrs in (("adamw", 4e-3, 2.0, (1e-3, 2e-3, 4e-3, 8e-3)),
                                      ("adams", 1e-3, 1.0, (2.5e-4, 5e-4, 1e-3, 2e-3)))
            for lr in lrs]
    lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "results/t")])
    (tmp_path / "results/analysis").mkdir()
    rows = lr_ratio.main([], root=tmp_path, scans=(("results/t.csv", "batch", "bytes"),), rbar=())
    assert rows[0]["carry"] == (">", pytest.approx(0.5), pytest.approx(3.0 - 2.0))
    # AdamS's grid stops at 2e-3, below AdamW's best 4e-3: what AdamW's lr costs AdamS is not measured
    assert math.isnan(rows[0]["same_lr"])
    assert "| 0.25 | 0.25 | 0.25 | — | — | — | -1.000 ± 0.000 | > 0.50 | > 2.00 | — | — | 1, 1 |" in capsys.readouterr().out
    # the same table named on the command line instead of in SCANS: the scan is named for the file
    rows = lr_ratio.main(["--tables", str(tmp_path / "results/t.csv"), "--out", str(tmp_path / "named")], rbar=())
    assert [(r["varied"], r["ratio"]) for r in rows] == [("t", pytest.approx(0.25))]
    assert "| t | 0.001M, 10 steps × 2,048 tok | 0.25 |" in capsys.readouterr().out
    assert (tmp_path / "named.png").is_file()
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="other.csv is not a table scripts/lr_transfer.py wrote"):
        lr_ratio.main(["--tables", str(tmp_path / "other.csv"), "--out", str(tmp_path / "nothing")], rbar=())
    assert not (tmp_path / "nothing.png").exists()


def test_lr_ratio_at_adamw_best_reads_adams_in_log_lr(lr_ratio):
    at_adamw_best = lr_ratio.at_adamw_best
    adamw = [(1e-3, 2.5), (4e-3, 2.0), (1.6e-2, math.nan), (8e-3, 2.2)]  # best 4e-3; a diverged point left out
    # AdamS from 2.0 at 2e-3 to 3.0 at 8e-3: at 4e-3, halfway in log lr, 2.5, against AdamW's 2.0
    assert at_adamw_best(adamw, [(8e-3, 3.0), (2e-3, 2.0)]) == pytest.approx(0.5)
    assert at_adamw_best(adamw, [(4e-3, 1.9), (8e-3, math.inf)]) == pytest.approx(-0.1)  # a grid point itself
    # AdamS's grid ends below 4e-3 once its diverged point is left out: not measured
    assert math.isnan(at_adamw_best(adamw, [(1e-3, 2.0), (2e-3, 2.1), (4e-3, math.inf)]))
    assert math.isnan(at_adamw_best(adamw, [(8e-3, 2.0), (1.6e-2, 2.1)]))


def test_lr_ratio_wide_fit_is_least_squares_over_up_to_five_points(lr_ratio):
    wide_fit = lr_ratio.wide_fit
    lrs = [math.exp(x) for x in range(7)]  # log lr = 0 .. 6
    # an exact parabola in log lr is recovered from any window, whatever its points' order
    assert wide_fit([(lr, (math.log(lr) - 2.6) ** 2) for lr in reversed(lrs)]) == pytest.approx(math.exp(2.6))
    # |log lr - 3|, symmetric about 3 in the five points 1..5 around the best: the fit's vertex is 3 by symmetry,
    # and the points at 0 and 6 (outside the window) are ignored even where they would tilt it
    curve = [(lr, abs(math.log(lr) - 3)) for lr in lrs]
    curve[0] = (lrs[0], 100.0)
    assert wide_fit(curve) == pytest.approx(math.exp(3))
    # four points in reach, 1 0 0 1 at log lr 0..3 (best at 1, the first of the tie): symmetric about 1.5
    assert wide_fit([(lrs[i], y) for i, y in enumerate((1.0, 0.0, 0.0, 1.0))]) == pytest.approx(math.exp(1.5))
    # the steeper side pulls the vertex away from it: 1 before, 4 after the minimum at log lr 2 (the
    # normal equations by hand: b = 27/10 over centred log lr, a = 35/14, vertex 2 - 2.7/5)
    assert wide_fit([(lrs[i], y) for i, y in enumerate((4.0, 1.0, 0.0, 4.0, 16.0))]) == pytest.approx(math.exp(2 - 0.54))
    # no fit: the best at the grid's edge, three points only (the three-point parabola's job), a diverged point
    # that leaves three
    assert wide_fit([(lrs[i], y) for i, y in enumerate((0.0, 1.0, 2.0, 3.0))]) is None
    assert wide_fit([(lrs[i], y) for i, y in enumerate((1.0, 0.0, 1.0))]) is None
    assert wide_fit([(lrs[i], y) for i, y in enumerate((1.0, 0.0, 1.0, math.inf))]) is None


def write_noise_csv(path, tensor_ratios, run="a"):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["run", "iter", "tensor", "measured_ratio"])
        writer.writeheader()
        writer.writerows(dict(run=run, iter=i, tensor=t, measured_ratio=r) for i, (t, r) in enumerate(tensor_ratios))


def test_embedding_lr_puts_each_optimizers_embedding_on_adamws_lr_scale(tmp_path, capsys):
    # R_emb is the geometric mean of the embedding's rows (2 and 8 -> 4); CSVs from before the
    # 'embedding' row existed fall back to the tied wte tensor; with neither it is an error
    noise = tmp_path / "noise.csv"
    write_noise_csv(noise, [("embedding", 2.0), ("embedding", 8.0), ("transformer.wte.weight", 100.0), ("body", 3.0)])
    assert embedding_lr.embedding_ratios(noise) == {"a": pytest.approx(4.0)}
    write_noise_csv(noise, [("transformer.wte.weight", 1.5), ("transformer.wte.weight", "nan"), ("body", 3.0)])
    assert embedding_lr.embedding_ratios(noise) == {"a": pytest.approx(1.5)}
    write_noise_csv(tmp_path / "bad.csv", [("body", 3.0)])
    with pytest.raises(UserError, match="no measured ratio for the token embedding"):
        embedding_lr.embedding_ratios(tmp_path / "bad.csv")

    runs = [fake_run(tmp_path / "w1", "adamw", 2e-3, 3.0),  # made before embedding_lr_scale existed: scale 1
            fake_run(tmp_path / "w4", "adamw", 2e-3, 2.9, embedding_lr_scale=4),
            fake_run(tmp_path / "s2", "adams", 1e-3, 3.1, embedding_lr_scale=2),
            fake_run(tmp_path / "s8", "adams", 1e-3, 2.95, embedding_lr_scale=8),
            fake_run(tmp_path / "alone", "adams", 3e-3, 3.5)]  # one scale only: no line
    out = embedding_lr.main([*map(str, runs), "--noise", str(noise), "--out", str(tmp_path / "e")])
    effective = {Path(r["run"]).name: r["effective_embedding_lr"] for r in out}
    assert effective == pytest.approx(dict(w1=2e-3, w4=8e-3, s2=1e-3 * 2 * 1.5, s8=1e-3 * 8 * 1.5, alone=3e-3 * 1.5))
    with open(tmp_path / "e.csv") as f:
        assert sorted(Path(r["run"]).name for r in csv.DictReader(f)) == ["s2", "s8", "w1", "w4"]
    assert (tmp_path / "e.png").stat().st_size > 0
    # s2 (effective 3e-3) against AdamW's line between 2e-3 (3.0) and 8e-3 (2.9), in log lr:
    # 3.0 - 0.1 * ln(1.5) / ln(4) = 2.97075; s8 (1.2e-2) is past AdamW's last point: no row
    matched = embedding_lr.matched_differences(embedding_lr.lines(out))
    assert [Path(m["run"]["run"]).name for m in matched] == ["s2"]
    assert matched[0]["adamw_val_loss"] == pytest.approx(2.97075, abs=1e-5)
    assert matched[0]["difference"] == pytest.approx(3.1 - 2.97075, abs=1e-5)
    assert "mean difference +0.129 over 1 runs" in capsys.readouterr().out
    with pytest.raises(UserError, match="more than one embedding_lr_scale"):
        embedding_lr.main([str(runs[-1]), "--noise", str(noise), "--out", str(tmp_path / "f")])


def test_embedding_lr_fits_r_emb_growing_with_the_embeddings_lr(tmp_path, capsys):
    # Two AdamW runs measured at embedding lr 1e-3 (R_emb 2) and 4e-3 (R_emb 4): R_emb = 2·sqrt(a / 1e-3),
    # p = 1/2. AdamS at embedding lr η steps as AdamW at a = η·R_emb(a), i.e. sqrt(a) = 2η / sqrt(1e-3),
    # a = 4η² / 1e-3: 4e-3 at η = 1e-3 (where R_emb is 4), 1e-3 at η = 5e-4 (where it is 2)
    assert embedding_lr.ratio_law([(1e-3, 2.0), (4e-3, 4.0)]) == pytest.approx((2 / 1e-3 ** 0.5, 0.5))
    assert embedding_lr.ratio_law([(1e-3, 2.0), (1e-3, 8.0)]) == pytest.approx((4.0, 0.0))  # one lr: constant
    k, p = embedding_lr.ratio_law([(1e-3, 2.0), (4e-3, 4.0)])
    assert embedding_lr.effective_lr(1e-3, k, p) == pytest.approx(4e-3)
    assert embedding_lr.effective_lr(5e-4, k, p) == pytest.approx(1e-3)
    with pytest.raises(UserError, match="no lr of AdamW's matches"):
        embedding_lr.ratio_law([(1e-3, 1.0), (2e-3, 4.0)])  # R_emb growing as a²: AdamS always runs ahead

    root = tmp_path / "runs"
    w1 = fake_run(root / "adamw" / "w1", "adamw", 1e-3, 3.0)
    w4 = fake_run(root / "adamw" / "w4", "adamw", 1e-3, 2.8, embedding_lr_scale=4)
    s1 = fake_run(root / "adams" / "s1", "adams", 5e-4, 3.1)
    s2 = fake_run(root / "adams" / "s2", "adams", 5e-4, 2.9, embedding_lr_scale=2)
    write_noise_csv(tmp_path / "n1.csv", [("embedding", 2.0)], run="adamw/w1")
    write_noise_csv(tmp_path / "n4.csv", [("embedding", 4.0)], run="adamw/w4")
    out = embedding_lr.main([str(s1), str(s2), str(w1), str(w4), "--noise", str(tmp_path / "n1.csv"),
                             str(tmp_path / "n4.csv"), "--out", str(tmp_path / "e")])
    effective = {Path(r["run"]).name: r["effective_embedding_lr"] for r in out}
    assert effective == pytest.approx(dict(w1=1e-3, w4=4e-3, s1=1e-3, s2=4e-3))
    # s1 sits on w1 (3.1 - 3.0) and s2 on w4 (2.9 - 2.8)
    assert "mean difference +0.100 over 2 runs" in capsys.readouterr().out
    write_noise_csv(tmp_path / "n4.csv", [("embedding", 4.0)], run="elsewhere/w4")
    with pytest.raises(UserError, match="cannot find the measured run 'elsewhere/w4'"):
        embedding_lr.main([str(s1), str(s2), str(w1), str(w4), "--noise", str(tmp_path / "n1.csv"),
                           str(tmp_path / "n4.csv"), "--out", str(tmp_path / "e")])


BY_PATH = sorted(p.relative_to(REPO).as_posix() for p in [*REPO.glob("scripts/[a-z]*.py"), *REPO.glob("data/*/prepare.py")])


@pytest.fixture(scope="module")
def help_runs(tmp_path_factory):
    """script -> (its folder, the future of `python <script> --help` run there), all started together."""
    folders = {script: tmp_path_factory.mktemp("help") for script in ["train.py", *BY_PATH]}
    futures = start_together({script: [sys.executable, str(REPO / script), "--help"] for script in folders},
                             cwd=folders.get, timeout=180)
    return {script: (folders[script], futures[script]) for script in folders}


@pytest.mark.parametrize("script", ["train.py", *BY_PATH])
def test_every_script_runs_by_path_from_anywhere(script, help_runs):
    # the README names scripts by path, so `python scripts/x.py` from any folder must import the repo's modules
    folder, future = help_runs[script]
    result = future.result()
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage" in result.stdout.lower() or "keys (default, meaning)" in result.stdout, result.stdout[:500]
    assert not any(folder.iterdir()), "--help wrote files"
    flat = " ".join(result.stdout.split())  # argparse wraps the help: one line to search
    assert "(default: None)" not in flat  # an option without a default says what happens instead, or nothing
    assert not re.search(r"\(default:[^)]*\)[^-]*\(default:", flat), "an option shows its default twice"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("stages, message", [([], "usage"), (["optim", "nonsense"], "unknown stage 'nonsense'"),
                                             (["tests", "optim"], "no CUDA GPU visible")])
def test_gpu_checks_refuses_clearly_and_writes_nothing_without_a_gpu(stages, message, tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "gpu")}
    result = subprocess.run(["bash", str(REPO / "scripts/gpu_checks.sh"), *stages], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert not (tmp_path / "gpu").exists()


@pytest.mark.parametrize("points", ["adams", "adamx:1e-3", "adams:"])
def test_gpu_checks_lr_refuses_a_malformed_point_before_anything_runs(points, tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "gpu"), "LR_POINTS": f"adamw:6e-4 {points}"}
    result = subprocess.run(["bash", str(REPO / "scripts/gpu_checks.sh"), "lr"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 2 and f"LR_POINTS entry '{points}'" in result.stderr, result.stderr
    assert not (tmp_path / "gpu").exists()


def test_gpu_checks_lr_refuses_an_unknown_corpus_before_anything_runs(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "gpu"), "LR_CORPUS": "openwebtext"}
    result = subprocess.run(["bash", str(REPO / "scripts/gpu_checks.sh"), "lr"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 2 and "LR_CORPUS='openwebtext'" in result.stderr, result.stderr
    assert not (tmp_path / "gpu").exists()


def test_tune_triton_settings_are_the_warp_counts_triton_accepts():
    from scripts.tune_triton import settings

    # fp32: 8 KiB = 2,048 elements; /32 threads a warp /16 elements a thread = 4 warps (the kernel's setting)
    assert settings(torch.float32, [8192], [16]) == [(8192, 16, 4)]
    # bf16: 4,096 elements; 4 elements a thread would be 32 warps (kept), 2 would be 64 (dropped)
    assert settings(torch.bfloat16, [8192], [2, 4, 16]) == [(8192, 4, 32), (8192, 16, 8)]
    assert settings(torch.float32, [4096], [64]) == []  # 1,024 elements cannot fill a warp at 64 each


def test_tune_triton_refuses_clearly_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here; the refusal is for machines without one")
    with pytest.raises(UserError, match="needs a CUDA GPU and Triton"):
        from scripts.tune_triton import main

        main([])


def test_tune_triton_times_each_setting_and_restores_the_kernels_own(monkeypatch, tmp_path, capsys):
    """The loop around the timing, with the GPU faked: each setting reaches the kernel module while it is
    timed, the kernel's constants come back afterwards, and the JSON holds one row per setting."""
    from optim import _triton_fused
    from scripts import tune_triton

    seen = []

    def fake_bench(size, small, dtype, device, repeats, only):
        seen.append((dtype, *_triton_fused.SETTINGS[dtype.itemsize]))
        yield dict(optimizer="adamw fused (torch)", ms=1.0, gbps=1.0, ratio_to_adamw_fused=1.0)
        ms = _triton_fused.SETTINGS[dtype.itemsize][0] / 8192
        yield dict(optimizer="adams fused", ms=ms, gbps=100 / ms, ratio_to_adamw_fused=ms)

    monkeypatch.setattr(tune_triton.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune_triton.torch.cuda, "get_device_name", lambda *a: "fake GPU")
    monkeypatch.setattr(tune_triton._triton_fused, "available", lambda: True)
    monkeypatch.setattr(tune_triton, "copy_bandwidth", lambda *a: 200.0)
    monkeypatch.setattr(tune_triton, "bench", fake_bench)
    before = dict(_triton_fused.SETTINGS)
    result = tune_triton.main(["--dtypes", "float32", "--block-bytes", "4096", "8192", "--elements", "8", "16",
                               "--json", str(tmp_path / "t.json")])
    assert seen == [(torch.float32, 4096, 8), (torch.float32, 4096, 16), (torch.float32, 8192, 8), (torch.float32, 8192, 16)]
    assert _triton_fused.SETTINGS == before
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert rows == result["rows"] and [r["warps"] for r in rows] == [4, 2, 8, 4]
    assert [r["pct_copy"] for r in rows] == [100.0, 100.0, 50.0, 50.0]
    assert sum(r["default"] for r in rows) == (before[4] in {(4096, 8), (4096, 16), (8192, 8), (8192, 16)})
    table = capsys.readouterr().out.splitlines()
    assert table[-4].split()[:2] == ["4096", "8"] and table[-1].split()[:2] == ["8192", "16"]  # fastest first


# where the faked Python says torch is (the real one would take seconds to import torch and say)
FAKE_TORCH = "/fake/site-packages/torch"


def test_gpu_checks_lr_and_rbar_commands(tmp_path):
    """The lr and rbar stages' commands, with Python faked (no GPU here) in a copy of the script's folder
    layout: each sweep gets the scan's shared settings first and the stage's own and LR_EXTRA after them
    (a later --set wins), the corpus is prepared once for both stages, and noise_scale reads the rbar run."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "config").mkdir()
    shutil.copy(REPO / "scripts/gpu_checks.sh", root / "scripts")
    for opt in ("adamw", "adams"):
        (root / f"config/train_gpt2_small_{opt}.py").write_text("")
    log, shim = tmp_path / "calls.txt", tmp_path / "python"
    shim.write_text(f"""#!/usr/bin/env bash
if [ "$1" = -c ]; then case $2 in *cuda*) echo fake GPU; exit 0 ;; *torch.__file__*) echo {FAKE_TORCH}; exit 0 ;;
  *) exec {sys.executable} "$@" ;; esac; fi
echo "$*" >> {log}
[ "$2" != data.pystdlib.prepare ] || {{ mkdir -p data/sitesrc_gpt2 && touch data/sitesrc_gpt2/val.bin; }}
prev=; for a; do [ "$prev" != --out ] || mkdir -p "$a"; prev=$a; done
""")
    shim.chmod(0o755)
    extra = "--set max_iters=200 --set gradient_accumulation_steps=15"
    env = {**os.environ, "PYTHON": str(shim), "OUT": str(tmp_path / "gpu"), "LR_CORPUS": "site", "LR_OUT": "lr_x",
           "LR_POINTS": "adamw:1.8e-3 adams:6e-4", "LR_EXTRA": extra}
    result = subprocess.run(["bash", str(root / "scripts/gpu_checks.sh"), "lr", "rbar"], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    assert [c for c in calls if "data.pystdlib.prepare" in c] == [  # LR_CORPUS=site: the folder holding torch's
        f"-m data.pystdlib.prepare --stdlib {Path(FAKE_TORCH).parent} --tokenizer tiktoken:gpt2 --out data/sitesrc_gpt2"]
    sweeps = [c for c in calls if "scripts.sweep" in c]
    assert [c.split()[2] for c in sweeps] == [f"config/train_gpt2_small_{o}.py" for o in ("adamw", "adams", "adamw")]
    assert [c.split("--out ")[1] for c in sweeps] == ["out/lr_x/adamw", "out/lr_x/adams", "out/rbar"]
    for c, lr in zip(sweeps, ("1.8e-3", "6e-4", "6e-4")):
        assert f"--grid learning_rate={lr} " in c and "--set dataset=sitesrc_gpt2 " in c
    for c in sweeps[:2]:
        assert c.index("--set max_iters=600") < c.index(extra)
    assert extra not in sweeps[2]
    assert sweeps[2].index("--set always_save_checkpoint=False") < sweeps[2].index("--set always_save_checkpoint=True")
    assert "--set keep_checkpoints=6" in sweeps[2]
    assert [c for c in calls if "noise_scale" in c][0].startswith("-m scripts.noise_scale out/rbar/learning_rate=6e-4_seed=1 --device cuda")
    assert (tmp_path / "gpu/lr_x.tar.gz").is_file() and (tmp_path / "gpu/rbar/run.tar.gz").is_file()


def test_gpu_checks_stops_when_the_corpus_cannot_be_built(tmp_path):
    """A failed tokenization (say, GPT-2's BPE files unreachable) stops the stage before any run starts."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "config").mkdir()
    shutil.copy(REPO / "scripts/gpu_checks.sh", root / "scripts")
    (root / "config/train_gpt2_small_adamw.py").write_text("")
    log, shim = tmp_path / "calls.txt", tmp_path / "python"
    shim.write_text(f"""#!/usr/bin/env bash
if [ "$1" = -c ]; then case $2 in *cuda*) echo fake GPU; exit 0 ;; *torch.__file__*) echo {FAKE_TORCH}; exit 0 ;;
  *) exec {sys.executable} "$@" ;; esac; fi
echo "$*" >> {log}
[ "$2" != data.pystdlib.prepare ] || {{ echo "no BPE files" >&2; exit 1; }}
""")
    shim.chmod(0o755)
    env = {**os.environ, "PYTHON": str(shim), "OUT": str(tmp_path / "gpu"), "LR_POINTS": "adamw:6e-4"}
    for stage in ("lr", "rbar"):
        result = subprocess.run(["bash", str(root / "scripts/gpu_checks.sh"), stage], capture_output=True, text=True,
                                env=env, timeout=120)
        assert result.returncode != 0 and "no BPE files" in result.stderr, result.stderr
    assert not any("scripts.sweep" in c for c in log.read_text().splitlines())


def test_gpu_checks_help_names_the_stages():
    result = subprocess.run(["bash", str(REPO / "scripts/gpu_checks.sh"), "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "bash scripts/gpu_checks.sh tests optim" in result.stdout, result.stderr


def _fake_run(root: Path, optimizer: str, lr: float, seed: int, losses: dict[int, float]) -> Path:
    """A run folder with just what the analysis scripts read: config.json and eval lines."""
    d = root / f"{optimizer}_{lr}_{seed}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"config": dict(optimizer=optimizer, learning_rate=lr, seed=seed)}))
    (d / "metrics.jsonl").write_text("".join(json.dumps(dict(kind="eval", iter=i, val_loss=v)) + "\n"
                                             for i, v in losses.items()))
    return d


def test_step_matched_reads_adams_on_adamws_grid_at_lr_times_rbar(tmp_path):
    runs = [_fake_run(tmp_path, "adamw", 1e-3, 1, {10: 3.0, 20: 2.0}),
            _fake_run(tmp_path, "adamw", 4e-3, 1, {10: 4.0, 20: 3.0}),
            _fake_run(tmp_path, "adams", 1e-3, 1, {10: 3.2, 20: 2.9}),  # x 2 = 2e-3: half way in log lr
            _fake_run(tmp_path, "adams", 1e-3, 2, {10: 3.4, 20: 2.7}),  # a second seed: averaged
            _fake_run(tmp_path, "adams", 4e-3, 1, {10: 9.0, 20: 9.0})]  # x 2 = 8e-3: outside AdamW's grid
    rows = step_matched.main([*map(str, runs), "--rbar", "2", "--at", "10", "20", "--out", str(tmp_path / "m")])
    inside, outside = rows
    # by hand: AdamW at 2e-3 is the mean of its losses at 1e-3 and 4e-3 (log(2e-3) is their log midpoint)
    assert inside["adamw_equivalent_lr"] == pytest.approx(2e-3)
    assert inside["adamw_10"] == pytest.approx(3.5) and inside["adamw_20"] == pytest.approx(2.5)
    assert inside["adams_10"] == pytest.approx(3.3) and inside["adams_20"] == pytest.approx(2.8)
    assert inside["minus_10"] == pytest.approx(-0.2) and inside["minus_20"] == pytest.approx(0.3)
    assert inside["adams_drop"] == pytest.approx(0.5) and inside["adamw_drop"] == pytest.approx(1.0)
    assert inside["seeds"] == 2
    assert outside["adamw_20"] is None and outside["minus_20"] is None
    assert (tmp_path / "m.md").exists() and (tmp_path / "m.png").exists()


def test_step_matched_refuses_bad_input(tmp_path):
    w = _fake_run(tmp_path, "adamw", 1e-3, 1, {10: 3.0})
    s = _fake_run(tmp_path, "adams", 1e-3, 1, {10: 3.0, 20: 2.0})
    with pytest.raises(UserError, match="argument --rbar: must be a finite number > 0, got '0'"):
        step_matched.main([str(w), str(s), "--rbar", "0", "--out", str(tmp_path / "m")])
    with pytest.raises(UserError, match="no adams run among the given folders"):
        step_matched.main([str(w), "--rbar", "3", "--out", str(tmp_path / "m")])
    with pytest.raises(UserError, match="not every run has an evaluation at step 20; steps all share: 10"):
        step_matched.main([str(w), str(s), "--rbar", "3", "--at", "20", "--out", str(tmp_path / "m")])
    with pytest.raises(UserError, match="is not a run folder"):
        step_matched.main([str(tmp_path), "--rbar", "3", "--out", str(tmp_path / "m")])
    longer = _fake_run(tmp_path, "adams", 2e-3, 1, {10: 3.0})
    saved = json.loads((longer / "config.json").read_text())
    saved["config"]["max_iters"] = 10_000  # another run length: not comparable
    (longer / "config.json").write_text(json.dumps(saved))
    with pytest.raises(UserError, match="differ in max_iters .* compare runs of one setting at a time"):
        step_matched.main([str(w), str(s), str(longer), "--rbar", "3", "--out", str(tmp_path / "m")])
    assert not (tmp_path / "m.csv").exists()


def test_repetition_reads_one_setting_of_a_points_table(tmp_path):
    # results/analysis/repetition.py: of a points table holding two settings, it keeps the asked one only
    import importlib.util

    spec = importlib.util.spec_from_file_location("repetition", REPO / "results/analysis/repetition.py")
    repetition = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(repetition)
    points = tmp_path / "points.csv"
    rows = [("adamw", 100, 4e-3, 1.5), ("adams", 100, 1e-3, 1.4), ("adams", 100, 2e-3, 1.3), ("adams", 200, 1e-3, 9.0)]
    points.write_text("params,batch_tokens,steps,betas,optimizer,lr,n,mean,std\n" + "".join(
        f'7,2048,{steps},"(0.9, 0.95)",{opt},{lr},2,{mean},0.01\n' for opt, steps, lr, mean in rows))
    assert repetition.grid(points, 7, 100) == {"adamw": {4e-3: (1.5, 0.01)}, "adams": {1e-3: (1.4, 0.01), 2e-3: (1.3, 0.01)}}
    with pytest.raises(UserError, match="no AdamW and AdamS grids at 7 parameters and 200 steps"):
        repetition.grid(points, 7, 200)
    with pytest.raises(UserError, match="missing"):
        repetition.grid(tmp_path / "none.csv", 7, 100)


def test_run_length_pairs_finished_runs_by_seed_at_shared_evaluations(tmp_path):
    # results/analysis/run_length.py: AdamS - AdamW at each evaluation both made (step 0 left out),
    # only where both runs of a seed finished; tokens per parameter from the run's derived sizes
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_length", REPO / "results/analysis/run_length.py")
    run_length = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_length)

    def run(opt, seed, losses):
        d = tmp_path / "w" / opt / f"learning_rate=4e-3_seed={seed}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"config": {"max_iters": 200, "seed": seed},
                                                   "derived": {"tokens_per_iter": 50, "parameters": 100}}))
        (d / "metrics.jsonl").write_text("".join(json.dumps({"kind": "eval", "iter": i, "val_loss": v}) + "\n"
                                                 for i, v in losses.items()))

    run("adams", 1, {0: 5.0, 100: 2.0, 150: 1.9, 200: 1.5})
    run("adamw", 1, {0: 5.0, 100: 2.5, 200: 1.25})  # no evaluation at 150: that step is not compared
    run("adams", 2, {0: 5.0, 200: 1.0})
    run("adamw", 2, {0: 5.0, 100: 2.0})  # unfinished: seed 2 is left out
    run("adams", 3, {0: 5.0, 200: 1.0})  # no AdamW run at all
    [p] = run_length.pairs(tmp_path / "w", "4e-3")
    assert (p["seed"], p["steps"], p["tokens_per_param"]) == (1, 200, 100.0)
    assert p["iters"] == [100, 200] and p["diff"] == [-0.5, 0.25]
    assert run_length.pairs(tmp_path / "w", "2e-3") == []
    with pytest.raises(UserError, match="no finished AdamS/AdamW pair at learning_rate=2e-3"):
        run_length.main(["--lr", "2e-3", "--lengths", str(tmp_path / "w"), "--out", str(tmp_path / "o")])
    run_length.main(["--lengths", str(tmp_path / "w"), "--out", str(tmp_path / "o")])
    rows = (tmp_path / "o.csv").read_text().splitlines()
    assert rows[1:] == ["200,100.0,1,100,0.5,-0.5", "200,100.0,1,200,1.0,0.25"]
    assert (tmp_path / "o.png").stat().st_size > 0


def test_seed_bootstrap_refits_the_ratio_over_every_draw_of_seeds(tmp_path, capsys):
    # loss = (log2(lr / best))^2 + offset: AdamW's best 4e-3 on both seeds; AdamS's 1e-3 on seed 1 and
    # 2e-3 on seed 2. A draw of two seeds averages two parabolas of equal curvature, whose vertex is
    # the mean of the two in log lr, so by hand the ratio is 1/4 for (1, 1), 1/2 for (2, 2) and
    # sqrt(1e-3 * 2e-3) / 4e-3 = 0.354 for (1, 2) and (2, 1). Seed 2 sits 0.3 higher everywhere, which a
    # pairing of the optimizers' seeds must leave out of the ratio
    import importlib.util

    spec = importlib.util.spec_from_file_location("seed_bootstrap", REPO / "results/analysis/seed_bootstrap.py")
    seed_bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed_bootstrap)
    best = {("adamw", 1): 4e-3, ("adamw", 2): 4e-3, ("adams", 1): 1e-3, ("adams", 2): 2e-3}
    runs = [fake_run(tmp_path / "runs" / f"{opt}_{lr}_{seed}", opt, lr, math.log2(lr / b) ** 2 + 2 + 0.3 * (seed - 1), seed=seed)
            for (opt, seed), b in best.items() for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)]
    rows = seed_bootstrap.main([*map(str, runs), "--out", str(tmp_path / "boot")])
    ratio = {r["seeds"]: r["ratio"] for r in rows}
    assert ratio.keys() == {"1 1", "1 2", "2 1", "2 2"}
    assert ratio["1 1"] == pytest.approx(0.25) and ratio["2 2"] == pytest.approx(0.5)
    assert ratio["1 2"] == ratio["2 1"] == pytest.approx(2 ** 0.5 / 4)
    out = capsys.readouterr().out
    assert "pooled ratio 0.35" in out and "each seed's own: 1 0.25, 2 0.50" in out and "0 at or above 1" in out
    with open(tmp_path / "boot.csv") as f:
        assert len(list(csv.DictReader(f))) == 4
    assert (tmp_path / "boot.png").stat().st_size > 0
    # a seed AdamS ran at every lr but AdamW did not: the draws would pair unlike seeds, so it refuses
    extra = [fake_run(tmp_path / "runs" / f"adams_{lr}_3", "adams", lr, 2.0, seed=3)
             for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)]
    with pytest.raises(UserError, match="differ; the bootstrap draws seeds for both together"):
        seed_bootstrap.main([*map(str, runs + extra), "--out", str(tmp_path / "boot2")])
    with pytest.raises(UserError, match="only seed 1 ran every lr of both grids"):
        seed_bootstrap.main([*(str(r) for r in runs if r.name.endswith("_1")), "--out", str(tmp_path / "boot3")])


def test_rerun_compares_shared_evaluations_and_the_seed_spread(tmp_path, capsys):
    # results/analysis/rerun.py: |first - rerun| over the evaluations both made, step 0 left out;
    # the seeds' standard deviation at those steps (worked by hand: stdev of {1, 3} is sqrt(2))
    import importlib.util

    spec = importlib.util.spec_from_file_location("rerun", REPO / "results/analysis/rerun.py")
    rerun = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rerun)

    def run(name, losses):
        d = tmp_path / name
        d.mkdir()
        (d / "metrics.jsonl").write_text("".join(json.dumps({"kind": "eval", "iter": i, "val_loss": v}) + "\n"
                                                 for i, v in losses.items()))
        return d

    first = run("first", {0: 5.0, 100: 2.0, 200: 1.5, 300: 1.25})  # interrupted after 300
    again = run("again", {0: 5.1, 100: 2.5, 200: 1.25, 300: 1.0, 400: 0.5})
    seeds = [run("s1", {100: 1.0, 200: 1.0, 300: 1.0}), run("s2", {100: 3.0, 200: 1.0, 300: 2.0})]
    r = rerun.compare(first, again, seeds, start=200)
    assert (r["evaluations"], r["last_step"]) == (3, 300)
    assert r["mean_abs"] == pytest.approx(1 / 3) and r["max_abs"] == 0.5 and r["max_abs_from"] == 0.25
    assert r["seed_std"] == pytest.approx((0.0, math.sqrt(2)))
    rerun.main([str(first), str(again), "--from", "200"])
    assert "3 shared evaluations (to step 300): |difference| mean 0.3333, max 0.5000, max from step 200 0.2500" in capsys.readouterr().out
    with pytest.raises(UserError, match="share no evaluation after step 0"):
        rerun.compare(first, run("other", {0: 5.0, 50: 3.0}), [])
    with pytest.raises(UserError, match="has no metrics.jsonl"):
        rerun.compare(first, tmp_path / "missing", [])
    with pytest.raises(UserError, match="past the last evaluation both runs made"):
        rerun.compare(first, again, [], start=400)


def test_val_windows_scores_a_checkpoint_on_each_seeds_validation_windows(data_dir, tmp_path, capsys):
    # results/analysis/val_windows.py: on the run's own seed it must report exactly what train.py's
    # evaluate() logged at the checkpoint's iteration; its whole-file loss is checked against a
    # closed form with a stand-in model whose "loss" is the mean target id
    import importlib.util

    import train
    from tests.conftest import tiny_config

    spec = importlib.util.spec_from_file_location("val_windows", REPO / "results/analysis/val_windows.py")
    val_windows = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(val_windows)
    out = tmp_path / "run"
    train.main(tiny_config(data_dir, out, seed=3))
    rows = val_windows.main([str(out), "--seeds", "1-4", "--out", str(tmp_path / "vw")])
    it = rows[0]["iter"]
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    at_it = next(r["val_loss"] for r in logged if r["kind"] == "eval" and r["iter"] == it)
    assert [r["seed"] for r in rows] == [1, 2, 3, 4] and rows[2]["val_loss"] == pytest.approx(at_it, abs=1e-12)
    assert len({round(r["val_loss"], 9) for r in rows}) == 4  # other seeds, other windows
    assert all(r["offset"] == pytest.approx(r["val_loss"] - r["all_val_loss"]) for r in rows)
    printed = capsys.readouterr().out
    assert f"iter {it}, trained with seed 3" in printed and (tmp_path / "vw.csv").exists() and (tmp_path / "vw.png").stat().st_size > 0

    class MeanTarget(torch.nn.Module):
        def forward(self, x, y):
            return None, y.double().mean()

    tokens = np.arange(103, dtype=np.uint16) % 7  # 10 windows of 10 (+1 for the targets); the last 2 tokens left out
    expected = (tokens[1:101].astype(float)).mean()
    assert val_windows.full_loss(MeanTarget(), tokens, block=10, batch=3) == pytest.approx(expected)

    with pytest.raises(UserError, match="neither a checkpoint file nor a run folder with checkpoints"):
        val_windows.main([str(tmp_path), "--out", str(tmp_path / "x")])
    with pytest.raises(UserError, match="is not a list of seeds"):
        val_windows.main([str(out), "--seeds", "a-b", "--out", str(tmp_path / "x")])


def test_crossing_fit_standard_errors_match_a_two_by_two_worked_by_hand(crossing_fit):
    # log2 tpp and log2 params at 0 and 1, a 2x2 design: X'X = [[4,2,2],[2,2,1],[2,1,2]], det 4, so
    # (X'X)^-1 has 3/4, 1, 1 on its diagonal. y = 1 + 0.5 x1 + 0.25 x2 + e(1,-1,-1,1): the fit returns the
    # coefficients exactly, the residuals are +-e, s^2 = 4e^2 / 1, se(a) = sqrt(3)e, se(b) = se(c) = 2e
    e, x1, x2 = 0.1, np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1])
    y = 1 + 0.5 * x1 + 0.25 * x2 + e * np.array([1, -1, -1, 1])
    f = crossing_fit.fit(2.0**x1, 2.0**x2, 2.0**y)
    assert f["coef"] == pytest.approx([1, 0.5, 0.25]) and f["n"] == 4
    assert f["sd"] == pytest.approx(2 * e) and f["se"] == pytest.approx([math.sqrt(3) * e, 2 * e, 2 * e])
    with pytest.raises(UserError, match="four or more"):
        crossing_fit.fit(2.0**x1[:3], 2.0**x2[:3], 2.0**y[:3])


def test_crossing_fit_brackets_where_the_crossing_first_reaches_one(crossing_fit):
    bracket = crossing_fit.measured_bracket
    assert bracket([(100, 0.5), (200, 0.9), (400, 1.2)]) == "200-400"
    assert bracket([(100, 0.5), (200, 1.1), (400, 0.9), (800, 1.3)]) == "100-200 (below 1 again at 400)"
    assert bracket([(100, 0.5), (200, 0.9)]) == "beyond 200" and bracket([(1600, 1.0)]) == "at or below 1,600"


def test_crossing_fit_check_places_a_new_setting_in_sd_of_a_prediction_worked_by_hand(monkeypatch, capsys, tmp_path, crossing_fit):
    # the 2x2 design of the standard-error test, shifted to 2^7-2^8 tokens per parameter and 2^13-2^14 parameters
    # (a shift moves only the intercept): s = 2e = 0.2 and (X'X)^-1 = [[3,-2,-2],[-2,4,0],[-2,0,4]] / 4 in the
    # unshifted coordinates, so at the corner x = (1, 1, 1) a new setting's variance is s^2 (1 + x'(X'X)^-1 x)
    # = 0.04 (1 + 3/4) = 0.07, around log2 1 + 0.5 + 0.25 = 1.75
    e, lr_ratio = 0.1, crossing_fit.lr_ratio
    fitted = [crossing_row(lr_ratio, 2 ** (13 + x2), 2 ** (7 + x1), 2 ** (1 + 0.5 * x1 + 0.25 * x2 + e * sign))
              for x1, x2, sign in ((0, 0, 1), (1, 0, -1), (0, 1, -1), (1, 1, 1))]
    sd = math.sqrt(0.07)
    new = [crossing_row(lr_ratio, 2**14, 2**8, 2 ** (1.75 + sd)), crossing_row(lr_ratio, 2**14, 2**8, 0.2, kind="<"),
           crossing_row(lr_ratio, 2**14, 25, 2**1.75)]
    # as lr_ratio.settings does, each setting carries its scan's second field: for --check, the table's stem
    monkeypatch.setattr(lr_ratio, "settings", lambda root, scans, rbar: fitted if scans is lr_ratio.SCANS
                        else [dict(s, varied=scans[0][1]) for s in new])
    table = tmp_path / "lr_transfer_new.csv"
    table.write_text("")
    got = crossing_fit.main(["--out", str(tmp_path / "fit"), "--check", str(table)])["checked"]
    assert got[0]["fit"] == pytest.approx(2**1.75) and got[0]["sd"] == pytest.approx(sd) and got[0]["z"] == pytest.approx(1.0)
    assert got[1]["z"] is None and got[2]["z"] > 0  # a short run sits above the law (the floor)
    below = (math.log2(0.2) - 1.75) / sd  # the bound's distance from the law: the crossing lies further down
    assert got[1]["bound"] == ("<", pytest.approx(below)) and got[1]["measured"] == pytest.approx(0.2)
    assert got[0]["bound"] is None
    assert (got[0]["params"], got[0]["tpp"]) == (2**14, pytest.approx(2**8)) and (tmp_path / "fit.png").stat().st_size > 0
    assert got[0]["table"] == "new"  # the star's label in the figure: the table's name less lr_transfer_
    out = capsys.readouterr().out
    assert f"| {2 ** (1.75 + sd):.2f} | 3.36 | {2 ** (1.75 - sd):.2f}-{2 ** (1.75 + sd):.2f} | " in out and "| +1.0 | 3, 3 |" in out
    assert f"| < {below:+.1f} | 3, 3 |" in out  # how far the bound sits, in sd, and on which side
    assert "| < 0.20 | 3.36 |" in out and "| 25 (below the fit's range) |" in out
    with pytest.raises(UserError, match="no lr_transfer table at"):
        crossing_fit.main(["--out", str(tmp_path / "fit"), "--check", str(tmp_path / "missing.csv")])


def test_seed_spread_takes_the_median_sd_at_each_grids_three_best_points_worked_by_hand(tmp_path, capsys, seed_spread):
    # AdamW's best three means are 1.0, 1.1, 1.2 (sds 0.01, 0.05, 0.02: median 0.02; the diverged point and the
    # 0.9-sd one at 1.5 do not count); AdamS's are 1.9, 1.95, 2.0 (sds 0.06, 0.01, 0.04: median 0.04, above 0.03)
    table = tmp_path / "lr_transfer_toy.csv"
    table.write_text("params,batch_tokens,steps\n")
    head = "params,batch_tokens,steps,betas,optimizer,lr,n,mean,std\n"
    grid = [("adamw", 1e-3, 3, 1.2, 0.02), ("adamw", 2e-3, 3, 1.0, 0.01), ("adamw", 4e-3, 4, 1.1, 0.05),
            ("adamw", 8e-3, 3, 1.5, 0.9), ("adamw", 1.6e-2, 3, math.inf, 0.0),
            ("adams", 1e-3, 3, 2.0, 0.04), ("adams", 2e-3, 2, 1.9, 0.06), ("adams", 4e-3, 3, 1.95, 0.01), ("adams", 8e-3, 3, 2.5, 0.001)]
    (tmp_path / "lr_transfer_toy_points.csv").write_text(
        head + "".join(f'1000,100,2000,"(0.9, 0.95)",{o},{lr},{n},{m},{s}\n' for o, lr, n, m, s in grid))
    (row,) = seed_spread.main([str(table)])
    assert row["adamw"] == pytest.approx(0.02) and row["adams"] == pytest.approx(0.04)
    assert (row["adamw_seeds"], row["adams_seeds"]) == (3, 2) and row["tpp"] == pytest.approx(200)
    assert "| toy | 1,000 | 100 | 200 | 0.020 | 0.040 * | 3, 2 |" in capsys.readouterr().out
    (tmp_path / "lr_transfer_toy_points.csv").unlink()
    with pytest.raises(UserError, match="lr_transfer_toy_points.csv does not exist"):
        seed_spread.main([str(table)])


def test_crossing_fit_raises_a_stars_number_off_another_star_and_its_number(crossing_fit):
    # the figure numbers each --check star: a number goes up past any marker or number it would cover
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 4), dpi=72)  # at 72 dpi a display pixel is a point
    ax.set(xlim=(0, 10), ylim=(0, 10))
    ax.set_position([0, 0, 1, 1])  # 288 points across both axes: 28.8 points a data unit
    rises = crossing_fit.label_rises(ax, [(5, 5), (5, 5), (1, 1)], ["1", "2", "3"], fontsize=8, offset=(5, 3), marker=13)
    plt.close(fig)
    assert rises[2] == 0  # alone, beside its own star
    # the first of the pair clears the other star (top 6.5 points above the point): 6.5 + 0.5 - 3 = 4;
    # the second clears that number (8 points tall from 7 up): 7 + 8 + 0.5 - 3 = 12.5
    assert rises[:2] == [pytest.approx(4), pytest.approx(12.5)]


def test_crossing_fit_keeps_a_listed_tables_text_and_takes_any_other_as_the_familys(monkeypatch, tmp_path, crossing_fit):
    # a 4-layer scan checked against the 2-layer law is labelled as 4 layers, not as the family's plain text
    monkeypatch.setattr(crossing_fit.lr_ratio, "SCANS", (("results/deep.csv", "depth", "bytes, 4 layers"),))
    (listed, _, text), (other, _, other_text) = crossing_fit.as_scans(
        [str(tmp_path / "results" / "deep.csv"), str(tmp_path / "seed1.csv")], root=tmp_path)
    assert (text, other_text) == ("bytes, 4 layers", crossing_fit.FAMILY["text"])
    assert listed == str((tmp_path / "results" / "deep.csv").resolve())


def crossing_row(lr_ratio, params, tpp, crossing, text="bytes", batch=2048, betas=(0.9, 0.95), kind="="):
    """A setting as lr_ratio.settings returns it, with only what crossing_fit reads."""
    return dict(params=params, batch_tokens=batch, steps=tpp * params / batch, text=text, betas=betas,
                carry=(kind, crossing, 0.0), seeds=(3, 3))


def test_crossing_fit_recovers_an_exact_power_law_and_solves_for_crossing_one(monkeypatch, capsys, tmp_path, crossing_fit):
    # log2 crossing = -9 + 0.5 log2 tpp + 0.3 log2 params at params 2^13, 2^15, 2^17 and tpp 2^7, 2^9, 2^11;
    # crossing 1 at log2 tpp = (9 - 0.3 m) / 0.5: 2^10.2 = 1,176, 2^9 = 512, 2^7.8 = 223, and 2^6 = 64 at 2^20
    law = lambda p, t: 2 ** (-9 + 0.5 * math.log2(t) + 0.3 * math.log2(p))  # noqa: E731
    lr_ratio = crossing_fit.lr_ratio
    rows = [crossing_row(lr_ratio, 2**m, 2**k, law(2**m, 2**k)) for m in (13, 15, 17) for k in (7, 9, 11)]
    # left out: a short run, a Llama, a bound, another batch, another beta2, a 0.82M model
    rows += [crossing_row(lr_ratio, 2**15, 25, 0.3), crossing_row(lr_ratio, 2**15, 512, 3.0, text="bytes, Llama"),
             crossing_row(lr_ratio, 2**15, 256, 0.2, kind="<"), crossing_row(lr_ratio, 2**15, 256, 0.2, batch=32768),
             crossing_row(lr_ratio, 2**15, 256, 0.2, betas=(0.9, 0.99)), crossing_row(lr_ratio, 820352, 120, 0.3)]
    monkeypatch.setattr(lr_ratio, "settings", lambda root, scans, rbar: rows)
    got = crossing_fit.main(["--out", str(tmp_path / "fit"), "--params", str(2**20)])
    assert got["fit"]["coef"] == pytest.approx([-9, 0.5, 0.3]) and got["fit"]["n"] == 9 and len(got["held"]) == 3
    assert crossing_fit.tpp_at_one(got["fit"], 2**13) == pytest.approx(2**10.2)
    for held in got["held"].values():  # the law is exact, so each width is predicted from the other two
        assert held["coef"] == pytest.approx([-9, 0.5, 0.3])
    out = capsys.readouterr().out
    assert "| 33K | 512 | 1.00 | 1.00 | 1.00 | 3, 3 |" in out and "| 8K | 128 | 0.33 | 0.33 | 0.33 | 3, 3 |" in out
    assert "| 33K | 128-512 | 512 (512-512) | 512 |" in out and "| 8K | 512-2,048 | 1,176 (1,176-1,176) | 1,176 |" in out
    assert "1M parameters: the fit puts crossing 1 at 64 tokens per parameter (64-64 at ± 1 sd; an extrapolation" in out
    assert "left out, the curves not crossing where both grids ran: 33K at 256 tokens per parameter (< 0.20)" in out
    assert out.count("\n| ") == 2 + 9 + 2 + 3 and (tmp_path / "fit.png").stat().st_size > 0
    with pytest.raises(UserError, match="positive number"):
        crossing_fit.main(["--out", str(tmp_path / "fit"), "--params", "-1"])
    # --of ratio fits AdamS's best lr over AdamW's instead: here a quarter of the law everywhere (the bound row
    # has a ratio too), so the same slopes, a 2 lower, and ratio 1 at 2^(2 / 0.5) = 16x the run
    for s in rows:
        s["ratio"] = law(s["params"], lr_ratio.tokens_per_param(s)) / 4
    got = crossing_fit.main(["--out", str(tmp_path / "ratio"), "--of", "ratio"])
    assert got["fit"]["coef"] == pytest.approx([-11, 0.5, 0.3])
    assert crossing_fit.tpp_at_one(got["fit"], 2**15) == pytest.approx(512 * 16)
    out = capsys.readouterr().out
    assert "log2 ratio = -11.00" in out and "| 33K | beyond 2,048 | 8,192 (8,192-8,192) | 8,192 |" in out
    monkeypatch.setattr(lr_ratio, "settings", lambda root, scans, rbar: rows[:3])
    with pytest.raises(UserError, match="two or more model sizes"):
        crossing_fit.main(["--out", str(tmp_path / "fit")])
