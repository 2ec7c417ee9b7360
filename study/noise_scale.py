"""Gradient noise along a run, and the AdamS/AdamW step-length ratio it predicts at any batch size.

    python -m study.noise_scale out/my_adamw_run                       # every checkpoint the run kept
    python -m study.noise_scale RUN_A RUN_B --batch_tokens 2048 32768 491520 --out study/results/analysis/noise

Point it at one or more train.py out_dirs (``--keep_checkpoints`` sets how many checkpoints a run
keeps; each one is a point along the run). At each checkpoint's weights:

1. **The noise scale.** K micro-batches of the run's own size (b tokens each, drawn from a
   random stream the run never trains on) give K gradients. Per coordinate i: their mean μ_i and
   the variance σ_i² of one micro-batch's gradient. McCandlish et al. (2018, "An Empirical Model
   of Large-Batch Training") define the simple noise scale B_simple = tr(Σ)/|G|²; here
   tr(Σ) = b·Σ_i σ_i² and |G|² = |mean|² − Σ_i σ_i²/K (unbiased), so B_simple is in tokens.
   Per parameter tensor and over the whole model.
2. **The predicted ratio.** Section 2.3 of the AdamS paper gives the stationary moments of the
   two denominators for i.i.d. gradients N(μ, s²). At a batch of B tokens a coordinate's noise is
   s² = σ²·b/B; with q = (1 − β1)/(1 + β1) and c = 1 − 2β1β2/(1 + β1):
       E[m²] = μ² + q·s²     E[S] = μ² + s² (AdamW)     E[V] = μ² + c·s² (AdamS)
   and the length of AdamS's update relative to AdamW's is predicted as
       R(B)² = Σ_i E[m_i²]/E[V_i]  /  Σ_i E[m_i²]/E[S_i].
   R → 1/√c (√10 ≈ 3.16 at β = (0.9, 0.95)) where noise dominates every coordinate, → 1 where
   the mean does. It depends on the data only through each coordinate's signal-to-noise ratio.
3. **The measured ratio** (AdamW runs only): from the checkpoint's AdamW state and the gradient
   of the run's very next batch (accumulated and clipped as the run does), the update AdamW made
   and the one AdamS would have made from the same momentum, as scripts/update_alignment.py
   computes them; their length ratio, per tensor, over the whole model ('all') and over every
   tensor but the token embedding and the output head ('body'), and over those two ('embedding').
   R̄, the ratio the lr rule divides by, is the body's: with GPT-2's 50K vocabulary the embedding
   holds most of a small model's weights and steps far less long under AdamS than the blocks do,
   while AdamS's best lr followed the blocks (study/report/vocabulary.md, "GPT-2's vocabulary").
   ``--adams_beta2 B`` gives AdamS another β2 than the run's in both ratios (AdamW's moments stay
   the run's, and the momentum, which depends on β1 only, is the same): the step-length ratio, and
   so the lr rule, for AdamS run at that β2.

Writes OUT.csv (one row per run, checkpoint and tensor, plus 'body', 'embedding' and 'all'; the
summed squares of both updates too, so any other group's ratio can be formed from it),
OUT_ratio.csv (predicted R at every --batch_tokens) and OUT.png, and prints a summary.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from adams_optim.groups import token_embeddings

import checkpoint
import cli
import configurator
import dataset
from architectures import architecture
from errors import UserError
from model import LanguageModel
from scripts import out_file, save_figure, write_csv

PROBE = 3  # the batch stream measured here: dataset.py's streams are 0-2, so no run trains on these

PAPER_BATCH = 491_520  # tokens per step in the paper's GPT-2 runs (480 x 1024)
ALL = "all"
BODY = "body"  # every tensor but the token embedding and the output head
EMBEDDING = "embedding"  # the token embedding and the output head (one tensor when tied)


# --- the estimators: pure functions of gradient samples -------------------------------------------


def moments(gradients) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], int]:
    """Per-coordinate mean and (unbiased) variance of K gradient samples, in float64.

    ``gradients`` yields dicts name -> tensor, one per micro-batch.
    """
    total, total_sq, k = {}, {}, 0
    for grads in gradients:
        for name, g in grads.items():
            g = g.detach().double()
            if name not in total:
                total[name], total_sq[name] = torch.zeros_like(g), torch.zeros_like(g)
            total[name] += g
            total_sq[name] += g * g
        k += 1
    if k < 2:
        raise ValueError(f"need at least 2 gradient samples for a variance, got {k}")
    mean = {n: t / k for n, t in total.items()}
    var = {n: ((total_sq[n] - k * mean[n] ** 2) / (k - 1)).clamp_min(0) for n in total}
    return mean, var, k


def noise_scale(mean: torch.Tensor, var: torch.Tensor, k: int, tokens: int) -> dict[str, float]:
    """McCandlish et al.'s B_simple in tokens, from K samples of ``tokens``-token micro-batches."""
    trace = var.sum().item()  # tr of one micro-batch gradient's covariance
    grad_sq = (mean.pow(2).sum() - var.sum() / k).item()  # |G|^2, unbiased
    b_simple = tokens * trace / grad_sq if grad_sq > 0 else math.inf
    return dict(trace_sigma=trace, grad_sq=grad_sq, b_simple_tokens=b_simple)


def denominator_constants(beta1: float, beta2: float) -> tuple[float, float]:
    """(q, c): Var[m] = q·s² and E[V] = μ² + c·s² for i.i.d. gradients of variance s² (Section 2.3)."""
    return (1 - beta1) / (1 + beta1), 1 - 2 * beta1 * beta2 / (1 + beta1)


def batch_noise_moments(mean: torch.Tensor, var: torch.Tensor, k: int, tokens: int,
                        batch_tokens: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(μ², s²) per coordinate at a batch of ``batch_tokens``: the gradient's mean squared
    (estimated without bias: mean² − σ²/K, floored at 0) and its sampling variance σ²·b/B."""
    return (mean.pow(2) - var / k).clamp_min(0), var * (tokens / batch_tokens)


def drift_variance(exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step: int, beta1: float, beta2: float,
                   sampling_var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(μ̄², δ²): the mean and the part of the gradient's step-to-step variance that is not
    sampling noise, from an AdamW state.

    Treating the recent gradients as i.i.d. with mean μ̄ and variance τ², AdamW's bias-corrected
    moments estimate E[v] = μ̄² + τ² and E[m²] = μ̄² + q·τ², so τ² = (v − m²)/(1 − q). Of τ², the
    sampling noise at the run's batch is ``sampling_var``; the rest, δ² (the gradient changing as
    the weights move), does not shrink with the batch.
    """
    q, _ = denominator_constants(beta1, beta2)
    m = exp_avg / (1 - beta1**step)
    v = exp_avg_sq / (1 - beta2**step)
    tau2 = ((v - m * m) / (1 - q)).clamp_min(0)
    return (v - tau2).clamp_min(0), (tau2 - sampling_var).clamp_min(0)


def update_sq_sums(mu2: torch.Tensor, s2: torch.Tensor, beta1: float, beta2: float) -> tuple[float, float]:
    """(Σ E[m²]/E[S], Σ E[m²]/E[V]): AdamW's and AdamS's predicted squared update lengths per
    unit learning rate, summed over coordinates whose gradients have mean² ``mu2`` and variance
    ``s2``. Coordinates with neither (embeddings of tokens never seen) are left out."""
    q, c = denominator_constants(beta1, beta2)
    keep = (mu2 + s2) > 0
    mu2, s2 = mu2[keep], s2[keep]
    m2 = mu2 + q * s2
    return (m2 / (mu2 + s2)).sum().item(), (m2 / (mu2 + c * s2)).sum().item()


def ratio(sums: tuple[float, float]) -> float:
    adamw, adams = sums
    return math.sqrt(adams / adamw) if adamw > 0 else math.nan


def adamw_and_adams_updates(grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step: int,
                            beta1: float, beta2: float, eps: float,
                            adams_beta2: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The update (per unit lr, without weight decay) AdamW makes at step ``step + 1`` from its
    state and ``grad``, and the one AdamS (with the authors' bias correction) would make from
    the same momentum: v = β2'·(m/bc)² + (1 − β2')·g², where β2' is ``adams_beta2`` (AdamW's
    β2 when None). The momentum depends on β1 only, so it is the same for any β2'."""
    b2s = beta2 if adams_beta2 is None else adams_beta2
    t = step + 1
    bc1, bc2 = 1 - beta1**t, 1 - beta2**t
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    adamw = (m / bc1) / ((v / bc2).sqrt() + eps)
    adams = (m / bc1) / ((b2s * (exp_avg / bc1) ** 2 + (1 - b2s) * grad * grad).sqrt() + eps)
    return adamw, adams


# --- reading a run -----------------------------------------------------------------------------------


def load_checkpoint_model(state: dict, device: torch.device) -> LanguageModel:
    model_cls, config_cls = architecture(state.get("model_type", "gpt2"))
    model = model_cls(config_cls(**state["model_args"]))
    checkpoint.load_model_weights(state, model)
    return model.to(device)


def micro_batch_gradients(model: LanguageModel, tokens, cfg: dict, stream: int, it: int, indices, vocab: int,
                          device: torch.device):
    """Yields the gradient of each micro-batch (the mean loss over its tokens), name -> tensor."""
    model.train()
    for index in indices:
        x, y = dataset.get_batch(tokens, cfg["seed"], stream, it, index, cfg["batch_size"], cfg["block_size"], vocab,
                                 device)
        model.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        yield {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def next_step_gradient(model: LanguageModel, tokens, cfg: dict, it: int, vocab: int, device: torch.device) -> dict:
    """The gradient the run used at iteration ``it``: its micro-batches averaged, then clipped."""
    total = None
    steps = cfg["gradient_accumulation_steps"]
    for grads in micro_batch_gradients(model, tokens, cfg, dataset.TRAIN, it, range(steps), vocab, device):
        grads = {n: g.detach().clone() / steps for n, g in grads.items()}
        total = grads if total is None else {n: total[n] + g for n, g in grads.items()}
    norm = torch.sqrt(sum(g.pow(2).sum() for g in total.values()))
    if cfg["grad_clip"] > 0 and norm > cfg["grad_clip"]:
        total = {n: g * (cfg["grad_clip"] / (norm + 1e-6)) for n, g in total.items()}  # as clip_grad_norm_ scales
    return total


def run_name(out_dir: Path) -> str:
    """How a run is named in the CSVs and the plot: its folder and the folder above (a sweep's runs
    share their own names across sweeps)."""
    return f"{out_dir.parent.name}/{out_dir.name}"


def measure(out_dir: Path, micro_batches: int, batch_tokens: list[int], device: torch.device,
            data_dir: str | None = None, adams_beta2: float | None = None) -> tuple[list[dict], list[dict]]:
    """Rows (per checkpoint and tensor) and ratio rows (per checkpoint and batch size) for one run."""
    paths = checkpoint.checkpoints(out_dir)
    if not paths:
        raise UserError(f"{out_dir} has no checkpoints; train it with train.py first (--keep_checkpoints=N keeps N)")
    rows, ratio_rows, data = [], [], None
    name = run_name(out_dir)
    from tqdm import tqdm

    for path in tqdm(paths, desc=name, leave=False):
        state = checkpoint.load_file(path)
        if "dcp_path" in state:
            raise UserError(f"{path} is a sharded (FSDP) checkpoint; this script reads single-file ones")
        cfg = state["config"]
        if data is None:
            data = dataset.load(data_dir or cfg["data_dir"], cfg["dataset"], cfg["block_size"])
        r, rr = measure_checkpoint(state, data["train"], micro_batches, batch_tokens, device, adams_beta2)
        rows += [dict(run=name, **row) for row in r]
        ratio_rows += [dict(run=name, **row) for row in rr]
    return rows, ratio_rows


def measure_checkpoint(state: dict, tokens, micro_batches: int, batch_tokens: list[int],
                       device: torch.device, adams_beta2: float | None = None) -> tuple[list[dict], list[dict]]:
    """``adams_beta2``: AdamS's β2 in the predicted and measured ratios (the run's own when None);
    AdamW's moments are always the run's."""
    cfg, it, vocab = state["config"], state["iter_num"], state["model_args"]["vocab_size"]
    b1, b2, eps = cfg["beta1"], cfg["beta2"], cfg["eps"]
    b2s = b2 if adams_beta2 is None else adams_beta2
    b = cfg["batch_size"] * cfg["block_size"]  # tokens per micro-batch
    run_batch = b * cfg["gradient_accumulation_steps"]
    model = load_checkpoint_model(state, device)
    mean, var, k = moments(micro_batch_gradients(model, tokens, cfg, PROBE, it, range(micro_batches), vocab,
                                                 device))
    updates, drift = {}, {}  # an AdamW run's real next update, and its gradient's drift
    if cfg["optimizer"] == "adamw":
        grad = next_step_gradient(model, tokens, cfg, it, vocab, device)
        for name, g in grad.items():
            s = state["optimizer"]["state"][name]
            m, v, step = s["exp_avg"].double().to(device), s["exp_avg_sq"].double().to(device), int(s["step"])
            updates[name] = adamw_and_adams_updates(g.double(), m, v, step, b1, b2, eps, b2s)
            drift[name] = drift_variance(m, v, step, b1, b2, var[name] * b / run_batch)
    names = list(mean)
    embeddings = token_embeddings(model)
    body = [n for n in names if n not in embeddings]

    def flat(source: dict, picked: list[str]) -> torch.Tensor:
        return torch.cat([source[n].flatten() for n in picked])

    def predictions(picked: list[str], batch: float) -> tuple[float, float]:
        """R(batch) from sampling noise alone, and from sampling noise plus the drift."""
        m, v = flat(mean, picked), flat(var, picked)
        alone = ratio(update_sq_sums(*batch_noise_moments(m, v, k, b, batch), b1, b2s))
        if not drift:
            return alone, math.nan
        mu2 = torch.cat([drift[n][0].flatten() for n in picked])
        d2 = torch.cat([drift[n][1].flatten() for n in picked])
        return alone, ratio(update_sq_sums(mu2, d2 + v * b / batch, b1, b2s))

    common = dict(iter=it, tokens_per_micro_batch=b, micro_batches=k, run_batch_tokens=run_batch, adams_beta2=b2s)
    update_sq = {n: (u_w.pow(2).sum().item(), u_s.pow(2).sum().item()) for n, (u_w, u_s) in updates.items()}
    rows = []
    split = {BODY: body, EMBEDDING: [n for n in names if n in embeddings]} if body and len(body) < len(names) else {}
    groups = {n: [n] for n in names} | split | {ALL: names}
    for name, picked in groups.items():
        m, v = flat(mean, picked), flat(var, picked)
        mu2, s2 = batch_noise_moments(m, v, k, b, run_batch)
        snr = (mu2 / s2)[v > 0].sqrt()
        alone, with_drift = predictions(picked, run_batch)
        row = dict(common, tensor=name, numel=m.numel(), **noise_scale(m, v, k, b),
                   snr_median=snr.median().item() if snr.numel() else math.nan, predicted_ratio=alone,
                   predicted_ratio_drift=with_drift, measured_ratio=math.nan, adamw_update_sq=math.nan,
                   adams_update_sq=math.nan)
        if updates:
            row["adamw_update_sq"] = sum(update_sq[n][0] for n in picked)
            row["adams_update_sq"] = sum(update_sq[n][1] for n in picked)
            row["measured_ratio"] = math.sqrt(row["adams_update_sq"] / row["adamw_update_sq"])
        rows.append(row)
    ratio_rows = []
    for batch in sorted({*batch_tokens, run_batch}):
        alone, with_drift = predictions(names, batch)
        ratio_rows.append(dict(common, batch_tokens=batch, b_over_b_simple=batch / rows[-1]["b_simple_tokens"],
                               predicted_ratio=alone, predicted_ratio_drift=with_drift))
    return rows, ratio_rows


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=cli.folder, help="train.py out_dirs with checkpoints")
    parser.add_argument("--micro_batches", type=cli.integer(2, 100_000), default=32, help="K: micro-batch gradients per checkpoint")
    parser.add_argument("--batch_tokens", type=cli.integer(1, 1 << 40), nargs="+",
                        default=[512, 2048, 8192, 32768, 131072, PAPER_BATCH, 2_097_152],
                        help="batch sizes (tokens) to predict the ratio at; each run's own is always added")
    parser.add_argument("--data_dir", type=cli.folder, help="read the data from here instead of the run's data_dir")
    parser.add_argument("--device", type=configurator.kinds()["device"][1], default="cpu")
    parser.add_argument("--adams_beta2", type=cli.beta,
                        help="AdamS's beta2 in the predicted and measured step ratios (default: the run's own, as "
                             "the paper shares it); the run's AdamW moments are used as they are")
    parser.add_argument("--seed", type=cli.seed, default=0, help="torch seed (dropout masks, if the run has dropout)")
    parser.add_argument("--out", type=cli.place, default=Path("out/noise_scale"))
    args = parser.parse_args(argv)
    if args.micro_batches < 2:
        parser.error("--micro_batches must be at least 2")
    if args.adams_beta2 is not None and not 0 <= args.adams_beta2 < 1:
        parser.error(f"--adams_beta2 must be in [0, 1), got {args.adams_beta2}")

    torch.manual_seed(args.seed)
    rows, ratio_rows = [], []
    for run in args.runs:
        r, rr = measure(run, args.micro_batches, args.batch_tokens, torch.device(args.device), args.data_dir,
                        args.adams_beta2)
        rows += r
        ratio_rows += rr
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out_file(args.out, ".csv"), rows)
    write_csv(args.out.with_name(args.out.name + "_ratio.csv"), ratio_rows)
    for row in (r for r in rows if r["tensor"] == ALL):
        measured = f", measured {row['measured_ratio']:.2f}" if not math.isnan(row["measured_ratio"]) else ""
        print(f"{row['run']} iter {row['iter']}: B_simple {row['b_simple_tokens']:,.0f} tokens "
              f"(batch {row['run_batch_tokens']:,} = {row['run_batch_tokens'] / row['b_simple_tokens']:.2f} B_simple); "
              f"AdamS/AdamW step length predicted {row['predicted_ratio']:.2f} from sampling noise, "
              f"{row['predicted_ratio_drift']:.2f} with drift{measured}")
    run_dirs = {run_name(run): run for run in args.runs}
    whole = typical_ratio(rows, ALL)
    embedding = typical_ratio([r for r in rows if r["tensor"] == EMBEDDING], EMBEDDING)
    for run, (ratio, n) in typical_ratio(rows).items():
        lr = checkpoint.load_file(checkpoint.checkpoints(run_dirs[run])[0])["config"]["learning_rate"]
        print(f"{run}: R̄ = {ratio:.2f}: AdamS's steps outside the token embeddings are {ratio:.2f}x AdamW's "
              f"(geometric mean over {n} checkpoints; {whole[run][0]:.2f}x over the whole model), so AdamS's peak lr "
              f"is about AdamW's best lr / {ratio:.2f} (from this run's lr {lr:g}: {lr / ratio:.2g}); scan x2 either "
              f"side, lower first (study/report/batch_and_noise.md, 'R̄ at both widths': this ratio barely moves with the run's lr)")
        if run in embedding:
            emb = embedding[run][0]
            verdict = ("within 10% of R̄, so at AdamW's lr / R̄ it keeps pace with the body" if abs(math.log(ratio / emb)) < math.log(1.1)
                       else f"so at AdamW's lr / R̄ AdamS {'under' if ratio > emb else 'over'}-trains it")
            print(f"{run}: the token embedding's own ratio is {emb:.2f}, {verdict}; "
                  f"give AdamS an embedding_lr_scale R̄ / {emb:.2f} = {ratio / emb:.2g}x the one AdamW uses "
                  f"(study/report/vocabulary.md, 'GPT-2's vocabulary')")
    plot(rows, ratio_rows, out_file(args.out, ".png"))
    print(f"wrote {out_file(args.out, '.csv')}, {args.out.name}_ratio.csv and {out_file(args.out, '.png')}")
    return rows, ratio_rows


def typical_ratio(rows: list[dict], group: str = BODY) -> dict[str, tuple[float, int]]:
    """Per run, R̄: the geometric mean over its checkpoints of the measured AdamS/AdamW step-length
    ratio of ``group`` (the body, or the whole model where a run has no separate body row), and how
    many checkpoints there were (runs without a measured ratio are left out). AdamW's best peak lr
    divided by the body's R̄ estimates AdamS's best peak lr (study/README.md)."""
    out = {}
    for run in dict.fromkeys(r["run"] for r in rows):
        mine = [r for r in rows if r["run"] == run]
        pick = group if any(r["tensor"] == group for r in mine) else ALL
        ratios = [r["measured_ratio"] for r in mine if r["tensor"] == pick and not math.isnan(r["measured_ratio"])]
        if ratios:
            out[run] = (math.exp(sum(map(math.log, ratios)) / len(ratios)), len(ratios))
    return out


def plot(rows: list[dict], ratio_rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(dict.fromkeys(r["run"] for r in rows))
    colors = {run: plt.get_cmap("tab10")(i % 10) for i, run in enumerate(runs)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6))
    for run in runs:
        overall = [r for r in rows if r["run"] == run and r["tensor"] == ALL]
        label = f"{run} (batch {overall[0]['run_batch_tokens']:,})"
        left.plot([r["iter"] for r in overall], [r["b_simple_tokens"] for r in overall], "o-", color=colors[run], label=label)
        iters = sorted({r["iter"] for r in ratio_rows if r["run"] == run})
        for j, it in enumerate(iters):
            curve = [r for r in ratio_rows if r["run"] == run and r["iter"] == it]
            alpha = 0.25 + 0.75 * (j + 1) / len(iters)
            right.plot([r["batch_tokens"] for r in curve], [r["predicted_ratio"] for r in curve], color=colors[run],
                       alpha=alpha, lw=1.2, label=label if j == len(iters) - 1 else None)
            if not math.isnan(curve[0]["predicted_ratio_drift"]):
                right.plot([r["batch_tokens"] for r in curve], [r["predicted_ratio_drift"] for r in curve], "--",
                           color=colors[run], alpha=alpha, lw=1.2)
        body = [r for r in rows if r["run"] == run and r["tensor"] == BODY] or overall
        measured = [r for r in body if not math.isnan(r["measured_ratio"])]
        if measured:
            right.scatter([r["run_batch_tokens"] for r in measured], [r["measured_ratio"] for r in measured],
                          color=colors[run], marker="x", s=40, zorder=3)
    left.set(xlabel="iteration", ylabel="B_simple (tokens)", yscale="log",
             title="gradient noise scale along the run\n(whole model)")
    left.legend(fontsize=7)
    right.axvline(PAPER_BATCH, color="gray", ls="--", lw=0.8)
    right.text(PAPER_BATCH, right.get_ylim()[1], " paper", color="gray", va="top", fontsize=8)
    right.axhline(1, color="gray", lw=0.6)
    right.set(xscale="log", xlabel="batch (tokens per step)", ylabel="AdamS step length / AdamW's",
              title="step-length ratio: predicted from sampling noise (solid),\n"
                    "+ the gradient's drift (dashed); measured outside the token embeddings (x)")
    right.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=130)


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
