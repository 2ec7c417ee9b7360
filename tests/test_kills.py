"""Races and kills (folders.py): two writers started together on one folder, and kill -9 at random moments of
train, pack, unpack, export and token conversion, each followed by the obvious next command. After a kill
the destination holds the old content or the new, each whole, never a part; the next command finishes.
CI kills each command at a few moments; `pytest -m slow` at many more."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import checkpoint
import folders
from tests.helpers import cli_args, tiny_config
from tokens import read_tokens

REPO = Path(__file__).resolve().parents[1]
MOMENTS = [pytest.param(0)] + [pytest.param(i, marks=pytest.mark.slow) for i in range(1, 8)]


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    e["OMP_NUM_THREADS"] = "1"
    return e


def command(*argv) -> list[str]:
    return [sys.executable, *map(str, argv)]


def timed(argv, cwd=REPO) -> float:
    """How long the command takes, start to end, when nobody kills it."""
    start = time.time()
    result = subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return time.time() - start


def kill_at_random(argv, duration: float, rng: random.Random, cwd=REPO) -> None:
    proc = subprocess.Popen(argv, cwd=cwd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.2, 1.0) * duration)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def then(argv, cwd=REPO) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def no_leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".new-" in p.name or ".old-" in p.name]


# --- two writers at once ---------------------------------------------------------------------------------------


def test_two_trainings_started_together_on_one_folder_leave_one_whole_run(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=30, eval_interval=10)
    procs = [subprocess.Popen(command("train.py", *cli_args(cfg)), cwd=REPO, env=env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results  # one trains; the other is refused, whether it came while or after
    err = next(err for code, err in results if code == 2)
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and ("is in use by another command" in lines[0] or "already holds a train.py run" in lines[0])
    assert [p.name for p in checkpoint.checkpoints(cfg.out_dir)] == ["ckpt_00000020.pt", "ckpt_00000030.pt"]
    checkpoint.load(cfg.out_dir)  # the winner's run is whole
    assert not folders.lock_path(cfg.out_dir).exists()


def test_two_exports_started_together_leave_one_whole_export(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2)
    then(command("train.py", *cli_args(cfg)))
    procs = [subprocess.Popen(command("export.py", cfg.out_dir, tmp_path / "hf"), cwd=REPO, env=env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    assert {p.name for p in (tmp_path / "hf").iterdir()} >= {"adams_gpt.json", "config.json", "model.safetensors"}
    assert no_leftovers(tmp_path) == []


# --- kill -9 at a random moment, then the obvious next command ---------------------------------------------------


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_killed_overwrite_leaves_the_old_run_or_the_new_and_the_same_command_finishes(moment, data_dir, tmp_path):
    old = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=2, seed=1)
    then(command("train.py", *cli_args(old)))
    old_losses = (Path(old.out_dir) / "metrics.jsonl").read_text()
    new = tiny_config(data_dir, tmp_path / "run", max_iters=60, eval_interval=20, seed=2, overwrite=True)
    argv = command("train.py", *cli_args(new))
    kill_at_random(argv, 4.0, random.Random(moment))
    seed = json.loads((Path(new.out_dir) / "config.json").read_text())["config"]["seed"]
    if seed == 1:  # killed before its first step: the old run, whole
        assert (Path(old.out_dir) / "metrics.jsonl").read_text() == old_losses
        assert checkpoint.load(old.out_dir)["iter_num"] == 4
    else:  # the new run had begun: nothing of the old one is left
        assert seed == 2 and all(checkpoint.load_file(c)["config"]["seed"] == 2 for c in checkpoint.checkpoints(new.out_dir))
    assert no_leftovers(tmp_path) in ([], [".run.lock"])
    then(argv)
    assert checkpoint.load(new.out_dir)["iter_num"] == 60 and checkpoint.load(new.out_dir)["config"]["seed"] == 2


@pytest.fixture(scope="module")
def scan(tmp_path_factory) -> Path:
    """A scan folder of 200 runs' logs: enough that packing it takes a while."""
    root = tmp_path_factory.mktemp("scan") / "scan"
    rng = np.random.default_rng(0)
    for i in range(200):
        run = root / f"lr={i}_seed=1"
        run.mkdir(parents=True)
        (run / "config.json").write_text('{"config": {"max_iters": 10}}')
        (run / "metrics.jsonl").write_text("".join(f'{{"kind": "eval", "iter": {k}, "val_loss": {v:.6f}}}\n'
                                                   for k, v in enumerate(rng.random(2000))))
    return root


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def archived(archive: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(archive) as zf:
        assert zf.testzip() is None
        return {name: zf.read(name) for name in zf.namelist()}


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_killed_pack_or_unpack_leaves_the_folder_or_the_archive_whole(moment, scan, tmp_path):
    import shutil

    work = tmp_path / "scan"
    shutil.copytree(scan, work)
    want = files(work)
    rng = random.Random(moment)
    pack = command("-m", "study.pack", work)
    duration = timed(pack)
    shutil.unpack_archive(str(tmp_path / "scan.zip"), str(work), "zip")
    (tmp_path / "scan.zip").unlink()
    kill_at_random(pack, duration, rng)
    if work.exists():  # a folder is never half there: it is the whole scan
        assert files(work) == want
    else:  # gone only once the archive was whole
        assert archived(tmp_path / "scan.zip") == want
    if work.exists():
        then(pack)  # the obvious next command: pack again
    assert archived(tmp_path / "scan.zip") == want and not work.exists() and no_leftovers(tmp_path) == []

    unpack = command("-m", "study.pack", "--unpack", tmp_path / "scan.zip")
    kill_at_random(unpack, duration, rng)
    assert archived(tmp_path / "scan.zip") == want  # never touched
    if work.exists():
        assert files(work) == want  # swapped in whole, or not at all
    else:
        then(unpack)
    assert files(work) == want


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_killed_export_or_token_conversion_leaves_nothing_half_written(moment, data_dir, tmp_path):
    rng = random.Random(moment)
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2, n_layer=4, n_embd=256, n_head=4)
    then(command("train.py", *cli_args(cfg)))
    export = command("export.py", cfg.out_dir, tmp_path / "hf")
    duration = timed(export)
    whole = files(tmp_path / "hf")
    export = [*export, "--overwrite"]
    kill_at_random(export, duration, rng)
    assert files(tmp_path / "hf").keys() == whole.keys()  # the old export or the new, whole
    then(export)
    assert no_leftovers(tmp_path) == []

    nanogpt = tmp_path / "nanogpt.bin"
    np.random.default_rng(0).integers(0, 50257, size=20_000_000, dtype=np.uint16).tofile(nanogpt)
    convert = command("-m", "tokens", "from-nanogpt", nanogpt, tmp_path / "tokens.bin")
    duration = timed(convert)
    (tmp_path / "tokens.bin").unlink()
    kill_at_random(convert, duration, rng)
    if (tmp_path / "tokens.bin").exists():
        assert len(read_tokens(tmp_path / "tokens.bin")[0]) == 20_000_000  # whole
    else:
        then(convert)
    assert len(read_tokens(tmp_path / "tokens.bin")[0]) == 20_000_000
    then(command("-m", "tokens", "from-nanogpt", nanogpt, tmp_path / "tokens.bin", "--overwrite"))
    assert no_leftovers(tmp_path) == []


def test_a_figure_or_table_is_written_whole_under_its_lock_and_never_over_a_runs_file(data_dir, tmp_path):
    """scripts.write_csv / save_figure / write_json all pass through folders.write_output."""
    from errors import UserError
    from scripts import write_csv

    out = tmp_path / "table.csv"
    lock = folders.Lock(out, "another")
    lock.acquire("--out")
    try:
        with pytest.raises(UserError, match=r"table.csv is in use by another command \(another, process"):
            write_csv(out, [{"a": 1}])
        assert not out.exists()
    finally:
        lock.release()
    write_csv(out, [{"a": 1}, {"a": 2}])
    assert out.read_bytes() == b"a\r\n1\r\n2\r\n" and not list(tmp_path.glob(".*"))  # no lock or temporary left
    run = tmp_path / "run"
    import train

    train.main(tiny_config(data_dir, run, max_iters=2, eval_interval=2))
    before = (run / "config.json").read_bytes()
    with pytest.raises(UserError, match="config.json belongs to a train.py run"):
        write_csv(run / "config.json", [{"a": 1}])
    assert (run / "config.json").read_bytes() == before
