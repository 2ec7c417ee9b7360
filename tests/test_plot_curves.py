"""scripts/plot_curves.py: validation curves of runs, grouped over seeds."""

import json
import shutil
from pathlib import Path

import pytest

from errors import UserError
from scripts import plot_curves

REPO = Path(__file__).resolve().parents[1]


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
