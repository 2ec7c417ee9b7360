"""Races and kills (folders.py): two writers started together on one folder, and kill -9 at random moments of
train, pack, unpack, export and token conversion, each followed by the obvious next command. After a kill
the destination holds the old content or the new, each whole, never a part; the next command finishes.
CI kills each command at a few moments; `pytest -m slow` at many more."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import checkpoint
import contents
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


# --- the lock is the folder's: deleted lock files, renamed folders, siblings, odd destinations ----------------


def start_long_run(data_dir, out: Path) -> subprocess.Popen:
    """A train.py run that goes on until killed, once it has taken its folder (its log is written)."""
    cfg = tiny_config(data_dir, out, max_iters=1_000_000, lr_decay_iters=1_000_000, eval_interval=5, eval_iters=1)
    proc = subprocess.Popen(command("train.py", *cli_args(cfg)), cwd=REPO, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "metrics.jsonl").is_file() or not checkpoint.latest(out):
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
        time.sleep(0.2)
    return proc


def test_a_second_writer_is_refused_while_the_first_lives_though_its_lock_file_was_deleted(data_dir, tmp_path):
    # before: the lock was a file anyone could delete; deleted, a second resume started and wrote alongside the first
    out = tmp_path / "run"
    first = start_long_run(data_dir, out)
    try:
        folders.lock_path(out).unlink()
        cfg = tiny_config(data_dir, out, init_from="resume")
        second = subprocess.run(command("train.py", *cli_args(cfg)), cwd=REPO, env=env(), capture_output=True,
                                text=True, timeout=120)
        assert second.returncode == 2 and second.stderr.startswith("error: ") and "is in use by another command" in \
            second.stderr, second.stderr
        assert first.poll() is None  # the first goes on
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()


def test_the_lock_moves_with_a_renamed_folder(data_dir, tmp_path):
    # a command holding `run` (here this test) keeps it when `mv run renamed`: a writer of `renamed` is refused
    import dataclasses

    import train

    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=5, eval_interval=5)
    train.main(cfg)
    with folders.Destination(tmp_path / "run", makes=contents.RUN, option="--out_dir"):
        os.rename(tmp_path / "run", tmp_path / "renamed")
        with pytest.raises(folders.UserError, match="is in use by another command"):
            train.main(dataclasses.replace(cfg, out_dir=str(tmp_path / "renamed"), init_from="resume", max_iters=8))


def test_recovery_touches_only_its_own_destination(tmp_path, capsys):
    # `mv out out.old-1` keeps a run: taking `out` used to remove out.old-1's live lock and staging, as if they were
    # out's own leftovers (.out.old-*); a killed command's own leftovers are cleared, and said
    sibling = tmp_path / "out.old-1"
    sibling.mkdir()
    live = folders.Lock(sibling, "the sibling's writer")
    live.acquire("--out")
    staging = tmp_path / f".out.old-1.new-{os.getpid()}"
    staging.mkdir()
    dead = tmp_path / ".out.new-4194303"  # a pid no process has (pid_max's ceiling)
    dead.mkdir()
    try:
        with folders.Destination(tmp_path / "out", makes=contents.RUN, option="--out_dir"):
            pass
        assert folders.lock_path(sibling).exists() and staging.is_dir()
        assert not dead.exists()
        assert ".out.new-4194303" in capsys.readouterr().err
    finally:
        live.release()


@pytest.mark.parametrize("destination, says", [
    ("/", "is the root of the file system"),
    ("x" * 250, "its name is 250 bytes long"),
])
def test_a_destination_the_door_cannot_stage_beside_is_one_line(destination, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(folders.UserError, match=says):
        folders.Destination(destination, makes=contents.RUN, option="--out_dir")


def test_the_temporary_file_of_a_killed_checkpoint_writer_is_cleared_by_the_next_run(data_dir, tmp_path, capsys):
    import dataclasses

    import train

    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=10, eval_interval=5)
    train.main(cfg)
    left = tmp_path / "run" / "checkpoints" / ".ckpt_00000010.pt.4194303.tmp"  # as a killed writer leaves it
    left.write_bytes(b"\0" * 4096)
    capsys.readouterr()
    train.main(dataclasses.replace(cfg, init_from="resume", max_iters=12))
    assert not left.exists() and "removed 1 half-written checkpoint file(s)" in capsys.readouterr().out


# --- full disks and file-size limits: one line naming the file and the last complete state -------------------


def limited(bytes_: int):
    """A preexec_fn: the child may write no file larger than ``bytes_`` (RLIMIT_FSIZE; Python ignores SIGXFSZ,
    so a write past it fails with EFBIG, as a full disk fails with ENOSPC)."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (bytes_, bytes_))


def test_a_file_size_limit_at_a_checkpoint_is_one_line_and_leaves_nothing_half_written(data_dir, tmp_path):
    # before: torch.save's zip writer turned the failed write into RuntimeError("unexpected pos"): a traceback
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=10, eval_interval=5)
    result = subprocess.run(command("train.py", *cli_args(cfg)), cwd=REPO, env=env(), capture_output=True, text=True,
                            timeout=300, preexec_fn=limited(64 << 10))
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert re.search(r"error: .*/checkpoints/\.ckpt_00000005\.pt\.\d+\.tmp could not be written \(File too large\); "
                     r"nothing of it is left, and no checkpoint is complete yet", lines[0]), lines[0]
    assert not list((tmp_path / "run" / "checkpoints").glob("*.tmp"))


def test_a_full_disk_while_tokens_are_written_is_one_line_naming_the_file(tmp_path):
    # a 1 MiB file system, where this machine lets a test mount one
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"no small file system can be mounted here ({made.stderr.strip() or made.returncode})")
    try:
        src = tmp_path / "nanogpt.bin"
        (np.arange(1_000_000) % 50257).astype(np.uint16).tofile(src)  # 2 MB of tokens: twice what the disk holds
        result = subprocess.run(command("-m", "tokens", "from-nanogpt", src, mount / "train.bin"), cwd=REPO, env=env(),
                                capture_output=True, text=True, timeout=120)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and "No space left on device" in lines[0], result.stderr
        assert "train.bin" in lines[0] and not list(mount.iterdir())  # named, and nothing half-written left
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow),
                                 pytest.param(signal.SIGHUP, marks=pytest.mark.slow)])
def test_a_signal_at_a_random_moment_stops_a_run_as_ctrl_c_does(sig, data_dir, tmp_path):
    # SIGTERM (kill, a scheduler) and SIGHUP (a closed terminal) used to end a run without a word; each now stops
    # it as Ctrl-C does, checkpoint writes included: one line naming the last complete checkpoint, the folder whole
    rng = random.Random(int(sig))
    out = tmp_path / "run"
    proc = start_long_run(data_dir, out)
    time.sleep(rng.uniform(0.0, 2.0))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 130 and len(errors) == 1 and "Traceback" not in err, err[-2000:]
    assert re.match(r"error: interrupted; the last checkpoint is .*ckpt_\d{8}\.pt; continue with: python train.py "
                    r"--init_from=resume", errors[0]), errors[0]
    assert not list((out / "checkpoints").glob(".*.tmp"))
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert (last["kind"], last["reason"]) == ("stopped", "interrupted")
