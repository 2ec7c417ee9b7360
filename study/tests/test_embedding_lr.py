"""study/embedding_lr.py: the embedding's lr on AdamW's scale."""

import csv
from pathlib import Path

import pytest

from errors import UserError
from study import embedding_lr
from study.tests.helpers import fake_run, write_noise_csv

REPO = Path(__file__).resolve().parents[2]




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
