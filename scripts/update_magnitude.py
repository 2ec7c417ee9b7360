"""Figure 3 of the AdamS paper: how far AdamS moves a coordinate, given its gradient/momentum ratio.

    python -m scripts.update_magnitude                   # study/results/analysis/update_magnitude.{png,csv}

With momentum m and gradient g = r·m, one AdamS step (no bias correction, no decay, eps = 0) moves
a coordinate by lr times

    |β1 + (1 − β1)·r| / sqrt(β2 + (1 − β2)·r²)

which this script plots for β1 = 0.9, β2 ∈ {0.9, 0.95, 0.99, 0.999} and r ∈ [−13, 13], the range the
paper says covers most values in practice. It also marks the tight bound
sqrt(β1²/β2 + (1 − β1)²/(1 − β2)), attained at r = β2(1 − β1) / (β1(1 − β2)): inside the plotted
range for β2 ≤ 0.99, but at r ≈ 111 for β2 = 0.999. The values come
from running the real optimizer (``adams_optim.AdamS``) on one tensor, not from the formula.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from adams_optim import AdamS

import cli
from scripts import out_file, save_figure, write_csv


def step_sizes(ratios: torch.Tensor, beta1: float, beta2: float) -> torch.Tensor:
    """|Δp| / lr of one AdamS step from momentum 1 and gradient r, for every r at once."""
    p = torch.nn.Parameter(torch.zeros_like(ratios, dtype=torch.float64))
    p.grad = ratios.double().clone()
    opt = AdamS([p], lr=1.0, betas=(beta1, beta2), eps=0.0, weight_decay=0.0, bias_correction=False)
    opt.state[p] = {"step": 100, "exp_avg": torch.ones_like(p)}
    opt.step()
    return p.detach().abs()


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beta1", type=cli.beta, default=0.9)
    parser.add_argument("--beta2", type=cli.number(0.0, 1.0, low_open=True, says="a number in (0, 1)"), nargs="+", default=[0.9, 0.95, 0.99, 0.999])
    parser.add_argument("--points", type=cli.integer(2, 10**7), default=2601)
    parser.add_argument("--out", type=cli.place, default=Path("out/update_magnitude"), help="file stem: OUT.csv and OUT.png")
    args = parser.parse_args(argv)

    ratios = torch.linspace(-13, 13, args.points, dtype=torch.float64)
    curves = {b2: step_sizes(ratios, args.beta1, b2) for b2 in args.beta2}
    write_csv(out_file(args.out, ".csv"), [["ratio"] + [f"beta2={b2}" for b2 in args.beta2]]
              + [[r] + [curves[b2][i].item() for b2 in args.beta2] for i, r in enumerate(ratios.tolist())])

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for b2, curve in curves.items():
        bound = math.sqrt(args.beta1**2 / b2 + (1 - args.beta1) ** 2 / (1 - b2))
        line, = ax.plot(ratios, curve, label=f"β2 = {b2} (bound {bound:.2f})")
        ax.axhline(bound, color=line.get_color(), lw=0.6, ls=":")
        print(f"beta2={b2}: step/lr in [{curve.min():.3f}, {curve.max():.3f}]; tight bound {bound:.3f}")
    ax.set_xlabel("gradient / momentum")
    ax.set_ylabel("|update| / lr")
    ax.set_title(f"AdamS update magnitude, β1 = {args.beta1}")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, out_file(args.out, ".png"), dpi=130)
    print(f"wrote {out_file(args.out, '.png')} and .csv")
    return ratios, curves


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
