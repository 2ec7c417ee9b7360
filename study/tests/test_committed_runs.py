"""The committed runs still follow from the configs and commands beside them."""

import json
from pathlib import Path

import pytest

import configurator
from study import pack

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("optimizer", ["adamw", "adams", "lion", "adam_mini", "adagrad", "rmsprop"])
def test_repro_configs_still_give_the_committed_runs(optimizer):
    # study/results/runs/optimizers holds the runs these files made (sweep.py added seed and out_dir):
    # every setting must be what it was then, or the commands in study/README.md reproduce nothing
    run = pack.resolve(REPO / "study" / "results" / "runs" / "optimizers" / f"config=cpu_{optimizer}_seed=1")  # in optimizers.zip
    then = json.loads((run / "config.json").read_text())["config"]
    now = configurator.as_dict(configurator.load([str(REPO / "config" / "repro" / f"cpu_{optimizer}.py"),
                                                  "--seed=1", f"--out_dir={then['out_dir']}", "--init_from=auto"]))
    removed = {"nonfinite_policy"}  # settings that no longer exist
    assert {k: v for k, v in then.items() if k not in removed} == {k: v for k, v in now.items() if k in then}
    defaults = configurator.as_dict(configurator.TrainConfig())
    assert all(now[k] == defaults[k] for k in set(now) - set(then))  # settings added since, at their defaults
