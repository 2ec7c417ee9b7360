"""A run's folder has one writer (run_folder.RunFolder): every whole file through folders.write_atomic, and a
marker that says what the folder is, which contents.look reads instead of sniffing the files."""

import dataclasses
import json
import shutil

import pytest

import contents
import folders
import train
from tests import faults
from tests.helpers import tiny_config


@pytest.fixture
def written(monkeypatch):
    """The names every folders.write_atomic call wrote, in order."""
    names = []
    write = folders.write_atomic

    def write_(path, data):
        names.append(path.name)
        return write(path, data)

    monkeypatch.setattr(folders, "write_atomic", write_)
    import checkpoint
    import run_folder

    monkeypatch.setattr(checkpoint, "write_atomic", write_)
    monkeypatch.setattr(run_folder.folders, "write_atomic", write_)
    return names


def test_every_whole_file_of_a_run_goes_through_the_one_writer(data_dir, tmp_path, written):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=2)
    train.main(cfg)
    assert {".adams_gpt", "config.json", "ckpt_00000002.pt", "ckpt_00000004.pt", "latest"} <= set(written)
    written.clear()
    train.main(dataclasses.replace(cfg, init_from="resume", max_iters=6))
    assert "metrics.jsonl" in written  # the log cut back to the checkpoint, rewritten whole
    assert not [p for p in (tmp_path / "run").rglob("*.tmp")]


def test_the_marker_says_how_far_a_run_got_and_how_it_ended(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=2)
    train.main(cfg)
    marker = json.loads((tmp_path / "run" / contents.MARKER).read_text())
    assert marker == dict(marker, kind="run", by="train.py", iter=4, checkpoint="checkpoints/ckpt_00000004.pt",
                          end="finished", at=4)
    # recognised by its marker alone: without the files look() sniffed before, it is still a finished run
    (tmp_path / "run" / "metrics.jsonl").unlink()
    (tmp_path / "run" / "config.json").unlink()
    found = contents.look(tmp_path / "run")
    assert (found.kind, found.finished, found.checkpoints, found.restartable) == ("run", True, True, False)
    shutil.rmtree(tmp_path / "run" / "checkpoints")
    assert "whose checkpoints are gone" in contents.look(tmp_path / "run").what


def test_a_stopped_run_is_marked_so(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=8, eval_interval=2)
    with faults.injected("crash@5"), pytest.raises(RuntimeError):
        train.main(cfg)
    marker = json.loads((tmp_path / "run" / contents.MARKER).read_text())
    assert (marker["end"], marker["at"], marker["checkpoint"]) == ("stopped", 5, "checkpoints/ckpt_00000004.pt")
    found = contents.look(tmp_path / "run")
    assert (found.finished, found.checkpoints, found.restartable) == (False, True, False)
    assert found.what == "a train.py run (stopped at iteration 5, with checkpoints)"


@pytest.mark.parametrize("crash, restartable", [("crash@1", True), ("crash@3", False)])
def test_a_folder_from_before_markers_reads_as_its_marker_says(data_dir, tmp_path, crash, restartable):
    # folders written before the marker are recognised by their files, as the marker would have said
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=2)
    with faults.injected(crash), pytest.raises(RuntimeError):
        train.main(cfg)
    marked = contents.look(tmp_path / "run")
    (tmp_path / "run" / contents.MARKER).unlink()
    unmarked = contents.look(tmp_path / "run")
    assert (marked.kind, marked.restartable, marked.checkpoints, marked.finished) == \
        (unmarked.kind, unmarked.restartable, unmarked.checkpoints, unmarked.finished) == \
        ("run", restartable, not restartable, False)


def test_a_folder_from_before_markers_that_is_resumed_is_marked_at_its_checkpoint(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=2)
    train.main(cfg)
    (tmp_path / "run" / contents.MARKER).unlink()  # as a run of an older version left it
    with faults.injected("crash@5"), pytest.raises(RuntimeError):
        train.main(dataclasses.replace(cfg, init_from="resume", max_iters=8))
    found = contents.look(tmp_path / "run")  # killed before its next checkpoint: still a run to resume, not to restart
    assert (found.checkpoints, found.restartable) == (True, False)
    assert json.loads((tmp_path / "run" / contents.MARKER).read_text())["checkpoint"] == "checkpoints/ckpt_00000004.pt"
