"""study/step_matched.py: AdamS read on AdamW's grid at lr x R-bar."""

import json
from pathlib import Path

import pytest

from errors import UserError
from study import step_matched

REPO = Path(__file__).resolve().parents[2]


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
