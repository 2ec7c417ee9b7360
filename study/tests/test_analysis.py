"""The study's pooled analysis (study/lr_ratio.py, start_lr.py, crossing_fit.py, ...), on tables made in the test."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from errors import UserError
from study import lr_transfer
from study.tests.helpers import fake_run, write_noise_csv

REPO = Path(__file__).resolve().parents[2]


def test_beta2_lr_divides_adamws_best_by_each_beta2s_rbar(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --out's default is relative to where the command runs
    # study/beta2_lr.py on a made-up repo: AdamW best 4e-3 (exact parabola), AdamS at beta2
    # 0.95 (best 1e-3) and 0.99 (best 5e-4); R-bar of the body 4 (geometric mean of 2 and 8) and 5. AdamS
    # at beta1 0.95 (best 2.5e-4) is kept apart and gets no R-bar: the probe's momentum is beta1 0.9
    import importlib.util

    spec = importlib.util.spec_from_file_location("beta2_lr", REPO / "study/beta2_lr.py")
    beta2_lr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(beta2_lr)
    runs = []
    for opt, beta1, beta2, best in (("adamw", 0.9, 0.95, 4e-3), ("adams", 0.9, 0.95, 1e-3), ("adams", 0.9, 0.99, 5e-4),
                                    ("adams", 0.95, 0.95, 2.5e-4)):
        for lr in (1.25e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
            runs.append(fake_run(tmp_path / "runs" / f"{opt}_{beta1}_{beta2}_{lr}", opt, lr,
                                 math.log2(lr / best) ** 2 + 2, beta1=beta1, beta2=beta2))
    (tmp_path / "study/results/analysis").mkdir(parents=True)
    lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "study/results/beta2_lr")])
    for beta2, ratios in ((0.95, (2.0, 8.0)), (0.99, (5.0,))):
        folder = tmp_path / f"study/results/analysis/noise_scale_beta2/beta2={beta2}"
        folder.mkdir(parents=True)
        with open(folder / "noise_scale.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["run", "iter", "tensor", "measured_ratio", "adams_beta2"])
            writer.writeheader()
            for i, r in enumerate(ratios):  # the whole model's row must not be the one read
                writer.writerow(dict(run="p", iter=i, tensor="body", measured_ratio=r, adams_beta2=beta2))
                writer.writerow(dict(run="p", iter=i, tensor="all", measured_ratio=100.0, adams_beta2=beta2))
    with pytest.raises(UserError, match="does not exist"):
        beta2_lr.main(["--lr", "results/missing"], root=tmp_path)
    table = beta2_lr.main([], root=tmp_path)
    assert [(t["beta1"], t["beta2"]) for t in table] == [(0.9, 0.95), (0.9, 0.99), (0.95, 0.95)]
    assert [t["rbar"] for t in table[:2]] == [pytest.approx(4.0), pytest.approx(5.0)]
    assert math.isnan(table[2]["rbar"])
    assert [t["fitted_lr"] for t in table] == [pytest.approx(1e-3), pytest.approx(5e-4), pytest.approx(2.5e-4)]
    assert table[0]["pure_noise"] == pytest.approx(10**0.5)  # 1/sqrt(c) at (0.9, 0.95)
    out = capsys.readouterr().out
    assert "| 0.9, 0.95 | 4.00 | 3.16 | 0.001 | 0.001 (fit 0.001) | 2.000 (1) | 1.00 |" in out
    assert "| 0.9, 0.99 | 5.00 | 4.01 | 0.0008 | 0.0005 (fit 0.0005) | 2.000 (1) | 1.60 |" in out
    assert "| 0.95, 0.95 | — | 3.67 | — | 0.00025 (fit 0.00025) | 2.000 (1) | — |" in out
    assert (tmp_path / "out/beta2_lr.png").stat().st_size > 0  # the default: under out/, never into results/


def test_lr_ratio_pairs_each_adams_optimum_with_adamws(tmp_path, capsys, lr_ratio, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --out's default is relative to where the command runs
    # study/lr_ratio.py over parabola_scans: ratios 1/4 and 1/8 from the fits, gap 2.115 - 2.03
    # with the two seed stds in quadrature
    scans, rbar = parabola_scans(tmp_path)
    rows = lr_ratio.main([], root=tmp_path, scans=scans, rbar=rbar)
    assert [(r["betas"], r["varied"]) for r in rows] == [((0.9, 0.95), "AdamS's β2"), ((0.9, 0.99), "AdamS's β2")]
    assert [r["ratio"] for r in rows] == [pytest.approx(0.25), pytest.approx(0.125)] and all(r["fitted"] for r in rows)
    assert rows[0]["gap"] == pytest.approx(2.115 - 2.03)
    assert rows[0]["gap_std"] == pytest.approx(math.hypot(0.01, 0.02) / 2**0.5)
    assert rows[0]["rbar"] == pytest.approx(4.0) and math.isnan(rows[1]["rbar"])
    # where AdamS's loss crosses AdamW's at the same lr: two parabolas of equal width differ by a line in
    # log2 lr, so with u = log2(lr / AdamS's best) the difference is 4u - 4 + 0.085 at beta2 0.95 (bests two
    # octaves apart) and 6u - 9 + 0.085 at 0.99 (three apart); zero at u = 0.97875 and 1.485833, i.e. AdamW's
    # best x 2^(u - 2) and x 2^(u - 3). The grid's linear reading is exact for a line. Both crossings lie
    # between 1e-3 and 2e-3, where AdamW's grid reads 6.03 and 3.03 (two and one octaves from its best),
    # so the loss there is the chord's, 6.03 - 3t at u = t (beta2 0.95) and u = 1 + t (0.99), minus 2.03
    assert rows[0]["carry"] == ("=", pytest.approx(2 ** (0.97875 - 2)), pytest.approx(6.03 - 3 * 0.97875 - 2.03))
    assert rows[1]["carry"] == ("=", pytest.approx(2 ** (8.915 / 6 - 3)), pytest.approx(6.03 - 3 * (8.915 / 6 - 1) - 2.03))
    out = capsys.readouterr().out
    # the crossing over AdamS's own best: 2^0.97875 = 1.97 and 2^1.485833 = 2.80
    # AdamW's optimum's low edge: its grid means read 3.03 at 2e-3 and 2.03 at 4e-3, so the line between them
    # reaches 2.03 + 0.01 at 2e-3 x 2^0.99, i.e. AdamW's best x 2^-0.01; over R-bar 4 and AdamS's best (1/4 of
    # AdamW's) that is 2^-0.01 = 0.993
    assert rows[0]["edge"] == pytest.approx(2 ** -0.01)
    assert rows[0]["ratio_wide"] == pytest.approx(0.25) and rows[1]["ratio_wide"] == pytest.approx(0.125)  # exact parabolas
    assert "| AdamS's β2 | 0.001M, bytes, 10 steps × 2,048 tok | 0.25 | 0.25 | 0.25 | 4.00 | 1.00 | 0.99 | +0.085 ± 0.016 | 0.49 " \
        "| 1.97 | +1.064 | +4.085 | 2, 2 |" in out
    # 0.125 and 2.5425: which way the last digit rounds is up to the float
    assert "| AdamS's β2 | 0.001M, bytes, 10 steps × 2,048 tok, AdamS β 0.9, 0.99 | 0.12 | 0.12 | 0.1" in out
    assert "| — | — | — | +0.085 ± 0.016 | 0.35 | 2.80 | +2.54" in out
    # AdamS at AdamW's best grid lr (4e-3), two octaves above AdamS's best at beta2 0.95 and three at 0.99:
    # 4 + 2.115 and 9 + 2.115 (AdamS's seed means), against AdamW's 2.03 there
    assert rows[0]["same_lr"] == pytest.approx(4.085) and rows[1]["same_lr"] == pytest.approx(9.085)
    assert "| +9.085 | 2, 2 |" in out
    # the tokens figure's crossing panel draws a crossing, and leaves a bound (no crossing in the grids) to its marker
    assert lr_ratio.crossing(rows[0]) == pytest.approx(2 ** (0.97875 - 2))
    assert math.isnan(lr_ratio.crossing(dict(carry=("<", 0.33, math.nan)))) and math.isnan(lr_ratio.crossing(dict(carry=None)))
    assert (tmp_path / "out/lr_ratio.png").stat().st_size > 0  # the default: under out/, never into results/
    assert (tmp_path / "out/lr_ratio_tokens.png").stat().st_size > 0
    with pytest.raises(UserError, match="results/missing.csv does not exist"):
        lr_ratio.main([], root=tmp_path, scans=(("results/missing.csv", "x", "y"),), rbar=rbar)
    with pytest.raises(UserError, match="noise_other.csv has no run 'w'"):
        lr_ratio.main([], root=tmp_path, scans=scans, rbar=(((1000, 2048, 10, (0.9, 0.95)), "study/results/analysis/noise_other.csv", "w"),))
    (tmp_path / "results/t_points.csv").unlink()
    with pytest.raises(UserError, match="t_points.csv does not exist; lr_transfer writes it"):
        lr_ratio.main([], root=tmp_path, scans=scans, rbar=rbar)


def test_start_lr_costs_each_start_against_adams_best_grid_point(tmp_path, capsys, start_lr):
    # AdamW's best grid lr 8e-3 (1.6e-2 diverged, left out); AdamS 1.10, 1.05 and 1.09 at 2e-3, 4e-3 and 8e-3:
    # AdamW's lr costs 1.09 - 1.05, half of it nothing, a quarter 1.10 - 1.05; over R-bar 2^1.5 the start is
    # 2e-3 x 2^0.5, halfway between 2e-3 and 4e-3 in log lr, where the line reads 1.075
    adamw = [(2e-3, 1.2), (4e-3, 1.1), (8e-3, 1.0), (1.6e-2, math.inf)]
    adams = [(1e-3, 1.3), (2e-3, 1.10), (4e-3, 1.05), (8e-3, 1.09)]
    costs = start_lr.start_costs(adamw, adams, 2**1.5)
    assert list(costs.values())[:4] == [pytest.approx(0.04), pytest.approx(0.0), pytest.approx(0.05), pytest.approx(0.025)]
    # no R-bar measured, and an AdamS grid that stops below AdamW's lr: those starts are blank, not guessed
    costs = start_lr.start_costs(adamw, adams[:3], math.nan)
    assert math.isnan(costs["AdamW's lr"]) and math.isnan(costs["AdamW's / R̄"]) and costs["½ of it"] == pytest.approx(0.0)
    # the three-point scans read their best point: with AdamS falling all the way to AdamW's 8e-3, 1e-3-4e-3
    # (an eighth to a half) ends 1.1 - 1.0 short and 2e-3-8e-3 (a quarter to 1x) reaches it; a scan with a
    # point outside AdamS's grid is blank, though its other two points are read
    falling = [(1e-3, 1.3), (2e-3, 1.2), (4e-3, 1.1), (8e-3, 1.0)]
    costs = start_lr.start_costs(adamw, falling, math.nan)
    assert (costs["best of ⅛, ¼, ½"], costs["best of ¼, ½, 1×"]) == (pytest.approx(0.1), pytest.approx(0.0))
    costs = start_lr.start_costs(adamw, falling[:3], math.nan)
    assert costs["best of ⅛, ¼, ½"] == pytest.approx(0.0) and math.isnan(costs["best of ¼, ½, 1×"])
    # over parabola_scans (AdamW best 4e-3, AdamS's 1e-3 at beta2 0.95, R-bar 4): two octaves above AdamS's
    # best cost 4, one octave 1, a quarter and R-bar nothing; AdamS at beta2 0.99 is not at the paper's beta
    scans, rbar = parabola_scans(tmp_path)
    rows = start_lr.main(["--out", str(tmp_path / "start")], root=tmp_path, scans=scans, rbar=rbar)
    assert len(rows) == 1 and list(rows[0]["costs"].values()) == [pytest.approx(v) for v in (4.0, 1.0, 0.0, 0.0, 0.0, 0.0)]
    out = capsys.readouterr().out
    assert "| 20.5 | 0.001M, bytes, 10 steps × 2,048 tok | 0.25 | 4.000 | 1.000 | 0.000 | 0.000 | 0.000 | 0.000 | 2, 2 |" in out
    assert "| below 50 | 1 | 4.000 (0 of 1) | 1.000 (0 of 1) | 0.000 (1 of 1) | 0.000 (1 of 1) | 0.000 (1 of 1) | 0.000 (1 of 1) |" in out
    # against AdamW at its best (2.03 on the seeds' means, AdamS's best 2.115): each cost + 0.085
    assert "| below 50 | 1 | +4.085 | +1.085 | +0.085 | +0.085 | +0.085 | +0.085 |" in out
    assert (tmp_path / "start.png").stat().st_size > 0
    # the counts redrawn from the seeds' standard errors: costs of 1 and 4 nats never fall within 0.01, and with
    # every point's seeds removed (one seed: no noise to redraw) each count is what was read
    assert "- below 50: AdamW's lr 0-0; ½ of it 0-0;" in out
    one_seed = [dict(s, spreads=tuple({lr: (sd, 1) for lr, (sd, _) in sp.items()} for sp in s["spreads"])) for s in rows]
    bands = [("below 50", one_seed)]
    assert "- below 50: AdamW's lr 0-0; ½ of it 0-0; ¼ of it 1-1; AdamW's / R̄ 1-1" in start_lr.resampled(
        one_seed, bands, [n for n, _ in start_lr.STARTS + start_lr.SCANS3], draws=50)


def test_lr_sensitivity_reads_each_miss_and_the_optimums_width(tmp_path, capsys, lr_sensitivity):
    # best grid lr 2e-3 (1.00); x2 too high (4e-3) costs 0.02, x2 too low (1e-3) 0.10. The 0.01 level is crossed a
    # tenth of an octave below (0.01 of the 0.10 rise) and half an octave above (0.01 of 0.02): 0.6 octaves, exact
    curve = [(1e-3, 1.10), (2e-3, 1.00), (4e-3, 1.02), (8e-3, 1.20), (1.6e-2, math.inf)]
    got = lr_sensitivity.sensitivity(curve)
    assert (got["×2 too high"], got["×2 too low"]) == (pytest.approx(0.02), pytest.approx(0.10))
    assert got["width"] == pytest.approx(0.6) and not got["bound"]
    # still within 0.01 at the grid's lowest point: a lower bound, one octave down plus 0.01 / 0.5 of one up;
    # x2 too low lies off the grid, so blank rather than guessed
    edge = [(2e-3, 1.005), (4e-3, 1.0), (8e-3, 1.5)]
    got = lr_sensitivity.sensitivity(edge)
    assert got["width"] == pytest.approx(1.02) and got["bound"] and math.isnan(lr_sensitivity.sensitivity(edge[1:])["×2 too low"])
    # narrower: settled by an exact width below the other's (even a bound), not by a bound alone or a tie
    exact, bound = dict(width=0.6, bound=False), dict(width=1.02, bound=True)
    assert lr_sensitivity.narrower(exact, bound) is True and lr_sensitivity.narrower(bound, exact) is False
    assert lr_sensitivity.narrower(dict(width=2.0, bound=False), bound) is None
    # over parabola_scans (loss = log2(lr / best)^2 + c): every miss costs 1 nat and each optimum is 0.02 octaves
    # wide (0.01 either side, the parabola read as lines); AdamS at beta2 0.99 is not at the paper's beta
    scans, rbar = parabola_scans(tmp_path)
    rows = lr_sensitivity.main(["--out", str(tmp_path / "sens")], root=tmp_path, scans=scans, rbar=rbar)
    assert len(rows) == 1
    out = capsys.readouterr().out
    assert "| 20.5 | 0.001M, bytes, 10 steps × 2,048 tok | 1.000 | 1.000 | 1.000 | 1.000 | 0.0 | 0.0 |" in out
    assert "| below 50 | 1 | 1.000 / 1.000 (AdamS larger in 0 of 1) | 1.000 / 1.000 (AdamS larger in 0 of 1) | 0 of 1 | 0 of 1 (0 wider, 1 not settled) | 0.0 / 0.0 | 0 of 1 |" in out
    assert (tmp_path / "sens.png").stat().st_size > 0


def test_optimum_drift_follows_each_optimum_over_run_length(tmp_path, capsys, optimum_drift):
    # the slope of log2 optimum on log2 run length, as a factor per doubling: halving each doubling reads 0.5
    assert optimum_drift.drift([100, 200, 400], [4e-3, 2e-3, 1e-3]) == pytest.approx(0.5)
    assert optimum_drift.drift([100, 400], [1e-3, 1e-3]) == pytest.approx(1.0)
    # one model at 10 and 40 steps (20.5 and 81.9 tokens per parameter, two doublings), loss = log2(lr / best)^2:
    # AdamW's best falls from 4e-3 to 1e-3 (spread 4, x0.5 per doubling), AdamS's stays at 1e-3 (spread 1, x1)
    runs = []
    for steps, adamw_best in ((10, 4e-3), (40, 1e-3)):
        for opt, best in (("adamw", adamw_best), ("adams", 1e-3)):
            for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
                runs.append(fake_run(tmp_path / "runs" / f"{opt}_{steps}_{lr}", opt, lr, math.log2(lr / best) ** 2 + 2.0,
                                     max_iters=steps, beta1=0.9, beta2=0.95))
    lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "results/t")])
    scans = (("results/t.csv", "run length", "bytes"),)
    (m,) = optimum_drift.main(["--out", str(tmp_path / "drift")], root=tmp_path, scans=scans, rbar=())
    assert m["tpp"] == [pytest.approx(20.48), pytest.approx(81.92)]
    assert m["spread"] == dict(AdamW=pytest.approx(4.0), AdamS=pytest.approx(1.0))
    assert m["carried"] == dict(AdamW=pytest.approx(0.25), AdamS=pytest.approx(1.0))
    # at the longest run (82 tokens per parameter: a quarter of AdamW's lr), AdamS's shortest-run best (1e-3) and a
    # quarter of AdamW's shortest-run best (4e-3 / 4) land on AdamS's best; a quarter of AdamW's longest-run best
    # (2.5e-4) is two octaves below it: log2(1/4)^2 = 4 nats
    assert list(m["costs"].values()) == [pytest.approx(0.0), pytest.approx(0.0), pytest.approx(4.0)]
    assert m["drift"] == dict(AdamW=pytest.approx(0.5), AdamS=pytest.approx(1.0))
    out = capsys.readouterr().out
    assert "| 1K, bytes, 2,048 tok | 20, 82 | 0.004, 0.001 | 0.001, 0.001 | 4.00 / 1.00 | 0.25 / 1.00 | 0.50 / 1.00 | 1, 1 |" in out
    assert "AdamS's spread the smaller in 1 of 1 models" in out and "within ×2 of the longest's in 0 (AdamW) and 1 (AdamS) of 1" in out
    assert "| 1K, bytes, 2,048 tok | 20.5 → 81.9 | 0.000 | 0.000 | 4.000 |" in out
    assert "¼ or ½ of AdamW's best on the longest run: 0 of 1, worst 4.000" in out
    assert (tmp_path / "drift.png").stat().st_size > 0
    # a model at one run length has nothing to drift over: a clear error, not an empty table
    scans, rbar = parabola_scans(tmp_path / "one")
    with pytest.raises(UserError, match="no model was scanned at two or more run lengths"):
        optimum_drift.main(["--out", str(tmp_path / "none")], root=tmp_path / "one", scans=scans, rbar=rbar)


def test_lr_ratio_carry_over_reads_the_shared_lr_range_only(lr_ratio):
    carry_over = lr_ratio.carry_over
    adamw = [(1e-3, 2.0), (2e-3, 1.9)]
    # AdamS behind at both shared lrs (its 4e-3 point lies outside AdamW's grid, read at 2e-3 as 2.3): a bound
    assert carry_over(adamw, [(1e-3, 2.1), (4e-3, 2.5)]) == ("<", pytest.approx(1e-3), 2.0)
    assert carry_over(adamw, [(5e-4, 1.5), (4e-3, 1.8)]) == (">", pytest.approx(2e-3), pytest.approx(1.9))
    # no shared range: apart, or touching at one lr
    assert carry_over(adamw, [(4e-3, 1.0), (8e-3, 1.0)]) is None
    assert carry_over(adamw, [(5e-4, 1.0), (1e-3, 1.0)]) is None
    # two crossings upward: the higher one, midway in log lr between 4e-3 and 8e-3; a diverged point is left out
    flat = [(lr, 2.0) for lr in (1e-3, 2e-3, 4e-3, 8e-3)]
    wavy = [(1e-3, 1.9), (2e-3, 2.1), (4e-3, 1.9), (8e-3, 2.1), (1.6e-2, math.inf)]
    assert carry_over(flat, wavy) == ("=", pytest.approx((4e-3 * 8e-3) ** 0.5), pytest.approx(2.0))
    with pytest.raises(ValueError, match="outside the grid"):
        lr_ratio.read([(0.0, 1.0), (1.0, 2.0)], 1.5)


def test_lr_ratio_joins_one_models_runs_of_different_lengths(lr_ratio):
    # the tokens figure draws a line through settings that differ in steps only: here the 33K model at 400,
    # 1,600 and 3,200 steps (shortest first; the 3,200-step one from another scan), not its single 800-step run
    # at another batch, another model, AdamS at another beta2 over the same runs, or the same model on other text
    def row(params, batch, steps, betas=(0.9, 0.95), varied="run length", text="bytes"):
        return dict(varied=varied, text=text, params=params, batch_tokens=batch, steps=steps, betas=betas)
    rows = [row(32928, 2048, 1600), row(32928, 8192, 800), row(115008, 2048, 5625), row(32928, 2048, 400),
            row(32928, 2048, 400, betas=(0.9, 0.99)), row(32928, 2048, 3200, varied="width"),
            row(32928, 2048, 6400, text="GPT-2 tokens")]
    groups = lr_ratio.lengths(rows)
    assert [[r["steps"] for r in g] for g in groups] == [[400, 1600, 3200]]
    assert lr_ratio.tokens_per_param(rows[0]) == pytest.approx(2048 * 1600 / 32928)
    assert [lr_ratio.size(n) for n in (32928, 115008, 823296, 3213568, 124475904)] == ["33K", "115K", "0.82M", "3.2M", "124M"]


def test_lr_ratio_low_edge_is_the_lowest_lr_within_reach_of_the_best(lr_ratio):
    low_edge = lr_ratio.low_edge
    # a plateau: 2e-3 and 8e-3 within 0.01 of the best (4e-3), 1e-3 0.1 above it: from 1e-3 to 2e-3 the line
    # falls from 2.1 to 2.005 and crosses 2.01 a fraction (2.1 - 2.01) / 0.095 of the way, in log lr (unsorted
    # input; a diverged point is left out)
    curve = [(8e-3, 2.008), (1e-3, 2.1), (4e-3, 2.0), (2e-3, 2.005), (1.6e-2, math.nan)]
    assert low_edge(curve, 0.01) == pytest.approx(1e-3 * 2 ** (0.09 / 0.095))
    assert low_edge(curve, 0.0) == pytest.approx(4e-3)  # within nothing: the best grid point
    assert low_edge(curve, 0.2) == pytest.approx(1e-3)  # the grid's lowest lr is already within reach
    # the line is read in log lr: from 3.0 at 1e-3 to 1.0 at 4e-3 it passes 2.0 at 2e-3, not at 2.5e-3
    assert low_edge([(1e-3, 3.0), (4e-3, 1.0)], 1.0) == pytest.approx(2e-3)


def test_lr_ratio_prints_a_bound_where_the_grids_do_not_cross(tmp_path, capsys, lr_ratio, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # loss = log2(lr / best)^2 + c: AdamW's best 4e-3 (c = 2), AdamS's 1e-3 (c = 1). In the lrs both grids
    # span, 1e-3 to 2e-3, AdamS is ahead (1 against 6, 2 against 3), so AdamW's lr carries over at least
    # to 2e-3: 0.5x AdamW's best and 2x AdamS's, with no loss at a crossing to report
    runs = [fake_run(tmp_path / "runs" / f"{opt}_{lr}", opt, lr, math.log2(lr / best) ** 2 + c, beta1=0.9, beta2=0.95)
            for opt, best, c, lrs in (("adamw", 4e-3, 2.0, (1e-3, 2e-3, 4e-3, 8e-3)),
                                      ("adams", 1e-3, 1.0, (2.5e-4, 5e-4, 1e-3, 2e-3)))
            for lr in lrs]
    lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "results/t")])
    (tmp_path / "study/results/analysis").mkdir(parents=True)
    rows = lr_ratio.main([], root=tmp_path, scans=(("results/t.csv", "batch", "bytes"),), rbar=())
    assert rows[0]["carry"] == (">", pytest.approx(0.5), pytest.approx(3.0 - 2.0))
    # AdamS's grid stops at 2e-3, below AdamW's best 4e-3: what AdamW's lr costs AdamS is not measured
    assert math.isnan(rows[0]["same_lr"])
    assert "| 0.25 | 0.25 | 0.25 | — | — | — | -1.000 ± 0.000 | > 0.50 | > 2.00 | — | — | 1, 1 |" in capsys.readouterr().out
    # the same table named on the command line instead of in SCANS: the scan is named for the file
    rows = lr_ratio.main(["--tables", str(tmp_path / "results/t.csv"), "--out", str(tmp_path / "named")], rbar=())
    assert [(r["varied"], r["ratio"]) for r in rows] == [("t", pytest.approx(0.25))]
    assert "| t | 0.001M, 10 steps × 2,048 tok | 0.25 |" in capsys.readouterr().out
    assert (tmp_path / "named.png").is_file()
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="other.csv has no params, batch_tokens, steps columns: it is not an lr_transfer table"):
        lr_ratio.main(["--tables", str(tmp_path / "other.csv"), "--out", str(tmp_path / "nothing")], rbar=())
    assert not (tmp_path / "nothing.png").exists()


def test_lr_ratio_at_adamw_best_reads_adams_in_log_lr(lr_ratio):
    at_adamw_best = lr_ratio.at_adamw_best
    adamw = [(1e-3, 2.5), (4e-3, 2.0), (1.6e-2, math.nan), (8e-3, 2.2)]  # best 4e-3; a diverged point left out
    # AdamS from 2.0 at 2e-3 to 3.0 at 8e-3: at 4e-3, halfway in log lr, 2.5, against AdamW's 2.0
    assert at_adamw_best(adamw, [(8e-3, 3.0), (2e-3, 2.0)]) == pytest.approx(0.5)
    assert at_adamw_best(adamw, [(4e-3, 1.9), (8e-3, math.inf)]) == pytest.approx(-0.1)  # a grid point itself
    # AdamS's grid ends below 4e-3 once its diverged point is left out: not measured
    assert math.isnan(at_adamw_best(adamw, [(1e-3, 2.0), (2e-3, 2.1), (4e-3, math.inf)]))
    assert math.isnan(at_adamw_best(adamw, [(8e-3, 2.0), (1.6e-2, 2.1)]))


def test_lr_ratio_wide_fit_is_least_squares_over_up_to_five_points(lr_ratio):
    wide_fit = lr_ratio.wide_fit
    lrs = [math.exp(x) for x in range(7)]  # log lr = 0 .. 6
    # an exact parabola in log lr is recovered from any window, whatever its points' order
    assert wide_fit([(lr, (math.log(lr) - 2.6) ** 2) for lr in reversed(lrs)]) == pytest.approx(math.exp(2.6))
    # |log lr - 3|, symmetric about 3 in the five points 1..5 around the best: the fit's vertex is 3 by symmetry,
    # and the points at 0 and 6 (outside the window) are ignored even where they would tilt it
    curve = [(lr, abs(math.log(lr) - 3)) for lr in lrs]
    curve[0] = (lrs[0], 100.0)
    assert wide_fit(curve) == pytest.approx(math.exp(3))
    # four points in reach, 1 0 0 1 at log lr 0..3 (best at 1, the first of the tie): symmetric about 1.5
    assert wide_fit([(lrs[i], y) for i, y in enumerate((1.0, 0.0, 0.0, 1.0))]) == pytest.approx(math.exp(1.5))
    # the steeper side pulls the vertex away from it: 1 before, 4 after the minimum at log lr 2 (the
    # normal equations by hand: b = 27/10 over centred log lr, a = 35/14, vertex 2 - 2.7/5)
    assert wide_fit([(lrs[i], y) for i, y in enumerate((4.0, 1.0, 0.0, 4.0, 16.0))]) == pytest.approx(math.exp(2 - 0.54))
    # no fit: the best at the grid's edge, three points only (the three-point parabola's job), a diverged point
    # that leaves three
    assert wide_fit([(lrs[i], y) for i, y in enumerate((0.0, 1.0, 2.0, 3.0))]) is None
    assert wide_fit([(lrs[i], y) for i, y in enumerate((1.0, 0.0, 1.0))]) is None
    assert wide_fit([(lrs[i], y) for i, y in enumerate((1.0, 0.0, 1.0, math.inf))]) is None


def test_repetition_reads_one_setting_of_a_points_table(tmp_path):
    # study/repetition.py: of a points table holding two settings, it keeps the asked one only
    import importlib.util

    spec = importlib.util.spec_from_file_location("repetition", REPO / "study/repetition.py")
    repetition = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(repetition)
    points = tmp_path / "points.csv"
    rows = [("adamw", 100, 4e-3, 1.5), ("adams", 100, 1e-3, 1.4), ("adams", 100, 2e-3, 1.3), ("adams", 200, 1e-3, 9.0)]
    points.write_text("params,batch_tokens,steps,betas,optimizer,lr,n,mean,std\n" + "".join(
        f'7,2048,{steps},"(0.9, 0.95)",{opt},{lr},2,{mean},0.01\n' for opt, steps, lr, mean in rows))
    assert repetition.grid(points, 7, 100) == {"adamw": {4e-3: (1.5, 0.01)}, "adams": {1e-3: (1.4, 0.01), 2e-3: (1.3, 0.01)}}
    with pytest.raises(UserError, match="no AdamW and AdamS grids at 7 parameters and 200 steps"):
        repetition.grid(points, 7, 200)
    with pytest.raises(UserError, match="missing"):
        repetition.grid(tmp_path / "none.csv", 7, 100)


def test_run_length_pairs_finished_runs_by_seed_at_shared_evaluations(tmp_path):
    # study/run_length.py: AdamS - AdamW at each evaluation both made (step 0 left out),
    # only where both runs of a seed finished; tokens per parameter from the run's derived sizes
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_length", REPO / "study/run_length.py")
    run_length = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_length)

    def run(opt, seed, losses):
        d = tmp_path / "w" / opt / f"learning_rate=4e-3_seed={seed}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"config": {"max_iters": 200, "seed": seed},
                                                   "derived": {"tokens_per_iter": 50, "parameters": 100}}))
        (d / "metrics.jsonl").write_text("".join(json.dumps({"kind": "eval", "iter": i, "val_loss": v}) + "\n"
                                                 for i, v in losses.items()))

    run("adams", 1, {0: 5.0, 100: 2.0, 150: 1.9, 200: 1.5})
    run("adamw", 1, {0: 5.0, 100: 2.5, 200: 1.25})  # no evaluation at 150: that step is not compared
    run("adams", 2, {0: 5.0, 200: 1.0})
    run("adamw", 2, {0: 5.0, 100: 2.0})  # unfinished: seed 2 is left out
    run("adams", 3, {0: 5.0, 200: 1.0})  # no AdamW run at all
    [p] = run_length.pairs(tmp_path / "w", "4e-3")
    assert (p["seed"], p["steps"], p["tokens_per_param"]) == (1, 200, 100.0)
    assert p["iters"] == [100, 200] and p["diff"] == [-0.5, 0.25]
    assert run_length.pairs(tmp_path / "w", "2e-3") == []
    with pytest.raises(UserError, match="no finished AdamS/AdamW pair at learning_rate=2e-3"):
        run_length.main(["--lr", "2e-3", "--lengths", str(tmp_path / "w"), "--out", str(tmp_path / "o")])
    run_length.main(["--lengths", str(tmp_path / "w"), "--out", str(tmp_path / "o")])
    rows = (tmp_path / "o.csv").read_text().splitlines()
    assert rows[1:] == ["200,100.0,1,100,0.5,-0.5", "200,100.0,1,200,1.0,0.25"]
    assert (tmp_path / "o.png").stat().st_size > 0


def test_seed_bootstrap_refits_the_ratio_over_every_draw_of_seeds(tmp_path, capsys):
    # loss = (log2(lr / best))^2 + offset: AdamW's best 4e-3 on both seeds; AdamS's 1e-3 on seed 1 and
    # 2e-3 on seed 2. A draw of two seeds averages two parabolas of equal curvature, whose vertex is
    # the mean of the two in log lr, so by hand the ratio is 1/4 for (1, 1), 1/2 for (2, 2) and
    # sqrt(1e-3 * 2e-3) / 4e-3 = 0.354 for (1, 2) and (2, 1). Seed 2 sits 0.3 higher everywhere, which a
    # pairing of the optimizers' seeds must leave out of the ratio
    import importlib.util

    spec = importlib.util.spec_from_file_location("seed_bootstrap", REPO / "study/seed_bootstrap.py")
    seed_bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed_bootstrap)
    best = {("adamw", 1): 4e-3, ("adamw", 2): 4e-3, ("adams", 1): 1e-3, ("adams", 2): 2e-3}
    runs = [fake_run(tmp_path / "runs" / f"{opt}_{lr}_{seed}", opt, lr, math.log2(lr / b) ** 2 + 2 + 0.3 * (seed - 1), seed=seed)
            for (opt, seed), b in best.items() for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)]
    rows = seed_bootstrap.main([*map(str, runs), "--out", str(tmp_path / "boot")])
    ratio = {r["seeds"]: r["ratio"] for r in rows}
    assert ratio.keys() == {"1 1", "1 2", "2 1", "2 2"}
    assert ratio["1 1"] == pytest.approx(0.25) and ratio["2 2"] == pytest.approx(0.5)
    assert ratio["1 2"] == ratio["2 1"] == pytest.approx(2 ** 0.5 / 4)
    out = capsys.readouterr().out
    assert "pooled ratio 0.35" in out and "each seed's own: 1 0.25, 2 0.50" in out and "0 at or above 1" in out
    with open(tmp_path / "boot.csv") as f:
        assert len(list(csv.DictReader(f))) == 4
    assert (tmp_path / "boot.png").stat().st_size > 0
    # a seed AdamS ran at every lr but AdamW did not: the draws would pair unlike seeds, so it refuses
    extra = [fake_run(tmp_path / "runs" / f"adams_{lr}_3", "adams", lr, 2.0, seed=3)
             for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)]
    with pytest.raises(UserError, match="differ; the bootstrap draws seeds for both together"):
        seed_bootstrap.main([*map(str, runs + extra), "--out", str(tmp_path / "boot2")])
    with pytest.raises(UserError, match="only seed 1 ran every lr of both grids"):
        seed_bootstrap.main([*(str(r) for r in runs if r.name.endswith("_1")), "--out", str(tmp_path / "boot3")])


def test_rerun_compares_shared_evaluations_and_the_seed_spread(tmp_path, capsys):
    # study/rerun.py: |first - rerun| over the evaluations both made, step 0 left out;
    # the seeds' standard deviation at those steps (worked by hand: stdev of {1, 3} is sqrt(2))
    import importlib.util

    spec = importlib.util.spec_from_file_location("rerun", REPO / "study/rerun.py")
    rerun = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rerun)

    def run(name, losses):
        d = tmp_path / name
        d.mkdir()
        (d / "metrics.jsonl").write_text("".join(json.dumps({"kind": "eval", "iter": i, "val_loss": v}) + "\n"
                                                 for i, v in losses.items()))
        return d

    first = run("first", {0: 5.0, 100: 2.0, 200: 1.5, 300: 1.25})  # interrupted after 300
    again = run("again", {0: 5.1, 100: 2.5, 200: 1.25, 300: 1.0, 400: 0.5})
    seeds = [run("s1", {100: 1.0, 200: 1.0, 300: 1.0}), run("s2", {100: 3.0, 200: 1.0, 300: 2.0})]
    r = rerun.compare(first, again, seeds, start=200)
    assert (r["evaluations"], r["last_step"]) == (3, 300)
    assert r["mean_abs"] == pytest.approx(1 / 3) and r["max_abs"] == 0.5 and r["max_abs_from"] == 0.25
    assert r["seed_std"] == pytest.approx((0.0, math.sqrt(2)))
    rerun.main([str(first), str(again), "--from", "200"])
    assert "3 shared evaluations (to step 300): |difference| mean 0.3333, max 0.5000, max from step 200 0.2500" in capsys.readouterr().out
    with pytest.raises(UserError, match="share no evaluation after step 0"):
        rerun.compare(first, run("other", {0: 5.0, 50: 3.0}), [])
    with pytest.raises(UserError, match="has no metrics.jsonl"):
        rerun.compare(first, tmp_path / "missing", [])
    with pytest.raises(UserError, match="past the last evaluation both runs made"):
        rerun.compare(first, again, [], start=400)


def test_val_windows_scores_a_checkpoint_on_each_seeds_validation_windows(data_dir, tmp_path, capsys):
    # study/val_windows.py: on the run's own seed it must report exactly what train.py's
    # evaluate() logged at the checkpoint's iteration; its whole-file loss is checked against a
    # closed form with a stand-in model whose "loss" is the mean target id
    import importlib.util

    import train
    from tests.helpers import tiny_config

    spec = importlib.util.spec_from_file_location("val_windows", REPO / "study/val_windows.py")
    val_windows = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(val_windows)
    out = tmp_path / "run"
    train.main(tiny_config(data_dir, out, seed=3))
    rows = val_windows.main([str(out), "--seeds", "1-4", "--out", str(tmp_path / "vw")])
    it = rows[0]["iter"]
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    at_it = next(r["val_loss"] for r in logged if r["kind"] == "eval" and r["iter"] == it)
    assert [r["seed"] for r in rows] == [1, 2, 3, 4] and rows[2]["val_loss"] == pytest.approx(at_it, abs=1e-12)
    assert len({round(r["val_loss"], 9) for r in rows}) == 4  # other seeds, other windows
    assert all(r["offset"] == pytest.approx(r["val_loss"] - r["all_val_loss"]) for r in rows)
    printed = capsys.readouterr().out
    assert f"iter {it}, trained with seed 3" in printed and (tmp_path / "vw.csv").exists() and (tmp_path / "vw.png").stat().st_size > 0

    class MeanTarget(torch.nn.Module):
        def forward(self, x, y):
            return None, y.double().mean()

    tokens = np.arange(103, dtype=np.uint16) % 7  # 10 windows of 10 (+1 for the targets); the last 2 tokens left out
    expected = (tokens[1:101].astype(float)).mean()
    assert val_windows.full_loss(MeanTarget(), tokens, block=10, batch=3) == pytest.approx(expected)

    with pytest.raises(UserError, match="neither a checkpoint file nor a run folder with checkpoints"):
        val_windows.main([str(tmp_path), "--out", str(tmp_path / "x")])
    with pytest.raises(UserError, match="is not a list of seeds"):
        val_windows.main([str(out), "--seeds", "a-b", "--out", str(tmp_path / "x")])


def test_crossing_fit_standard_errors_match_a_two_by_two_worked_by_hand(crossing_fit):
    # log2 tpp and log2 params at 0 and 1, a 2x2 design: X'X = [[4,2,2],[2,2,1],[2,1,2]], det 4, so
    # (X'X)^-1 has 3/4, 1, 1 on its diagonal. y = 1 + 0.5 x1 + 0.25 x2 + e(1,-1,-1,1): the fit returns the
    # coefficients exactly, the residuals are +-e, s^2 = 4e^2 / 1, se(a) = sqrt(3)e, se(b) = se(c) = 2e
    e, x1, x2 = 0.1, np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1])
    y = 1 + 0.5 * x1 + 0.25 * x2 + e * np.array([1, -1, -1, 1])
    f = crossing_fit.fit(2.0**x1, 2.0**x2, 2.0**y)
    assert f["coef"] == pytest.approx([1, 0.5, 0.25]) and f["n"] == 4
    assert f["sd"] == pytest.approx(2 * e) and f["se"] == pytest.approx([math.sqrt(3) * e, 2 * e, 2 * e])
    with pytest.raises(UserError, match="four or more"):
        crossing_fit.fit(2.0**x1[:3], 2.0**x2[:3], 2.0**y[:3])


def test_crossing_fit_brackets_where_the_crossing_first_reaches_one(crossing_fit):
    bracket = crossing_fit.measured_bracket
    assert bracket([(100, 0.5), (200, 0.9), (400, 1.2)]) == "200-400"
    assert bracket([(100, 0.5), (200, 1.1), (400, 0.9), (800, 1.3)]) == "100-200 (below 1 again at 400)"
    assert bracket([(100, 0.5), (200, 0.9)]) == "beyond 200" and bracket([(1600, 1.0)]) == "at or below 1,600"


def test_crossing_fit_check_places_a_new_setting_in_sd_of_a_prediction_worked_by_hand(monkeypatch, capsys, tmp_path, crossing_fit):
    # the 2x2 design of the standard-error test, shifted to 2^7-2^8 tokens per parameter and 2^13-2^14 parameters
    # (a shift moves only the intercept): s = 2e = 0.2 and (X'X)^-1 = [[3,-2,-2],[-2,4,0],[-2,0,4]] / 4 in the
    # unshifted coordinates, so at the corner x = (1, 1, 1) a new setting's variance is s^2 (1 + x'(X'X)^-1 x)
    # = 0.04 (1 + 3/4) = 0.07, around log2 1 + 0.5 + 0.25 = 1.75
    e, lr_ratio = 0.1, crossing_fit.lr_ratio
    fitted = [crossing_row(lr_ratio, 2 ** (13 + x2), 2 ** (7 + x1), 2 ** (1 + 0.5 * x1 + 0.25 * x2 + e * sign))
              for x1, x2, sign in ((0, 0, 1), (1, 0, -1), (0, 1, -1), (1, 1, 1))]
    sd = math.sqrt(0.07)
    new = [crossing_row(lr_ratio, 2**14, 2**8, 2 ** (1.75 + sd)), crossing_row(lr_ratio, 2**14, 2**8, 0.2, kind="<"),
           crossing_row(lr_ratio, 2**14, 25, 2**1.75)]
    # as lr_ratio.settings does, each setting carries its scan's second field: for --check, the table's stem
    monkeypatch.setattr(lr_ratio, "settings", lambda root, scans, rbar: fitted if scans is lr_ratio.SCANS
                        else [dict(s, varied=scans[0][1]) for s in new])
    table = tmp_path / "lr_transfer_new.csv"
    table.write_text("")
    got = crossing_fit.main(["--out", str(tmp_path / "fit"), "--check", str(table)])["checked"]
    assert got[0]["fit"] == pytest.approx(2**1.75) and got[0]["sd"] == pytest.approx(sd) and got[0]["z"] == pytest.approx(1.0)
    assert got[1]["z"] is None and got[2]["z"] > 0  # a short run sits above the law (the floor)
    below = (math.log2(0.2) - 1.75) / sd  # the bound's distance from the law: the crossing lies further down
    assert got[1]["bound"] == ("<", pytest.approx(below)) and got[1]["measured"] == pytest.approx(0.2)
    assert got[0]["bound"] is None
    assert (got[0]["params"], got[0]["tpp"]) == (2**14, pytest.approx(2**8)) and (tmp_path / "fit.png").stat().st_size > 0
    assert got[0]["table"] == "new"  # the star's label in the figure: the table's name less lr_transfer_
    out = capsys.readouterr().out
    assert f"| {2 ** (1.75 + sd):.2f} | 3.36 | {2 ** (1.75 - sd):.2f}-{2 ** (1.75 + sd):.2f} | " in out and "| +1.0 | 3, 3 |" in out
    assert f"| < {below:+.1f} | 3, 3 |" in out  # how far the bound sits, in sd, and on which side
    assert "| < 0.20 | 3.36 |" in out and "| 25 (below the fit's range) |" in out
    with pytest.raises(UserError, match="no lr_transfer table at"):
        crossing_fit.main(["--out", str(tmp_path / "fit"), "--check", str(tmp_path / "missing.csv")])


def test_seed_spread_takes_the_median_sd_at_each_grids_three_best_points_worked_by_hand(tmp_path, capsys, seed_spread):
    # AdamW's best three means are 1.0, 1.1, 1.2 (sds 0.01, 0.05, 0.02: median 0.02; the diverged point and the
    # 0.9-sd one at 1.5 do not count); AdamS's are 1.9, 1.95, 2.0 (sds 0.06, 0.01, 0.04: median 0.04, above 0.03)
    table = tmp_path / "lr_transfer_toy.csv"
    table.write_text("params,batch_tokens,steps\n")
    head = "params,batch_tokens,steps,betas,optimizer,lr,n,mean,std\n"
    grid = [("adamw", 1e-3, 3, 1.2, 0.02), ("adamw", 2e-3, 3, 1.0, 0.01), ("adamw", 4e-3, 4, 1.1, 0.05),
            ("adamw", 8e-3, 3, 1.5, 0.9), ("adamw", 1.6e-2, 3, math.inf, 0.0),
            ("adams", 1e-3, 3, 2.0, 0.04), ("adams", 2e-3, 2, 1.9, 0.06), ("adams", 4e-3, 3, 1.95, 0.01), ("adams", 8e-3, 3, 2.5, 0.001)]
    (tmp_path / "lr_transfer_toy_points.csv").write_text(
        head + "".join(f'1000,100,2000,"(0.9, 0.95)",{o},{lr},{n},{m},{s}\n' for o, lr, n, m, s in grid))
    (row,) = seed_spread.main([str(table)])
    assert row["adamw"] == pytest.approx(0.02) and row["adams"] == pytest.approx(0.04)
    assert (row["adamw_seeds"], row["adams_seeds"]) == (3, 2) and row["tpp"] == pytest.approx(200)
    assert "| toy | 1,000 | 100 | 200 | 0.020 | 0.040 * | 3, 2 |" in capsys.readouterr().out
    (tmp_path / "lr_transfer_toy_points.csv").unlink()
    with pytest.raises(UserError, match="lr_transfer_toy_points.csv does not exist"):
        seed_spread.main([str(table)])


def test_crossing_fit_raises_a_stars_number_off_another_star_and_its_number(crossing_fit):
    # the figure numbers each --check star: a number goes up past any marker or number it would cover
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 4), dpi=72)  # at 72 dpi a display pixel is a point
    ax.set(xlim=(0, 10), ylim=(0, 10))
    ax.set_position([0, 0, 1, 1])  # 288 points across both axes: 28.8 points a data unit
    rises = crossing_fit.label_rises(ax, [(5, 5), (5, 5), (1, 1)], ["1", "2", "3"], fontsize=8, offset=(5, 3), marker=13)
    plt.close(fig)
    assert rises[2] == 0  # alone, beside its own star
    # the first of the pair clears the other star (top 6.5 points above the point): 6.5 + 0.5 - 3 = 4;
    # the second clears that number (8 points tall from 7 up): 7 + 8 + 0.5 - 3 = 12.5
    assert rises[:2] == [pytest.approx(4), pytest.approx(12.5)]


def test_crossing_fit_keeps_a_listed_tables_text_and_takes_any_other_as_the_familys(monkeypatch, tmp_path, crossing_fit):
    # a 4-layer scan checked against the 2-layer law is labelled as 4 layers, not as the family's plain text
    monkeypatch.setattr(crossing_fit.lr_ratio, "SCANS", (("results/deep.csv", "depth", "bytes, 4 layers"),))
    (listed, _, text), (other, _, other_text) = crossing_fit.as_scans(
        [str(tmp_path / "results" / "deep.csv"), str(tmp_path / "seed1.csv")], root=tmp_path)
    assert (text, other_text) == ("bytes, 4 layers", crossing_fit.FAMILY["text"])
    assert listed == str((tmp_path / "results" / "deep.csv").resolve())


def crossing_row(lr_ratio, params, tpp, crossing, text="bytes", batch=2048, betas=(0.9, 0.95), kind="="):
    """A setting as lr_ratio.settings returns it, with only what crossing_fit reads."""
    return dict(params=params, batch_tokens=batch, steps=tpp * params / batch, text=text, betas=betas,
                carry=(kind, crossing, 0.0), seeds=(3, 3))


def test_crossing_fit_recovers_an_exact_power_law_and_solves_for_crossing_one(monkeypatch, capsys, tmp_path, crossing_fit):
    # log2 crossing = -9 + 0.5 log2 tpp + 0.3 log2 params at params 2^13, 2^15, 2^17 and tpp 2^7, 2^9, 2^11;
    # crossing 1 at log2 tpp = (9 - 0.3 m) / 0.5: 2^10.2 = 1,176, 2^9 = 512, 2^7.8 = 223, and 2^6 = 64 at 2^20
    law = lambda p, t: 2 ** (-9 + 0.5 * math.log2(t) + 0.3 * math.log2(p))  # noqa: E731
    lr_ratio = crossing_fit.lr_ratio
    rows = [crossing_row(lr_ratio, 2**m, 2**k, law(2**m, 2**k)) for m in (13, 15, 17) for k in (7, 9, 11)]
    # left out: a short run, a Llama, a bound, another batch, another beta2, a 0.82M model
    rows += [crossing_row(lr_ratio, 2**15, 25, 0.3), crossing_row(lr_ratio, 2**15, 512, 3.0, text="bytes, Llama"),
             crossing_row(lr_ratio, 2**15, 256, 0.2, kind="<"), crossing_row(lr_ratio, 2**15, 256, 0.2, batch=32768),
             crossing_row(lr_ratio, 2**15, 256, 0.2, betas=(0.9, 0.99)), crossing_row(lr_ratio, 820352, 120, 0.3)]
    monkeypatch.setattr(lr_ratio, "settings", lambda root, scans, rbar: rows)
    got = crossing_fit.main(["--out", str(tmp_path / "fit"), "--params", str(2**20)])
    assert got["fit"]["coef"] == pytest.approx([-9, 0.5, 0.3]) and got["fit"]["n"] == 9 and len(got["held"]) == 3
    assert crossing_fit.tpp_at_one(got["fit"], 2**13) == pytest.approx(2**10.2)
    for held in got["held"].values():  # the law is exact, so each width is predicted from the other two
        assert held["coef"] == pytest.approx([-9, 0.5, 0.3])
    out = capsys.readouterr().out
    assert "| 33K | 512 | 1.00 | 1.00 | 1.00 | 3, 3 |" in out and "| 8K | 128 | 0.33 | 0.33 | 0.33 | 3, 3 |" in out
    assert "| 33K | 128-512 | 512 (512-512) | 512 |" in out and "| 8K | 512-2,048 | 1,176 (1,176-1,176) | 1,176 |" in out
    assert "1M parameters: the fit puts crossing 1 at 64 tokens per parameter (64-64 at ± 1 sd; an extrapolation" in out
    assert "left out, the curves not crossing where both grids ran: 33K at 256 tokens per parameter (< 0.20)" in out
    assert out.count("\n| ") == 2 + 9 + 2 + 3 and (tmp_path / "fit.png").stat().st_size > 0
    with pytest.raises(UserError, match="--params"):
        crossing_fit.main(["--out", str(tmp_path / "fit"), "--params", "-1"])
    # --of ratio fits AdamS's best lr over AdamW's instead: here a quarter of the law everywhere (the bound row
    # has a ratio too), so the same slopes, a 2 lower, and ratio 1 at 2^(2 / 0.5) = 16x the run
    for s in rows:
        s["ratio"] = law(s["params"], lr_ratio.tokens_per_param(s)) / 4
    got = crossing_fit.main(["--out", str(tmp_path / "ratio"), "--of", "ratio"])
    assert got["fit"]["coef"] == pytest.approx([-11, 0.5, 0.3])
    assert crossing_fit.tpp_at_one(got["fit"], 2**15) == pytest.approx(512 * 16)
    out = capsys.readouterr().out
    assert "log2 ratio = -11.00" in out and "| 33K | beyond 2,048 | 8,192 (8,192-8,192) | 8,192 |" in out
    monkeypatch.setattr(lr_ratio, "settings", lambda root, scans, rbar: rows[:3])
    with pytest.raises(UserError, match="two or more model sizes"):
        crossing_fit.main(["--out", str(tmp_path / "fit")])


def parabola_scans(tmp_path):
    """lr_transfer tables of made-up runs, loss = log2(lr / best)^2 + c, under tmp_path/results, and R-bar 4 for
    AdamS at beta2 0.95: AdamW's best 4e-3 (c = 2.0 + 0.02 seed), AdamS's 1e-3 at beta2 0.95 (c = 2.1 + 0.01 seed)
    and 5e-4 at 0.99, two seeds each. Returns lr_ratio's (scans, rbar)."""
    runs = []
    for opt, beta2, best, c in (("adamw", 0.95, 4e-3, 2.0), ("adams", 0.95, 1e-3, 2.1), ("adams", 0.99, 5e-4, 2.1)):
        for lr in (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3):
            for seed in (1, 2):
                loss = math.log2(lr / best) ** 2 + c + (0.02 if opt == "adamw" else 0.01) * seed
                runs.append(fake_run(tmp_path / "runs" / f"{opt}_{beta2}_{lr}_{seed}", opt, lr, loss, seed=seed,
                                     beta1=0.9, beta2=beta2))
    lr_transfer.main([*map(str, runs), "--out", str(tmp_path / "results/t")])
    (tmp_path / "study/results/analysis").mkdir(parents=True)
    scans = (("results/t.csv", "AdamS's β2", "bytes"), ("results/t.csv", "again", "bytes"))  # the second: all seen
    # R-bar along the AdamW run for beta2 0.95 only: the body's geometric mean over checkpoints (2 and 8 -> 4),
    # not the whole model's row, and not another run's
    write_noise_csv(tmp_path / "study/results/analysis/noise.csv", [("body", 2.0), ("all", 100.0), ("body", 8.0)], run="w")
    write_noise_csv(tmp_path / "study/results/analysis/noise_other.csv", [("body", 50.0)], run="other")
    rbar = (((1000, 2048, 10, (0.9, 0.95)), "study/results/analysis/noise.csv", "w"),)
    return scans, rbar
