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


@pytest.mark.parametrize("stride", [pytest.param(10), pytest.param(1, marks=pytest.mark.slow)])
def test_the_committed_runs_from_before_markers_are_recognised(stride):
    # they were written before folders had a marker: look() knows them by their files, as what they are (CI reads
    # every tenth of the 1,711 runs; -m slow all of them)
    import contents

    counted = {}
    for archive in sorted((REPO / "study" / "results" / "runs").glob("*.zip")):
        for log in sorted(pack.extracted(archive).rglob("metrics.jsonl"))[::stride]:
            run = log.parent
            found = contents.look(run)
            counted[found.kind] = counted.get(found.kind, 0) + 1
            if found.kind == contents.RUN:  # finished exactly when its log reached its config's max_iters
                lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
                max_iters = json.loads((run / "config.json").read_text())["config"]["max_iters"]
                reached = lines[-1].get("kind") == "diverged" or max(r.get("iter", 0) for r in lines) >= max_iters
                assert found.finished == reached and not found.restartable, (pack.shown(run), found)
            else:
                assert found.kind == contents.GRPO and found.finished, (pack.shown(run), found)
    assert counted.get(contents.RUN, 0) > 1500 // stride and set(counted) <= {contents.RUN, contents.GRPO}, counted
