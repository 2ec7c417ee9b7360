"""Section 2.3 of the AdamS paper: the mean and variance of AdamW's and AdamS's denominators.

    python -m scripts.denominator_moments                       # the table, the CSV and the plot
    python -m scripts.denominator_moments --chains 20000 --out /tmp/moments

With i.i.d. gradients X_t ~ N(mu, sigma^2), AdamW's second moment S_t = b2 S_{t-1} + (1 - b2) X_t^2
and AdamS's V_t = b M_{t-1}^2 + (1 - b) X_t^2 (M the momentum, coefficient b1) have stationary
moments in closed form (the paper's Section 2.3; re-derived here):

    E[S]   = mu^2 + sigma^2
    Var[S] = (2 sigma^4 + 4 mu^2 sigma^2) (1 - b2) / (1 + b2)
    E[V]   = mu^2 + sigma^2 (1 - 2 b b1 / (1 + b1))
    Var[V] = 2 sigma^4 [b^2 q^2 + (1 - b)^2] + 4 mu^2 sigma^2 [b^2 q + (1 - b)^2],  q = (1 - b1) / (1 + b1)

The script checks each against a Monte-Carlo simulation of many independent chains run to
stationarity, and prints both with the relative error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import cli
from scripts import out_file, save_figure, write_csv


def closed_forms(mu: float, sigma: float, b1: float, b2: float) -> dict[str, float]:
    q = (1 - b1) / (1 + b1)
    return {
        "E[S]": mu**2 + sigma**2,
        "Var[S]": (2 * sigma**4 + 4 * mu**2 * sigma**2) * (1 - b2) / (1 + b2),
        "E[V]": mu**2 + sigma**2 * (1 - 2 * b2 * b1 / (1 + b1)),
        "Var[V]": 2 * sigma**4 * (b2**2 * q**2 + (1 - b2) ** 2) + 4 * mu**2 * sigma**2 * (b2**2 * q + (1 - b2) ** 2),
    }


def monte_carlo(mu: float, sigma: float, b1: float, b2: float, chains: int, steps: int, seed: int) -> dict[str, float]:
    """Moments of S_T and V_T over ``chains`` independent chains after ``steps`` steps."""
    rng = np.random.default_rng(seed)
    s = np.zeros(chains)
    m = np.zeros(chains)
    v = np.zeros(chains)
    for _ in range(steps):
        x = rng.normal(mu, sigma, chains)
        s = b2 * s + (1 - b2) * x * x
        v = b2 * m * m + (1 - b2) * x * x  # uses the momentum before this step's update
        m = b1 * m + (1 - b1) * x
    return {"E[S]": s.mean(), "Var[S]": s.var(ddof=1), "E[V]": v.mean(), "Var[V]": v.var(ddof=1)}


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=cli.integer(1, 10**8), default=200_000, help="independent chains per setting")
    parser.add_argument("--steps", type=cli.integer(1, 10**6), default=400, help="steps per chain: enough for every EMA to forget its zero start (b2**steps ~ 0)")
    parser.add_argument("--beta1", type=cli.beta, default=0.9)
    parser.add_argument("--beta2", type=cli.beta, nargs="+", default=[0.9, 0.95, 0.98], help="one or more")
    parser.add_argument("--seed", type=cli.seed, default=0)
    parser.add_argument("--out", type=cli.place, default=Path("out/moments"), help="file stem: OUT.csv and OUT.png")
    args = parser.parse_args(argv)

    rows = []
    settings = [(mu, sigma, b2) for b2 in args.beta2 for mu, sigma in ((0.0, 1.0), (1.0, 1.0), (3.0, 1.0), (1.0, 3.0))]
    print(f"{'b2':>5} {'mu':>4} {'sigma':>5} | {'moment':7} {'closed form':>12} {'Monte Carlo':>12} {'rel. error':>10}")
    for mu, sigma, b2 in settings:
        exact = closed_forms(mu, sigma, args.beta1, b2)
        sim = monte_carlo(mu, sigma, args.beta1, b2, args.chains, args.steps, args.seed)
        for key in exact:
            rel = abs(sim[key] - exact[key]) / abs(exact[key])
            rows.append(dict(b1=args.beta1, b2=b2, mu=mu, sigma=sigma, moment=key, closed_form=exact[key],
                             monte_carlo=sim[key], rel_error=rel))
            print(f"{b2:5} {mu:4} {sigma:5} | {key:7} {exact[key]:12.5f} {sim[key]:12.5f} {rel:10.2%}")
    write_csv(out_file(args.out, ".csv"), rows)
    plot(rows, out_file(args.out, ".png"))
    print(f"max relative error {max(r['rel_error'] for r in rows):.2%}; wrote {out_file(args.out, '.csv')} and .png")
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    for ax, key in zip(axes, ("E[S]", "E[V]", "Var[S]", "Var[V]")):
        picked = [r for r in rows if r["moment"] == key]
        ax.scatter([r["closed_form"] for r in picked], [r["monte_carlo"] for r in picked], s=18)
        top = max(max(r["closed_form"], r["monte_carlo"]) for r in picked) * 1.05
        ax.plot([0, top], [0, top], color="gray", lw=0.8)
        ax.set_title(key)
        ax.set_xlabel("closed form")
        ax.set_ylabel("Monte Carlo")
    fig.suptitle("AdamW's (S) and AdamS's (V) denominators: closed forms vs simulation")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
