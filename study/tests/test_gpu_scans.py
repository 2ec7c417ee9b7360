"""study/gpu_scans.sh: the GPU lr and R-bar stages' commands and refusals, with a fake torch."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("points", ["adams", "adamx:1e-3", "adams:"])
def test_gpu_scans_lr_refuses_a_malformed_point_before_anything_runs(points, tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "gpu"), "LR_POINTS": f"adamw:6e-4 {points}"}
    result = subprocess.run(["bash", str(REPO / "study/gpu_scans.sh"), "lr"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 2 and f"LR_POINTS entry '{points}'" in result.stderr, result.stderr
    assert not (tmp_path / "gpu").exists()


def test_gpu_scans_lr_refuses_an_unknown_corpus_before_anything_runs(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "gpu"), "LR_CORPUS": "openwebtext"}
    result = subprocess.run(["bash", str(REPO / "study/gpu_scans.sh"), "lr"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 2 and "LR_CORPUS='openwebtext'" in result.stderr, result.stderr
    assert not (tmp_path / "gpu").exists()


# where the faked Python says torch is (the real one would take seconds to import torch and say)
FAKE_TORCH = "/fake/site-packages/torch"


def test_gpu_scans_lr_and_rbar_commands(tmp_path):
    """The lr and rbar stages' commands, with Python faked (no GPU here) in a copy of the script's folder
    layout: each sweep gets the scan's shared settings first and the stage's own and LR_EXTRA after them
    (a later --set wins), the corpus is prepared once for both stages, and noise_scale reads the rbar run."""
    root = tmp_path / "repo"
    (root / "study").mkdir(parents=True)
    (root / "config").mkdir()
    shutil.copy(REPO / "study/gpu_scans.sh", root / "study")
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
    result = subprocess.run(["bash", str(root / "study/gpu_scans.sh"), "lr", "rbar"], capture_output=True, text=True,
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
    assert [c for c in calls if "noise_scale" in c][0].startswith("-m study.noise_scale out/rbar/learning_rate=6e-4_seed=1 --device cuda")
    assert (tmp_path / "gpu/lr_x.tar.gz").is_file() and (tmp_path / "gpu/rbar/run.tar.gz").is_file()


def test_gpu_scans_stops_when_the_corpus_cannot_be_built(tmp_path):
    """A failed tokenization (say, GPT-2's BPE files unreachable) stops the stage before any run starts."""
    root = tmp_path / "repo"
    (root / "study").mkdir(parents=True)
    (root / "config").mkdir()
    shutil.copy(REPO / "study/gpu_scans.sh", root / "study")
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
        result = subprocess.run(["bash", str(root / "study/gpu_scans.sh"), stage], capture_output=True, text=True,
                                env=env, timeout=120)
        assert result.returncode != 0 and "no BPE files" in result.stderr, result.stderr
    assert not any("scripts.sweep" in c for c in log.read_text().splitlines())
