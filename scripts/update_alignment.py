"""Figure 2 of the AdamS paper: along an AdamW run, how well AdamS's and Adam-mini's updates align with AdamW's.

    python -m scripts.update_alignment                  # --recipe cpu: a 0.82M GPT on the embedded corpus, CPU minutes
    python -m scripts.update_alignment --recipe paper   # GPT-2 Small on OpenWebText as the paper trained it (GPU)
    python -m scripts.update_alignment --recipe paper --steps 2000   # its first 2,000 iterations

``--recipe paper`` is Section 4.1's AdamW run of GPT-2 Small as the authors' code ran it: 12 x 768,
context 1024, no biases, 480 sequences (491,520 tokens) per iteration as 40 micro-batches of 12,
lr 6e-4 with 2,000 warmup iterations and a cosine to 6e-5 over 600K iterations, β (0.9, 0.95), weight
decay 0.1 on matrices and embeddings only (nanoGPT's groups, adams_optim.groups), gradients clipped to
norm 1.0, 100K iterations, bf16 autocast on CUDA; the updates are compared every 1,000 iterations
(the paper's evaluation cadence; it does not state the figure's). What still differs from the paper's
run: bf16 autocast where the paper trained in fp16 with loss scaling, no torch.compile, batches drawn
here from a seeded generator rather than train.py's streams, and the compared updates computed in
float64 from float32 state. ``--recipe cpu`` (the default) is the CPU-scale reproduction's: 4 x 128,
context 128, 16 sequences, constant lr 3e-3, 300 iterations, every 10, no clipping, every tensor
decayed. Any option given on the command line overrides the recipe's value.

A GPT trains with ``torch.optim.AdamW``. At every step the script also keeps, from the very same
gradients, the statistics AdamS and Adam-mini would hold (the momentum is shared: all three keep
m = β1·m + (1−β1)·g), and computes for every parameter tensor the cosine similarity between the
update AdamW makes and the update each of the others would make (weight decay left out: it is the
same term for all three). Writes a CSV and two heatmaps (tensor × iteration), like the paper's.
It also records how much longer or shorter each update is than AdamW's (the ratio of their norms):
by the paper's Section 2.3, AdamS's denominator averages ~√10 below AdamW's where gradient noise
dominates, so its steps are longer; this is how much longer along a real run.
The AdamW update computed here is checked against the parameter change torch's AdamW actually made.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from adams_optim.adam_mini import block_mean, expand_blocks, partition
from adams_optim.groups import param_groups

import cli
import configurator
from errors import UserError
from model import GPT, GPTConfig
from scripts import out_file, save_figure, write_csv
from tokens import read_tokens

REPO = Path(__file__).resolve().parents[1]


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return F.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0).item()


SUMMARIES = {  # CSV column: (how it is summarised over tensors and steps, what it holds)
    "cos_adams": (np.mean, "cosine with AdamW's update"),
    "cos_adam_mini": (np.mean, "cosine with AdamW's update"),
    "norm_adams": (np.median, "length relative to AdamW's update"),  # brief spikes to ~100 would swamp a mean
    "norm_adam_mini": (np.median, "length relative to AdamW's update"),
}


def norm_ratio(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double().norm() / b.double().norm()).item()


# Each recipe's settings; the command line overrides any of them.
RECIPES = {
    "cpu": dict(dataset="pystdlib", n_layer=4, n_head=4, n_embd=128, block_size=128, batch_size=16, accum=1, steps=300,
                every=10, lr=3e-3, warmup=0, decay_iters=0, min_lr=3e-3, device="cpu", dtype="float32", grad_clip=0.0,
                groups="all"),
    "paper": dict(dataset="openwebtext", n_layer=12, n_head=12, n_embd=768, block_size=1024, batch_size=12, accum=40,
                  steps=100_000, every=1000, lr=6e-4, warmup=2000, decay_iters=600_000, min_lr=6e-5, device="cuda",
                  dtype="bfloat16", grad_clip=1.0, groups="nanogpt"),
}


def get_lr(step: int, lr: float, warmup: int, decay_iters: int, min_lr: float) -> float:
    """train.py's schedule (linear warmup, cosine to min_lr at decay_iters) for 1-based ``step``;
    constant ``lr`` when decay_iters is 0."""
    it = step - 1
    if decay_iters == 0:
        return lr
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    progress = min(1.0, (it - warmup) / max(1, decay_iters - warmup))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def parse_args(argv=None) -> argparse.Namespace:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", choices=RECIPES, default="cpu", help="the settings marked (recipe), as a set")
    parser.add_argument("--dataset", type=cli.text())
    parser.add_argument("--data_dir", type=cli.folder, default=REPO / "data")
    parser.add_argument("--n_layer", type=cli.integer(1, 1024))
    parser.add_argument("--n_head", type=cli.integer(1, 1024))
    parser.add_argument("--n_embd", type=cli.integer(1, 1 << 16))
    parser.add_argument("--block_size", type=cli.integer(1, 1 << 20))
    parser.add_argument("--batch_size", type=cli.integer(1, 1 << 16), help="sequences per micro-batch")
    parser.add_argument("--accum", type=cli.integer(1, 1 << 16), help="micro-batches per iteration (gradient accumulation)")
    parser.add_argument("--steps", type=cli.integer(1, 10**9))
    parser.add_argument("--every", type=cli.integer(1, 10**9), help="compare the updates every this many steps")
    parser.add_argument("--lr", type=cli.nonnegative, help="peak learning rate")
    parser.add_argument("--warmup", type=cli.natural, help="linear warmup iterations")
    parser.add_argument("--decay_iters", type=cli.natural, help="cosine to min_lr over this many iterations; 0: constant lr")
    parser.add_argument("--min_lr", type=cli.nonnegative)
    parser.add_argument("--beta1", type=cli.beta, default=0.9)
    parser.add_argument("--beta2", type=cli.beta, default=0.95)
    parser.add_argument("--eps", type=cli.nonnegative, default=1e-8)
    parser.add_argument("--weight_decay", type=cli.nonnegative, default=0.1)
    parser.add_argument("--groups", choices=("nanogpt", "all"),
                        help="which tensors decay: nanoGPT's (matrices and embeddings) or all of them")
    parser.add_argument("--grad_clip", type=cli.nonnegative, help="clip the gradient to this norm before the step; 0: off")
    parser.add_argument("--device", type=configurator.kinds()["device"][1])
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), help="autocast dtype of the forward pass")
    parser.add_argument("--seed", type=cli.seed, default=0)
    parser.add_argument("--out", type=cli.place, default=Path("out/update_alignment"), help="file prefix: OUT.csv, OUT.png")
    parser.show_sets(RECIPES, "recipe")
    args = parser.parse_args(argv)
    for key, value in RECIPES[args.recipe].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "accum", "steps", "every"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be at least 1, got {getattr(args, key)}")
    return args


def main(argv=None):
    args = parse_args(argv)

    folder = args.data_dir / args.dataset
    if args.dataset == "pystdlib" and not (folder / "train.bin").exists():
        from data.pystdlib.prepare import prepare

        prepare(folder)
    try:
        tokens, vocab = read_tokens(folder / "train.bin")
    except UserError as e:
        raise UserError(f"{e}") from None
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {args.device} but no CUDA GPU is visible; pass --device cpu (slow at GPT-2 Small)")
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if args.dtype == "bfloat16"
                else contextlib.nullcontext())
    model = GPT(GPTConfig(block_size=args.block_size, vocab_size=vocab if vocab <= 256 else 64 * math.ceil(vocab / 64),
                          n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, bias=False)).to(device)
    named = [(n, p) for n, p in model.named_parameters()]
    blocks = dict(zip([n for n, _ in named], partition(named, n_head=args.n_head)))
    groups = (param_groups(model, args.weight_decay) if args.groups == "nanogpt"
              else [{"params": list(model.parameters()), "weight_decay": args.weight_decay}])
    decay = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)
    b1, b2, eps = args.beta1, args.beta2, args.eps
    m = {n: torch.zeros_like(p) for n, p in named}  # the momentum all three share
    v = {n: torch.zeros_like(p) for n, p in named}  # AdamW's second moment
    v_mini = {n: torch.zeros(blocks[n].n_blocks if blocks[n].rule != "adam" else p.shape, device=device) for n, p in named}
    rng = np.random.default_rng(args.seed)
    rows, worst_check = [], 0.0
    for step in cli.progress(range(1, args.steps + 1), "AdamW run, steps"):
        lr = get_lr(step, args.lr, args.warmup, args.decay_iters, args.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        for _ in range(args.accum):
            starts = rng.integers(0, len(tokens) - args.block_size, size=args.batch_size)
            windows = torch.from_numpy(np.stack([tokens[s:s + args.block_size + 1] for s in starts]).astype(np.int64)).to(device)
            with autocast:
                _, loss = model(windows[:, :-1], windows[:, 1:])
            (loss / args.accum).backward()
        if args.grad_clip > 0:  # as train.py: the statistics below see the clipped gradient, as the optimizer does
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        compare = step % args.every == 0 or step == 1
        before = {n: p.detach().clone() for n, p in named} if compare else None
        with torch.no_grad():
            bc1, bc2 = 1 - b1**step, 1 - b2**step
            for n, p in named:
                g = p.grad
                m_prev = m[n].clone()
                m[n].lerp_(g, 1 - b1)
                v[n].mul_(b2).addcmul_(g, g, value=1 - b2)
                block = blocks[n]
                g2 = g * g if block.rule == "adam" else block_mean(g * g, block)
                v_mini[n].mul_(b2).add_(g2, alpha=1 - b2)
                if not compare:
                    continue
                m_hat = m[n] / bc1
                adamw = m_hat / ((v[n] / bc2).sqrt() + eps)
                # AdamS with the authors' bias correction: v = β2·(m_prev/bc)² + (1 − β2)·g²
                adams = m_hat / ((b2 * (m_prev / bc1) ** 2 + (1 - b2) * g * g).sqrt() + eps)
                denom = (v_mini[n] / bc2).sqrt() + eps
                mini = m_hat / (denom if block.rule == "adam" else expand_blocks(denom, block, p.dim()))
                rows.append(dict(step=step, param=n, cos_adams=cosine(adamw, adams), cos_adam_mini=cosine(adamw, mini),
                                 norm_adams=norm_ratio(adams, adamw), norm_adam_mini=norm_ratio(mini, adamw),
                                 _adamw=adamw))
        optimizer.step()
        if compare:
            with torch.no_grad():  # check our AdamW update against what torch's AdamW did
                for row in rows[-len(named):]:
                    p, was = dict(named)[row["param"]], before[row["param"]]
                    actual = was - was * lr * decay[id(p)] - p
                    # fp32 rounding of p is a few ulps of p (~1e-7 relative); a wrong formula is off by far more
                    tol = 1e-3 * lr + 1e-6 * was.abs().max().item()
                    worst_check = max(worst_check, (actual - lr * row.pop("_adamw")).abs().max().item() - tol)
    if worst_check > 0:
        raise UserError(f"the AdamW update computed here differs from torch's AdamW by {worst_check:.3g} beyond rounding")

    write_csv(out_file(args.out, ".csv"), rows, ["step", "param", *SUMMARIES])
    params = [n for n, _ in named]
    steps = sorted({r["step"] for r in rows})
    grids = {key: np.array([[next(r[key] for r in rows if r["step"] == s and r["param"] == n) for s in steps] for n in params])
             for key in SUMMARIES}
    thirds = np.array_split(np.arange(len(steps)), 3)
    for key, grid in grids.items():
        stat, what = SUMMARIES[key]
        parts = ", ".join(f"steps {steps[t[0]]}-{steps[t[-1]]}: {stat(grid[:, t]):.3f}" for t in thirds if len(t))
        print(f"{key}: {stat.__name__} {what} {stat(grid):.3f} (min {grid.min():.3f}, max {grid.max():.3f}); "
              f"by thirds of the run: {parts}")
    plot(grids, params, steps, out_file(args.out, ".png"))
    print(f"wrote {out_file(args.out, '.png')} and {out_file(args.out, '.csv')}")
    return grids


def plot(grids, params, steps, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 0.22 * len(params) + 2.5), sharey=True)
    for ax, (key, title) in zip(axes, (("cos_adams", "AdamS vs AdamW"), ("cos_adam_mini", "Adam-mini vs AdamW"))):
        image = ax.imshow(grids[key], aspect="auto", cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"{title}: mean cosine {grids[key].mean():.3f}")
        ticks = range(0, len(steps), max(1, len(steps) // 8))
        ax.set_xticks(list(ticks), [steps[i] for i in ticks])
        ax.set_xlabel("iteration")
    axes[0].set_yticks(range(len(params)), [p.replace("transformer.", "") for p in params], fontsize=6)
    fig.colorbar(image, ax=axes, shrink=0.8, label="cosine similarity of the update")
    save_figure(fig, path, dpi=130, bbox_inches="tight")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
