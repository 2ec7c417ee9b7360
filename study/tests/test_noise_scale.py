"""study/noise_scale.py against closed forms, torch.optim.AdamW, and a real run's own steps."""

import csv
import json
import math

import pytest
import torch
from adams_optim import AdamS

import checkpoint
import dataset
import train
from errors import UserError
from study import noise_scale as ns
from tests.helpers import tiny_config


def samples_with_exact_moments(mu: torch.Tensor, sigma: torch.Tensor, k: int):
    """K gradients whose sample mean is exactly mu and sample variance exactly sigma^2 (k even):
    half mu + d, half mu - d, with d = sigma * sqrt((k - 1) / k)."""
    d = sigma * math.sqrt((k - 1) / k)
    for j in range(k):
        yield {"w": mu + d if j % 2 == 0 else mu - d}


def test_moments_and_noise_scale_are_exact_on_known_samples():
    mu = torch.tensor([0.5, -1.0, 0.0, 2.0], dtype=torch.float64)
    sigma = torch.tensor([1.0, 3.0, 2.0, 0.5], dtype=torch.float64)
    mean, var, k = ns.moments(samples_with_exact_moments(mu, sigma, 8))
    assert k == 8
    assert torch.allclose(mean["w"], mu) and torch.allclose(var["w"], sigma**2)
    stats = ns.noise_scale(mean["w"], var["w"], k, tokens=1024)
    trace, g2 = (sigma**2).sum().item(), (mu**2).sum().item() - (sigma**2).sum().item() / 8
    assert stats["trace_sigma"] == pytest.approx(trace)
    assert stats["grad_sq"] == pytest.approx(g2)  # |mean|^2 - tr/K: unbiased for |G|^2
    assert stats["b_simple_tokens"] == pytest.approx(1024 * trace / g2)


def test_noise_scale_recovers_b_simple_from_random_gradients():
    # per-micro-batch gradients N(mu, sigma^2), 256 tokens each: B_simple = 256 * sum(sigma^2) / sum(mu^2)
    gen = torch.Generator().manual_seed(0)
    mu = torch.randn(2000, generator=gen, dtype=torch.float64) * 0.1
    sigma = torch.rand(2000, generator=gen, dtype=torch.float64) + 0.5
    k = 400
    grads = ({"w": mu + sigma * torch.randn(2000, generator=gen, dtype=torch.float64)} for _ in range(k))
    mean, var, _ = ns.moments(grads)
    expected = 256 * (sigma**2).sum().item() / (mu**2).sum().item()
    assert ns.noise_scale(mean["w"], var["w"], k, 256)["b_simple_tokens"] == pytest.approx(expected, rel=0.1)


@pytest.mark.parametrize("beta1, beta2", [(0.9, 0.95), (0.9, 0.99), (0.95, 0.98)])
def test_predicted_ratio_is_the_closed_form(beta1, beta2):
    q, c = ns.denominator_constants(beta1, beta2)
    assert q == pytest.approx((1 - beta1) / (1 + beta1)) and c == pytest.approx(1 - 2 * beta1 * beta2 / (1 + beta1))
    # one population of coordinates with signal-to-noise ratio r: R^2 = (r^2 + 1) / (r^2 + c)
    for r in (0.0, 0.3, 1.0, 10.0):
        mu2, s2 = torch.full((50,), r * r), torch.ones(50)
        assert ns.ratio(ns.update_sq_sums(mu2, s2, beta1, beta2)) == pytest.approx(math.sqrt((r * r + 1) / (r * r + c)))
    if (beta1, beta2) == (0.9, 0.95):
        assert 1 / math.sqrt(c) == pytest.approx(math.sqrt(10), rel=1e-9)  # the paper's pure-noise case


def test_a_larger_batch_shrinks_the_noise_and_the_ratio():
    mean, var = torch.full((10,), 0.5, dtype=torch.float64), torch.ones(10, dtype=torch.float64)
    # K huge: mean^2 - var/K ~ mean^2; at 4x the batch the noise variance is 1/4
    mu2, s2 = ns.batch_noise_moments(mean, var, k=10**9, tokens=100, batch_tokens=400)
    assert torch.allclose(mu2, torch.full((10,), 0.25, dtype=torch.float64)) and torch.allclose(s2, var / 4)
    ratios = [ns.ratio(ns.update_sq_sums(*ns.batch_noise_moments(mean, var, 10**9, 100, b), 0.9, 0.95))
              for b in (100, 1_000, 10_000, 10**7)]
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] == pytest.approx(1.0, abs=1e-3)
    # coordinates with neither signal nor noise are left out rather than counted as 0/0
    assert ns.update_sq_sums(torch.zeros(3), torch.zeros(3), 0.9, 0.95) == (0.0, 0.0)


def test_drift_variance_inverts_adamws_stationary_moments():
    # a state whose moments are exactly E[m^2] = mu^2 + q tau^2 and E[v] = mu^2 + tau^2
    beta1, beta2, step = 0.9, 0.95, 10_000  # bias corrections ~1
    q, _ = ns.denominator_constants(beta1, beta2)
    mu2, tau2 = torch.tensor([0.25, 1.0, 0.0]), torch.tensor([1.0, 0.5, 2.0])
    m, v = (mu2 + q * tau2).sqrt(), mu2 + tau2
    sampling = torch.tensor([0.4, 0.5, 0.1])
    got_mu2, drift = ns.drift_variance(m, v, step, beta1, beta2, sampling)
    assert torch.allclose(got_mu2, mu2, atol=1e-6) and torch.allclose(drift, tau2 - sampling, atol=1e-6)


def test_typical_ratio_is_the_geometric_mean_over_checkpoints():
    rows = [dict(run="a/x", tensor=ns.ALL, measured_ratio=2.0), dict(run="a/x", tensor="wte", measured_ratio=100.0),
            dict(run="a/x", tensor=ns.ALL, measured_ratio=8.0), dict(run="b/y", tensor=ns.ALL, measured_ratio=math.nan)]
    assert ns.typical_ratio(rows) == {"a/x": (pytest.approx(4.0), 2)}  # sqrt(2 * 8); b/y measured nothing
    # where a run has a body row (all but the token embeddings), R̄ is the body's
    rows += [dict(run="a/x", tensor=ns.BODY, measured_ratio=3.0), dict(run="a/x", tensor=ns.BODY, measured_ratio=12.0)]
    assert ns.typical_ratio(rows) == {"a/x": (pytest.approx(6.0), 2)}
    assert ns.typical_ratio(rows, ns.ALL) == {"a/x": (pytest.approx(4.0), 2)}


@pytest.mark.parametrize("adams_beta2", [None, 0.5, 0.99])
def test_updates_match_torch_adamw_and_our_adams(adams_beta2):
    # AdamS at its own beta2 (AdamW's when None) from AdamW's momentum: the optimizer at that beta2
    gen = torch.Generator().manual_seed(1)
    p0, g_old, g = (torch.randn(64, generator=gen, dtype=torch.float64) for _ in range(3))
    beta1, beta2, eps = 0.9, 0.95, 1e-8
    b2s = beta2 if adams_beta2 is None else adams_beta2
    adamw = torch.optim.AdamW([p := p0.clone().requires_grad_()], lr=1.0, betas=(beta1, beta2), eps=eps, weight_decay=0)
    adams = AdamS([s := p0.clone().requires_grad_()], lr=1.0, betas=(beta1, b2s), eps=eps, weight_decay=0, foreach=False)
    for opt, param in ((adamw, p), (adams, s)):
        param.grad = g_old.clone()
        opt.step()
    state = adamw.state[p]
    m, v, step = state["exp_avg"].clone(), state["exp_avg_sq"].clone(), int(state["step"])
    assert torch.equal(m, adams.state[s]["exp_avg"])  # the same momentum
    before_w, before_s = p.detach().clone(), s.detach().clone()
    for opt, param in ((adamw, p), (adams, s)):
        param.grad = g.clone()
        opt.step()
    u_w, u_s = ns.adamw_and_adams_updates(g, m, v, step, beta1, beta2, eps, adams_beta2)
    assert torch.allclose(before_w - p.detach(), u_w, rtol=1e-12, atol=1e-14)
    assert torch.allclose(before_s - s.detach(), u_s, rtol=1e-12, atol=1e-14)


def test_on_a_real_run_the_measured_update_is_the_step_the_run_took(data_dir, tmp_path, capsys):
    # checkpoints at every iteration: the script's "next update" from checkpoint N must be exactly
    # the step from N to N+1 (same batch, accumulation, clipping), up to the lr and weight decay
    cfg = tiny_config(data_dir, tmp_path / "run", optimizer="adamw", max_iters=6, eval_interval=1, eval_iters=1,
                      keep_checkpoints=10, gradient_accumulation_steps=2, grad_clip=0.5)
    train.main(cfg)
    rows, ratio_rows = ns.main([str(cfg.out_dir), "--micro_batches", "4", "--batch_tokens", "256", "4096",
                                "--out", str(tmp_path / "noise")])
    overall = [r for r in rows if r["tensor"] == ns.ALL]
    assert [r["iter"] for r in overall] == [1, 2, 3, 4, 5, 6]
    for it in (1, 6):  # the body is every tensor but the token embedding, and its sums add up
        mine = {r["tensor"]: r for r in rows if r["iter"] == it}
        assert mine[ns.BODY]["numel"] == mine[ns.ALL]["numel"] - mine["transformer.wte.weight"]["numel"]
        for key in ("adamw_update_sq", "adams_update_sq"):
            assert mine[ns.BODY][key] + mine["transformer.wte.weight"][key] == pytest.approx(mine[ns.ALL][key])
        assert mine[ns.BODY]["measured_ratio"] == pytest.approx(
            math.sqrt(mine[ns.BODY]["adams_update_sq"] / mine[ns.BODY]["adamw_update_sq"]))
        # the tied embedding is one tensor, so its group row is that tensor's row
        for key in ("numel", "adamw_update_sq", "adams_update_sq", "measured_ratio", "b_simple_tokens"):
            assert mine[ns.EMBEDDING][key] == pytest.approx(mine["transformer.wte.weight"][key])
    assert all(r["measured_ratio"] > 0 and r["predicted_ratio"] >= 1 - 1e-9 for r in overall)
    # the summary suggests the embedding's lr multiple: body R̄ over the embedding's, both geometric means
    body, emb = ([r["measured_ratio"] for r in rows if r["tensor"] == group] for group in (ns.BODY, ns.EMBEDDING))
    scale = math.prod(body) ** (1 / len(body)) / math.prod(emb) ** (1 / len(emb))
    assert f"embedding_lr_scale R̄ / {math.prod(emb) ** (1 / len(emb)):.2f} = {scale:.2g}x the one AdamW uses" in capsys.readouterr().out
    assert {r["batch_tokens"] for r in ratio_rows} == {256, 4096, 2 * 8 * 32}  # the run's own batch is added
    for name in ("noise.csv", "noise_ratio.csv", "noise.png"):
        assert (tmp_path / name).stat().st_size > 0
    with open(tmp_path / "noise.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)

    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["clip_frac"] == 1.0 for r in steps if "clip_frac" in r)  # the clipping is part of what is checked
    paths = checkpoint.checkpoints(cfg.out_dir)
    for before, after in zip(paths[2:4], paths[3:5]):
        a, b = checkpoint.load_file(before), checkpoint.load_file(after)
        it = a["iter_num"]
        model = ns.load_checkpoint_model(a, torch.device("cpu"))
        tokens = dataset.load(cfg.data_dir, cfg.dataset, cfg.block_size)["train"]
        grad = ns.next_step_gradient(model, tokens, a["config"], it, 256, torch.device("cpu"))
        lr = train.get_lr(it, cfg)
        for name, g in grad.items():
            s = a["optimizer"]["state"][name]
            u_w, _ = ns.adamw_and_adams_updates(g, s["exp_avg"], s["exp_avg_sq"], int(s["step"]), 0.9, 0.95, 1e-8)
            decay = cfg.weight_decay if a["model"][name].dim() >= 2 else 0.0
            expected = a["model"][name] * (1 - lr * decay) - lr * u_w
            assert torch.allclose(b["model"][name], expected, atol=1e-6), name

    # AdamS at another beta2: AdamW's side is untouched, AdamS's step changes, and the rows say which beta2
    rows_b2, _ = ns.main([str(cfg.out_dir), "--micro_batches", "4", "--adams_beta2", "0.5",
                          "--out", str(tmp_path / "noise_b2")])
    assert {r["adams_beta2"] for r in rows_b2} == {0.5} and {r["adams_beta2"] for r in rows} == {0.95}
    for r, r_b2 in zip(rows, rows_b2):
        assert (r["iter"], r["tensor"]) == (r_b2["iter"], r_b2["tensor"])
        assert r_b2["adamw_update_sq"] == pytest.approx(r["adamw_update_sq"], rel=1e-12)
    assert any(r_b2["adams_update_sq"] != pytest.approx(r["adams_update_sq"]) for r, r_b2 in zip(rows, rows_b2))
    with pytest.raises(UserError):
        ns.main([str(cfg.out_dir), "--adams_beta2", "1.0"])
