"""The paper's Figures 2 and 3 and Section 2.3's moments: the scripts that make them, at small scale on CPU."""

import math
from pathlib import Path

import pytest

from scripts import denominator_moments, update_alignment, update_magnitude

REPO = Path(__file__).resolve().parents[1]


def test_moments_closed_forms_match_the_papers_numbers():
    # the paper: at b1 = 0.9, b2 = 0.95, Var[S] = 0.0256 (2 s^4 + 4 m^2 s^2), Var[V] = 0.005 * 2 s^4 + 0.05 * 4 m^2 s^2
    for mu, sigma in ((0.0, 1.0), (2.0, 0.5)):
        f = denominator_moments.closed_forms(mu, sigma, 0.9, 0.95)
        assert f["Var[S]"] == pytest.approx(0.05 / 1.95 * (2 * sigma**4 + 4 * mu**2 * sigma**2))
        assert f["Var[V]"] == pytest.approx(0.005 * 2 * sigma**4 + 0.05 * 4 * mu**2 * sigma**2, rel=1e-3)
        assert f["E[S]"] == mu**2 + sigma**2


def test_moments_monte_carlo_agrees_with_closed_forms(tmp_path):
    rows = denominator_moments.main(["--chains", "40000", "--steps", "200", "--beta2", "0.9", "--out", str(tmp_path / "moments")])
    assert max(r["rel_error"] for r in rows) < 0.08  # sampling error at 40k chains
    assert (tmp_path / "moments.png").stat().st_size > 0 and (tmp_path / "moments.csv").exists()


def test_update_magnitude_matches_the_formula_and_the_bound(tmp_path):
    ratios, curves = update_magnitude.main(["--points", "261", "--out", str(tmp_path / "update_magnitude")])
    for b2, curve in curves.items():
        for r, step in zip(ratios.tolist()[::20], curve.tolist()[::20]):
            assert step == pytest.approx(abs(0.9 + 0.1 * r) / math.sqrt(b2 + (1 - b2) * r * r), rel=1e-9)
        assert curve.max().item() <= math.sqrt(0.81 / b2 + 0.01 / (1 - b2)) + 1e-12
    assert (tmp_path / "update_magnitude.png").exists()


def test_update_alignment_heatmaps(data_dir, tmp_path):
    out = tmp_path / "align"
    grids = update_alignment.main(["--dataset", "tiny", "--data_dir", str(data_dir), "--n_layer", "1", "--n_head", "2",
                                   "--n_embd", "32", "--block_size", "32", "--batch_size", "4", "--steps", "6",
                                   "--every", "3", "--out", str(out)])
    # (the script itself fails if its AdamW update differs from torch.optim.AdamW's actual step)
    # step 1: AdamW moves by g/(|g| + eps) and AdamS by g/(sqrt(1 - beta2)|g| + eps): the same
    # direction, up to eps, which weighs differently where a gradient is tiny
    assert grids["cos_adams"][:, 0] == pytest.approx(1.0, abs=1e-3)
    assert grids["cos_adams"][:, 0].mean() > grids["cos_adam_mini"][:, 0].mean()
    # ... and AdamS's step is 1/sqrt(1 - beta2) = sqrt(20) times AdamW's (up to eps)
    assert grids["norm_adams"][:, 0] == pytest.approx(20**0.5, rel=1e-2)
    for key in ("cos_adams", "cos_adam_mini"):
        grid = grids[key]
        assert grid.shape[1] == 3 and ((grid >= -1 - 1e-9) & (grid <= 1 + 1e-9)).all()
    assert (grids["norm_adam_mini"] > 0).all()
    assert out.with_suffix(".png").exists() and out.with_suffix(".csv").exists()


def test_update_alignment_trains_with_the_papers_groups_and_clipping(data_dir, tmp_path, capsys):
    # a clip far below the gradient's norm, so every step is clipped, and a decay large enough that decaying a
    # norm's weight (which nanoGPT's groups do not) would move it by far more than the check's tolerance
    def run(clip: str):
        return update_alignment.main(["--dataset", "tiny", "--data_dir", str(data_dir), "--n_layer", "1", "--n_head", "2",
                                      "--n_embd", "32", "--block_size", "32", "--batch_size", "4", "--steps", "4",
                                      "--every", "2", "--groups", "nanogpt", "--grad_clip", clip, "--weight_decay", "0.5",
                                      "--out", str(tmp_path / "a")])

    # (the script itself fails if its AdamW update, with each tensor's own decay, differs from torch's AdamW step)
    # step 1: g/(|g| + eps) against g/(sqrt(1 - beta2)|g| + eps), equal up to eps; clipped to a norm of 1e-4 the
    # gradients are small enough for eps to tell them apart, so the statistics saw the clipped gradient
    assert run("0")["cos_adams"][:, 0] == pytest.approx(1.0, abs=1e-3)
    grids = run("1e-4")
    assert grids["cos_adams"][:, 0].min() < 0.99
    assert (tmp_path / "a.csv").read_text().count("\n") == 1 + 3 * len(grids["cos_adams"])  # steps 1, 2 and 4


def test_update_alignment_paper_recipe_is_section_4_1_as_the_authors_ran_it():
    # typed from the paper (GPT-2 Small, lr 6e-4, 480 x 1,024 tokens, warmup 2,000, cosine to 0.1x) and the
    # authors' code (12 x 12 micro-batches x 40, bias=False, the cosine over 600K iterations), not from the script
    args = update_alignment.parse_args(["--recipe", "paper"])
    assert (args.n_layer, args.n_head, args.n_embd, args.block_size) == (12, 12, 768, 1024)
    assert args.batch_size * args.accum == 480 and (args.batch_size, args.accum) == (12, 40)
    assert (args.lr, args.warmup, args.decay_iters, args.min_lr) == (6e-4, 2000, 600_000, 6e-5)
    assert ((args.beta1, args.beta2), args.weight_decay, args.dataset, args.steps) == ((0.9, 0.95), 0.1, "openwebtext", 100_000)
    assert (args.grad_clip, args.groups) == (1.0, "nanogpt")  # the paper clips at 1.0; nanoGPT decays matrices only
    assert update_alignment.parse_args(["--recipe", "paper", "--steps", "50"]).steps == 50  # the command line wins
    # the schedule: linear warmup, then the cosine; constant with decay_iters 0 (worked by hand)
    assert update_alignment.get_lr(1, 6e-4, 2000, 600_000, 6e-5) == pytest.approx(6e-4 / 2001)
    assert update_alignment.get_lr(2001, 6e-4, 2000, 600_000, 6e-5) == pytest.approx(6e-4)
    assert update_alignment.get_lr(301_001, 6e-4, 2000, 600_000, 6e-5) == pytest.approx(3.3e-4)  # halfway: the mean
    assert update_alignment.get_lr(7, 3e-3, 0, 0, 3e-3) == 3e-3


def test_update_alignment_accumulates_micro_batches_as_one_step(data_dir, tmp_path):
    # two micro-batches a step, under a warmup: step 1 still aligns AdamS with AdamW and steps sqrt(20) longer
    grids = update_alignment.main(["--dataset", "tiny", "--data_dir", str(data_dir), "--n_layer", "1", "--n_head", "2",
                                   "--n_embd", "32", "--block_size", "32", "--batch_size", "2", "--accum", "2",
                                   "--steps", "4", "--every", "2", "--warmup", "2", "--decay_iters", "10",
                                   "--min_lr", "3e-4", "--out", str(tmp_path / "align")])
    assert grids["cos_adams"][:, 0] == pytest.approx(1.0, abs=1e-3)
    assert grids["norm_adams"][:, 0] == pytest.approx(20**0.5, rel=1e-2)
