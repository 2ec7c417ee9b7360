"""Packed scans (study/pack.py): a folder of runs becomes one deterministic archive that the analysis
scripts read as the folder it was. The references are independent of the packer: Python's glob module
on the unpacked folder, the zipfile module's own listing and checksums, and the scripts' outputs from
the real files."""

from __future__ import annotations

import filecmp
import glob
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import metrics
from errors import UserError
from scripts import plot_curves, sweep
from study import lr_transfer, pack, packed

REPO = Path(__file__).resolve().parents[1]


def fake_run(folder: Path, optimizer: str, lr: float, seed: int, losses: list[float], max_iters: int = 20) -> None:
    """A finished run as train.py leaves it: config.json and metrics.jsonl (evaluations every 10 steps)."""
    folder.mkdir(parents=True)
    config = dict(optimizer=optimizer, learning_rate=lr, seed=seed, max_iters=max_iters, beta1=0.9, beta2=0.95,
                  dataset="shakespeare_char")
    folder.joinpath("config.json").write_text(json.dumps(dict(config=config, derived=dict(parameters=1000,
                                                                                            tokens_per_iter=64))))
    with open(folder / "metrics.jsonl", "w") as f:
        for i, loss in enumerate(losses):
            f.write(json.dumps(dict(kind="eval", iter=10 * i, val_loss=loss, train_loss=loss)) + "\n")


@pytest.fixture
def scan(tmp_path, monkeypatch) -> Path:
    """tmp_path/results/runs/toy: an AdamW and an AdamS grid of 3 lrs x 2 seeds, plus a sweep's tables."""
    monkeypatch.chdir(tmp_path)
    root = Path("study/results/runs/toy")
    for opt, best in (("adamw", 2e-3), ("adams", 1e-3)):
        for lr in ("5e-4", "1e-3", "2e-3"):  # spelled as sweep.py names its runs
            for seed in (1, 2):
                final = 2.0 + abs(float(lr) - best) * 100 + 0.01 * seed
                fake_run(root / opt / f"learning_rate={lr}_seed={seed}", opt, float(lr), seed, [4.0, 3.0, final])
    (root / "adams" / "summary.md").write_text("| learning_rate |\n")
    return root


def test_packing_is_deterministic_verified_and_replaces_the_folder(scan, tmp_path):
    files = {p.relative_to(scan).as_posix(): p.read_bytes() for p in scan.rglob("*") if p.is_file()}
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(scan), str(copy)], check=True)
    archive = pack.pack(scan)
    assert archive == Path("study/results/runs/toy.zip") and not scan.exists()
    with zipfile.ZipFile(archive) as zf:  # zipfile's own reading: every file, same bytes, checksums good
        assert zf.testzip() is None
        assert {name: zf.read(name) for name in zf.namelist()} == files
        assert [i.date_time for i in zf.infolist()] == [(1980, 1, 1, 0, 0, 0)] * len(files)
    assert pack.pack(copy).read_bytes() == archive.read_bytes()  # same folder, same bytes: git sees no change


def test_paths_and_globs_inside_an_archive_match_the_folders_they_were(scan, tmp_path):
    patterns = ["study/results/runs/toy/*/*/", "study/results/runs/toy/adam?/learning_rate=1e-3_seed=[12]",
                "study/results/runs/toy/adams/*", "study/results/runs/toy/adamw/learning_rate=*_seed=2/", "study/results/runs/toy/nothing*"]
    before = {p: sorted(glob.glob(p)) for p in patterns}  # the glob module on the real folder
    pack.pack(scan)
    for p in patterns:
        found = [pack.shown(x) for x in pack.expand([p])]
        assert found == ([q.rstrip("/") for q in before[p]] or [p.rstrip("/")]), p
    inside = pack.resolve("study/results/runs/toy/adams/learning_rate=1e-3_seed=1/metrics.jsonl")
    assert inside.is_file() and not inside.is_relative_to(Path.cwd())  # a plain file, extracted out of the repository
    assert pack.shown(inside) == "study/results/runs/toy/adams/learning_rate=1e-3_seed=1/metrics.jsonl"
    assert [r["val_loss"] for r in metrics.records(inside)] == [4.0, 3.0, 2.01]  # the product's readers, on a path
    assert metrics.read(inside.parent)[1][-1]["iter"] == 20
    assert sweep.final_val_loss(inside.parent) == (2.01, True)
    assert not pack.resolve("study/results/runs/toy/adams/learning_rate=9_seed=1").exists()


def test_lr_transfer_and_plot_curves_write_the_same_bytes_from_the_archive(scan, tmp_path):
    lr_transfer.main(["study/results/runs/toy/*/*/", "--out", str(tmp_path / "before/t")])
    plot_curves.main([*map(str, sorted(scan.glob("adam*/*_seed=*"))), "--group", "optimizer", "--out", str(tmp_path / "before/c")])
    pack.pack(scan)
    lr_transfer.main(["study/results/runs/toy/*/*/", "--out", str(tmp_path / "after/t")])
    packed.main(["plot_curves", "study/results/runs/toy/adam*/*_seed=*", "--group", "optimizer", "--out", str(tmp_path / "after/c")])
    names = sorted(p.name for p in (tmp_path / "before").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "after").iterdir()) and "t_paired.csv" in names
    for name in names:
        if not name.endswith(".png"):  # text outputs byte for byte; figures are checked on the committed ones
            assert filecmp.cmp(tmp_path / "before" / name, tmp_path / "after" / name, shallow=False), name


def test_sweep_summarize_reads_a_packed_scan_and_writes_nothing(scan, tmp_path, capsys):
    argv = ["--grid", "learning_rate=5e-4,1e-3,2e-3", "--seeds", "1", "2", "--summarize"]
    sweep.main([*argv, "--out", str(scan / "adams")])
    written = (scan / "adams" / "summary.md").read_text()
    pack.pack(scan)
    before = Path("study/results/runs/toy.zip").read_bytes()
    capsys.readouterr()
    summary = packed.main(["sweep", *argv, "--out", "study/results/runs/toy/adams"])
    printed = capsys.readouterr().out
    assert written.strip() in printed and "is packed in study/results/runs/toy.zip" in printed
    assert [s["n"] for s in summary] == [2, 2, 2]
    assert sorted(p.name for p in Path("study/results/runs").iterdir()) == ["toy.zip"]  # read-only: no folder appears
    assert Path("study/results/runs/toy.zip").read_bytes() == before


def test_unpack_then_add_runs_then_pack_again(scan, tmp_path):
    archive = pack.pack(scan)
    pack.unpack(archive, None)
    assert scan.is_dir() and archive.exists()  # the archive is kept until the folder is packed again
    assert pack.resolve(scan / "adams") == scan / "adams"  # a real folder wins over the archive
    fake_run(scan / "adams" / "learning_rate=0.004_seed=1", "adams", 4e-3, 1, [4.0, 3.0, 2.5])
    pack.pack(scan)
    with zipfile.ZipFile(archive) as zf:
        assert "adams/learning_rate=0.004_seed=1/metrics.jsonl" in zf.namelist()


def test_pack_mistakes_change_nothing(scan, tmp_path):
    def world():
        return {p.as_posix(): p.read_bytes() for p in Path("results").rglob("*") if p.is_file()}

    # a run still writing: its lock is held by another process
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; import folders; "
                               "l = folders.Lock(sys.argv[1], 'train.py'); l.acquire('--out_dir'); print('held', flush=True); "
                               "time.sleep(60)", str((scan / "adams" / "learning_rate=1e-3_seed=1").resolve())],
                              cwd=REPO.parent, stdout=subprocess.PIPE, text=True)  # the repository's root
    try:
        assert holder.stdout.readline().strip() == "held"
        state = world()
        with pytest.raises(UserError, match="still being written by train.py, process"):
            pack.main([str(scan)])
        assert world() == state
    finally:
        holder.kill()
        holder.wait()
    assert (scan / "adams" / ".learning_rate=1e-3_seed=1.lock").exists()  # a killed holder's lock stays: packing skips it

    state = world()
    cases = [
        (["study/results/runs/nope"], "must be an existing file or folder, got 'study/results/runs/nope'"),
        ([str(scan), "study/results/runs/nope"], "got 'study/results/runs/nope'"),  # checked before the first is packed
        ([str(scan / "adams" / "summary.md")], "summary.md is not a folder"),
        (["--unpack", str(scan)], "is not a packed scan"),
        (["--out", "x", str(scan)], "--out names where one archive is unpacked"),
        (["--unpack", "--check", str(scan)], "two different jobs"),
    ]
    for argv, message in cases:
        with pytest.raises(UserError, match=message):
            pack.main(argv)
        assert world() == state, argv

    (scan / "adamw" / "ckpt.pt").write_bytes(b"weights")
    with pytest.raises(UserError, match="holds checkpoints"):
        pack.main([str(scan)])
    (scan / "adamw" / "ckpt.pt").unlink()

    archive = pack.pack(scan)
    pack.unpack(archive, None)
    (scan / "adams" / "summary.md").unlink()  # the folder lacks a file the archive has: packing would lose it
    state = world()
    with pytest.raises(UserError, match="holds 1 files that .* lacks"):
        pack.main([str(scan)])
    with pytest.raises(UserError, match="already exists and is not empty"):
        pack.main(["--unpack", str(archive)])
    assert world() == state

    bad = Path("bad.zip")
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../escape.txt", "x")
    with pytest.raises(UserError, match="member outside its folder"):
        pack.main(["--unpack", str(bad), "--out", "elsewhere"])
    assert not Path("escape.txt").exists() and not Path("elsewhere").exists()
    bad.write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a readable archive"):
        pack.main(["--check", str(bad)])


def test_committed_scans_are_packed_and_their_archives_read():
    runs = REPO / "results" / "runs"
    assert not [p.name for p in runs.iterdir() if p.is_dir()], "pack finished scans: python -m study.pack study/results/runs/NAME"
    for archive in sorted(runs.glob("*.zip")):
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
        assert names == sorted(names) and all(n.endswith(("config.json", "metrics.jsonl", ".csv", ".md", ".png", ".json",
                                                            ".log", ".txt")) for n in names), archive
    # the issue asked for "a few hundred" files once the logs are packed (4,478 before, 578 after)
    assert sum(1 for p in (REPO / "results").rglob("*") if p.is_file()) <= 600


def test_a_repacked_archive_or_another_folders_archive_of_the_same_name_is_read_afresh(tmp_path, monkeypatch):
    for folder, content in (("a", "one"), ("b", "two")):  # one relative name, two folders
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        with zipfile.ZipFile("scan.zip", "w") as zf:
            zf.writestr("run/metrics.jsonl", content)
        assert pack.resolve("scan/run/metrics.jsonl").read_text() == content
    Path("scan.zip").unlink()
    with zipfile.ZipFile("scan.zip", "w") as zf:  # the same path, re-packed with more in it
        zf.writestr("run/metrics.jsonl", "three, longer")
    assert pack.resolve("scan/run/metrics.jsonl").read_text() == "three, longer"
