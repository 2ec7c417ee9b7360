"""study/lr_transfer.py: each optimizer's best lr from finished runs, and the ratio."""

import csv
import json
import math
from pathlib import Path

import pytest

from errors import UserError
from study import lr_transfer
from study.tests.helpers import fake_run

REPO = Path(__file__).resolve().parents[2]


def test_parabola_vertex_is_exact_for_a_parabola():
    f = lambda x: 3 * (x - 0.7) ** 2 + 2
    assert lr_transfer.parabola_vertex((0.0, 1.0, 2.0), (f(0.0), f(1.0), f(2.0))) == pytest.approx(0.7)
    assert lr_transfer.parabola_vertex((0.0, 1.0, 2.0), (0.0, 1.0, 0.0)) is None  # a maximum


def test_lr_transfer_finds_each_optimizers_best_lr_and_the_ratio(tmp_path):
    # loss = (log2(lr / lr*))^2 + c: AdamW's optimum at 4e-3, AdamS's at 1e-3 -> ratio 1/4, exactly
    # on the grid at batch 2048; at 8192 AdamS's best sits at the grid's edge (not bracketed)
    runs = []
    for batch, opt, best in ((2048, "adamw", 4e-3), (2048, "adams", 1e-3), (8192, "adamw", 4e-3), (8192, "adams", 1e-4)):
        for lr in (5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
            for seed in (1, 2):
                loss = math.log2(lr / best) ** 2 + 2 + 0.01 * seed
                runs.append(fake_run(tmp_path / f"{opt}_{batch}_{lr}_{seed}", opt, lr, loss, seed, batch))
    fake_run(tmp_path / "unfinished", "adamw", 4e-3, 0.0, max_iters=20)  # never reached max_iters: ignored
    (tmp_path / "unfinished" / "metrics.jsonl").write_text(json.dumps(dict(iter=10, val_loss=0.0)) + "\n")
    points, rows = lr_transfer.main([*map(str, runs), str(tmp_path / "unfinished"), "--out", str(tmp_path / "t")])
    assert len(points) == 20 and all(p["n"] == 2 for p in points)
    first, second = rows
    assert (first["adamw_best_lr"], first["adams_best_lr"]) == (4e-3, 1e-3)
    assert first["ratio_grid"] == pytest.approx(0.25) and first["ratio_fitted"] == pytest.approx(0.25)
    assert first["adamw_best_loss"] == pytest.approx(2.015) and first["adamw_best_std"] == pytest.approx(0.01 / 2**0.5)
    assert second["adams_best_lr"] == 5e-4 and not second["adams_bracketed"] and second["ratio_fitted"] is None
    assert first["ratio_bracketed"] and not second["ratio_bracketed"]  # drawn filled and hollow
    assert "edge of grid" in (tmp_path / "t.md").read_text()
    assert (tmp_path / "t.png").exists() and (tmp_path / "t_points.csv").exists()


def test_lr_transfer_keeps_run_lengths_apart(tmp_path):
    # the same size and batch at two run lengths: AdamW's optimum 4e-3 over 10 steps and 2e-3 over 80,
    # AdamS's 1e-3 at both. Pooled, the two lengths would blur into one optimum; kept apart, each is exact.
    runs = []
    for steps, opt, best in ((10, "adamw", 4e-3), (10, "adams", 1e-3), (80, "adamw", 2e-3), (80, "adams", 1e-3)):
        for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
            runs.append(fake_run(tmp_path / f"{opt}_{steps}_{lr}", opt, lr, math.log2(lr / best) ** 2 + 2,
                                 max_iters=steps))
    points, rows = lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "t")])
    assert len(points) == 24 and [r["steps"] for r in rows] == [10, 80]
    assert [r["ratio_fitted"] for r in rows] == [pytest.approx(0.25), pytest.approx(0.5)]
    assert [line.split("|")[3].strip() for line in (tmp_path / "t.md").read_text().splitlines()[2:]] == ["10", "80"]


def test_lr_transfer_keeps_betas_apart(tmp_path):
    # AdamS at beta2 0.95 (best 1e-3) and 0.99 (best 5e-4), AdamW at 0.95 only (best 4e-3): pooled, the
    # two AdamS grids would blur into one optimum; apart, each is exact, and only 0.95 has a ratio
    runs = []
    for opt, beta2, best in (("adamw", 0.95, 4e-3), ("adams", 0.95, 1e-3), ("adams", 0.99, 5e-4)):
        for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
            runs.append(fake_run(tmp_path / f"{opt}_{beta2}_{lr}", opt, lr, math.log2(lr / best) ** 2 + 2,
                                 beta1=0.9, beta2=beta2))
    points, rows = lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "t")])
    assert len(points) == 18 and [r["betas"] for r in rows] == [(0.9, 0.95), (0.9, 0.99)]
    assert rows[0]["ratio_fitted"] == pytest.approx(0.25) and rows[1]["adams_fitted_lr"] == pytest.approx(5e-4)
    assert "adamw_best_lr" not in rows[1] and rows[1].get("ratio_grid") is None
    table = (tmp_path / "t.md").read_text().splitlines()
    assert "β1, β2" in table[0] and [line.split("|")[4].strip() for line in table[2:]] == ["β 0.9, 0.95", "β 0.9, 0.99"]
    assert (tmp_path / "t.png").exists()
    # an --out prefix with a dot keeps it: two prefixes differing after the dot write different files
    for prefix in ("t_b0.95", "t_b0.99"):
        lr_transfer.main([*map(str, runs), "--out", str(tmp_path / prefix)])
    assert {f"{p}{ext}" for p in ("t_b0.95", "t_b0.99") for ext in (".md", ".csv", ".png", "_points.csv")} <= \
        {f.name for f in tmp_path.iterdir()}


def test_lr_transfer_refuses_a_grid_at_two_embedding_multiples(tmp_path):
    # AdamS at 1e-3 with the embedding at 20x and at 40x would otherwise be averaged as two seeds of one
    # grid point; AdamW at another multiple than AdamS's is a fair pairing and stays allowed
    runs = [fake_run(tmp_path / f"adams_{scale}", "adams", 1e-3, 2.0, embedding_lr_scale=scale) for scale in (20.0, 40.0)]
    runs.append(fake_run(tmp_path / "adamw", "adamw", 4e-3, 2.0, embedding_lr_scale=1.0))
    out = tmp_path / "t"
    with pytest.raises(UserError, match="the adams runs at 1,000 params.* mix embedding_lr_scale 20, 40"):
        lr_transfer.main([*map(str, runs), "--out", str(out)])
    assert not any(tmp_path.glob("t*"))  # nothing written
    points, _ = lr_transfer.main([str(runs[0]), str(runs[2]), "--out", str(out)])
    assert [p["optimizer"] for p in points] == ["adams", "adamw"]


def test_lr_transfer_refuses_a_grid_on_two_datasets(tmp_path):
    # the same grid on the full corpus and on a quarter of it would be averaged as seeds of one point
    runs = [fake_run(tmp_path / f"adamw_{d}", "adamw", 4e-3, 2.0, dataset=d) for d in ("pystdlib", "pystdlib_q4")]
    with pytest.raises(UserError, match="the adamw runs at 1,000 params.* mix dataset pystdlib, pystdlib_q4; their losses"):
        lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "t")])
    assert not any(tmp_path.glob("t*"))


def test_lr_transfer_matched_seeds_keeps_each_grid_on_its_shared_seeds(tmp_path):
    # AdamW's loss is (log2(lr / 4e-3))^2 + 2 on seed 1 and 0.5 higher on seed 2, which ran at 4e-3 alone.
    # Pooled, 4e-3 reads 2.25 against neighbours at 3 and the std is 0.354; matched, seed 2 is left out, the
    # point reads 2.0 on one seed and the parabola through 2e-3, 4e-3, 8e-3 puts the optimum at 4e-3 exactly.
    runs = [fake_run(tmp_path / f"w_{lr}_1", "adamw", lr, math.log2(lr / 4e-3) ** 2 + 2) for lr in (2e-3, 4e-3, 8e-3)]
    runs.append(fake_run(tmp_path / "w_4e-3_2", "adamw", 4e-3, 2.5, seed=2))
    points, _ = lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "pooled")])
    assert [(p["n"], p["mean"]) for p in points] == [(1, 3.0), (2, 2.25), (1, 3.0)]
    points, rows = lr_transfer.main([*map(str, runs), "--matched-seeds", "--out", str(tmp_path / "matched")])
    assert [(p["n"], p["mean"]) for p in points] == [(1, 3.0), (1, 2.0), (1, 3.0)]
    assert rows[0]["adamw_fitted_lr"] == pytest.approx(4e-3)
    # a grid whose points share no seed at all is refused, naming it, and nothing is written
    lone = fake_run(tmp_path / "s_1e-3_1", "adams", 1e-3, 2.0, seed=1), fake_run(tmp_path / "s_2e-3_2", "adams", 2e-3, 2.0, seed=2)
    with pytest.raises(UserError, match="the adams grid at 1,000 params, 2,048 tokens/step, 10 steps has no seed"):
        lr_transfer.main([*map(str, runs + list(lone)), "--matched-seeds", "--out", str(tmp_path / "none")])
    assert not any(tmp_path.glob("none*"))


def test_lr_transfer_pairs_adams_with_adamw_seed_by_seed(tmp_path):
    # seed 2 ends 0.3 higher than seed 1 for both optimizers: each grid point's std is 0.212, but AdamS - AdamW
    # is the same on both seeds (+0.1 at 4e-3, -0.2 at 1e-3), so the paired std is 0 up to rounding. AdamS's
    # 5e-4 has no AdamW beside it and AdamW's 1e-3 seed 3 no AdamS: neither is paired. A diverged AdamS run
    # (inf) is a difference of +inf, and a point with one leaves its mean undefined rather than finite.
    runs = []
    for opt, lr, base in (("adamw", 1e-3, 2.5), ("adamw", 4e-3, 2.0), ("adams", 5e-4, 2.4), ("adams", 1e-3, 2.3),
                          ("adams", 4e-3, 2.1)):
        for seed in (1, 2):
            runs.append(fake_run(tmp_path / f"{opt}_{lr}_{seed}", opt, lr, base + 0.3 * (seed - 1), seed))
    runs.append(fake_run(tmp_path / "adamw_1e-3_3", "adamw", 1e-3, 9.0, seed=3))
    for opt, loss in (("adamw", 2.2), ("adams", math.inf)):
        runs.append(fake_run(tmp_path / f"{opt}_1.6e-2_1", opt, 1.6e-2, loss))
    points, _ = lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "t")])
    assert next(p for p in points if (p["optimizer"], p["lr"]) == ("adams", 4e-3))["std"] == pytest.approx(0.3 / 2**0.5)
    with open(tmp_path / "t_paired.csv") as f:
        paired = list(csv.DictReader(f))
    assert [(r["lr"], r["seeds"], r["differences"]) for r in paired] == [
        ("0.001", "1 2", "-0.2000 -0.2000"), ("0.004", "1 2", "+0.1000 +0.1000"), ("0.016", "1", "+inf")]
    assert [float(r["mean"]) for r in paired[:2]] == [pytest.approx(-0.2), pytest.approx(0.1)]
    assert [float(r["std"]) for r in paired[:2]] == [pytest.approx(0, abs=1e-12)] * 2 and math.isnan(float(paired[2]["mean"]))
    # one optimizer alone: nothing to pair, no file, and the figure keeps its two panels
    lr_transfer.main([str(r) for r in runs if "adamw" in r.name] + ["--out", str(tmp_path / "w")])
    assert not (tmp_path / "w_paired.csv").exists() and (tmp_path / "w.png").exists()
