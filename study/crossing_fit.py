"""At what run length does AdamW's lr carry over to AdamS? A fit over the small models' lr scans.

    python -m study.crossing_fit                   # -> analysis/crossing_fit.png and the tables in study/README.md
    python -m study.crossing_fit --params 2e6      # also: the fit's run length for a model of that size
    python -m study.crossing_fit --tables study/results/analysis/crossing_seeds/seed1.csv   # one seed's crossings
    python -m study.crossing_fit --of ratio --out study/results/analysis/ratio_fit   # AdamS's best lr ÷ AdamW's instead
    python -m study.crossing_fit --check study/results/lr_transfer/lr_transfer_law_0.8m.csv --out study/results/analysis/law_check   # a setting outside the fit

The crossing (lr_ratio.py) is the highest lr at which AdamS ended at or below AdamW at the same lr,
over AdamW's fitted best lr: below it the paper's "same hyperparameters" cost AdamS nothing, and at
1 they hold at AdamW's own optimum. On the 2-layer GPTs of width 16-128 (10K-427K parameters, bytes,
2,048 tokens per step, β = (0.9, 0.95)) it rose with run length and with width. This fits, by least
squares in base-2 logs, over every such setting at MIN_TPP tokens per parameter or more whose two
curves cross,

    log2 crossing = a + b·log2(tokens per parameter) + c·log2(parameters)

and prints the fit with its standard errors and residual spread, each setting's residual, and a
leave-one-width-out check: the fit from the other widths predicting the held-out width's crossings,
the first of them an extrapolation below the fitted sizes and the last one above. Solving crossing = 1
gives the run length at which AdamW's lr reaches AdamW's optimum,

    tokens per parameter* = 2 ** (-(a + c·log2(parameters)) / b).

Below MIN_TPP the crossing stopped falling (0.18-0.46× of AdamW's best from 0.2 to 25 tokens per
parameter on every model; study/report/every_scan.md, "How far AdamW's lr carries over"), so the fit is not
meant for short runs, nor, beyond the widths it saw, for other sizes: --params prints its answer for
any size, marked as an extrapolation outside 10K-427K.

--of ratio fits AdamS's best lr over AdamW's (lr_ratio's parabola-fit ratio; 1 is the paper's "same
lr") the same way, over the same settings.

--check reads other lr_transfer tables (a deeper model, another width: settings the fit did not see)
and prints, for each setting in them, the measured value beside the fit's prediction with its ± 1
and ± 2 sd bands for a new setting, and how many sd the measurement sits from it; the figure shows each
as a red star on those bands, labelled by size and table name (give it its own --out to keep the fit's
figure as it is).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import cli
from errors import UserError
from scripts import out_file, save_figure
from study import lr_ratio

ROOT = Path(__file__).resolve().parents[1]

MIN_TPP = 90  # tokens per parameter: the runs sized for 100 (99.5-100.2) and longer
# what is fitted: its name in the output, each setting's value, what reaching 1 means, the figure's y label, title
# and note on the line at 1
QUANTITIES = {
    "crossing": ("crossing", lr_ratio.crossing, "AdamW's optimum (crossing 1)",
                 "AdamW's lr carries over up to (÷ AdamW's best lr)",
                 "where AdamS at AdamW's lr stops being level or ahead, against run length",
                 "1: AdamW's lr carries over up to AdamW's own optimum"),
    "ratio": ("ratio", lambda s: s["ratio"], "1 (AdamS's best lr at AdamW's, the paper's same lr)", "AdamS's best lr ÷ AdamW's best lr",
              "AdamS's best lr over AdamW's (parabola fits), against run length", "1: the paper's same lr"),
}
# the 2-layer models: another architecture or depth carries its own text in lr_ratio.SCANS ("bytes, Llama",
# "bytes, 8 layers") and the 4-layer 0.82M model is above max_params, so none of them enters the fit
FAMILY = dict(text="bytes", batch_tokens=2048, betas=lr_ratio.REFERENCE_BETAS, max_params=5e5)


def as_scans(tables: list[str], root: Path = ROOT) -> tuple:
    """lr_transfer tables given on the command line, in lr_ratio.SCANS's form: a table listed there keeps its
    text ("bytes, 4 layers" names the 4-layer scans in the --check rows); any other is taken as the family's."""
    known = {(root / table).resolve(): text for table, _, text in lr_ratio.SCANS}
    paths = [Path(table).resolve() for table in tables]
    return tuple((str(path), path.stem, known.get(path, FAMILY["text"])) for path in paths)


def family(rows: list[dict]) -> list[dict]:
    """The small 2-layer models' settings at MIN_TPP tokens per parameter or more, crossing or not."""
    return [s for s in rows if s["text"] == FAMILY["text"] and s["batch_tokens"] == FAMILY["batch_tokens"]
            and s["betas"] == FAMILY["betas"] and s["params"] < FAMILY["max_params"]
            and lr_ratio.tokens_per_param(s) >= MIN_TPP]


def design(tpp, params) -> np.ndarray:
    return np.column_stack([np.ones(len(tpp)), np.log2(tpp), np.log2(params)])


def fit(tpp, params, crossing) -> dict:
    """Least squares of log2 crossing on [1, log2 tokens per parameter, log2 parameters]: the coefficients
    (a, b, c), their covariance and standard errors, and the residual standard deviation in octaves (n - 3
    degrees of freedom)."""
    x, y = design(tpp, params), np.log2(crossing)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    dof = len(y) - x.shape[1]
    if dof < 1:
        raise UserError(f"{len(y)} settings cannot fit three coefficients with a spread; the fit needs four or more")
    resid = y - x @ coef
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.inv(x.T @ x)
    return dict(coef=coef, cov=cov, se=np.sqrt(np.diag(cov)), sd=math.sqrt(s2), n=len(y))


def predict(f: dict, tpp, params) -> np.ndarray:
    return 2 ** (design(np.atleast_1d(tpp), np.atleast_1d(params)) @ f["coef"])


def tpp_at_one(f: dict, params: float) -> float:
    """Tokens per parameter at which the fitted crossing reaches 1 (AdamW's own optimum); NaN if it does not rise."""
    a, b, c = f["coef"]
    return 2 ** (-(a + c * math.log2(params)) / b) if b > 0 else math.nan


def tpp_range(f: dict, params: float) -> tuple[float, float]:
    """tpp_at_one ± one prediction standard deviation: the spread of a new setting's log2 crossing there (the
    residual spread plus the coefficients' uncertainty, x·cov·x), turned into run length through the slope b."""
    t = tpp_at_one(f, params)
    sd = prediction_sd(f, t, params)
    return t * 2 ** (-sd / f["coef"][1]), t * 2 ** (sd / f["coef"][1])


def prediction_sd(f: dict, tpp: float, params: float) -> float:
    """The spread, in octaves, of a new setting's log2 value at (tpp, params): the residual spread plus the
    coefficients' uncertainty there, x·cov·x."""
    x = design([tpp], [params])[0]
    return math.sqrt(f["sd"] ** 2 + float(x @ f["cov"] @ x))


def check(f: dict, settings: list[dict], quantity: tuple) -> list[dict]:
    """Each setting's measured value against the fit: the prediction, its ± 1 and ± 2 sd bands, and the
    measurement's distance from it in sd; where the measurement is only a bound (the curves did not cross
    inside the shared lrs), z is None and ``bound`` holds its side and the bound's distance, (">", 8.6)."""
    name, value = quantity[:2]
    print(f"\n| setting | parameters | tokens per parameter | {name} measured | fit | ± 1 sd | ± 2 sd | measured − fit, in sd | seeds (AdamW, AdamS) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    out = []
    for s in settings:
        t, p, x = lr_ratio.tokens_per_param(s), float(s["params"]), value(s)
        mid, sd = float(predict(f, t, p)[0]), prediction_sd(f, t, p)
        z = math.log2(x / mid) / sd if math.isfinite(x) and x > 0 else None
        shown = f"{x:.2f}" if z is not None else f"{s['carry'][0]} {s['carry'][1]:.2f}" if s["carry"] else "no crossing"
        only_bound = z is None and s["carry"] and name == "crossing"  # the ratio has no bound to read
        bound = (s["carry"][0], math.log2(s["carry"][1] / mid) / sd) if only_bound else None
        distance = f"{z:+.1f}" if z is not None else f"{bound[0]} {bound[1]:+.1f}" if bound else "—"
        below = " (below the fit's range)" if t < MIN_TPP else ""
        print(f"| {lr_ratio.label(s)} | {lr_ratio.size(s['params'])} | {t:,.0f}{below} | {shown} | {mid:.2f} | "
              f"{mid * 2 ** -sd:.2f}-{mid * 2 ** sd:.2f} | {mid * 2 ** (-2 * sd):.2f}-{mid * 2 ** (2 * sd):.2f} | "
              f"{distance} | {s['seeds'][0]}, {s['seeds'][1]} |")
        out.append(dict(setting=lr_ratio.label(s), table=s["varied"].removeprefix("lr_transfer_"), params=p, tpp=t,
                        measured=x if z is not None else s["carry"][1] if bound else math.nan, fit=mid, sd=sd, z=z,
                        bound=bound))
    return out


def measured_bracket(runs: list[tuple[float, float]]) -> str:
    """Between which two run lengths (tokens per parameter, crossing), shortest first, the crossing first
    reached 1; and where a longer run fell below 1 again, which."""
    first = next((i for i, (_, x) in enumerate(runs) if x >= 1), None)
    if first is None:
        return f"beyond {runs[-1][0]:,.0f}"
    text = f"at or below {runs[0][0]:,.0f}" if first == 0 else f"{runs[first - 1][0]:,.0f}-{runs[first][0]:,.0f}"
    again = [t for t, x in runs[first + 1:] if x < 1]
    return text + (f" (below 1 again at {', '.join(f'{t:,.0f}' for t in again)})" if again else "")


def main(argv=None, root: Path = ROOT, scans=lr_ratio.SCANS, rbar=lr_ratio.RBAR) -> dict:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=cli.place, default=Path("out/crossing_fit"), help="the figure, as OUT.png")
    parser.add_argument("--params", type=cli.positive, action="append", default=[],
                        help="also print the fit's run length to crossing 1 for a model of this many parameters")
    parser.add_argument("--of", choices=QUANTITIES, default="crossing",
                        help="fit the crossing (default) or AdamS's best lr over AdamW's (ratio)")
    parser.add_argument("--tables", nargs="+", metavar="CSV",
                        help="lr_transfer tables of the small models' runs (each with its _points.csv), e.g. one seed's, "
                             "instead of the scans listed in lr_ratio.SCANS")
    parser.add_argument("--check", nargs="+", metavar="CSV", default=[],
                        help="lr_transfer tables of settings the fit did not see, each read against the fit's prediction")
    args = parser.parse_args(argv)
    if args.tables:
        scans = as_scans(args.tables, root)
    missing = [t for t in args.check if not Path(t).is_file()]
    if missing:
        raise UserError(f"--check: no lr_transfer table at {', '.join(missing)}; "
                         "write one with python -m study.lr_transfer RUNS... --out PREFIX")
    name, value, one, *_ = quantity = QUANTITIES[args.of]
    rows = sorted(family(lr_ratio.settings(root, scans, rbar)), key=lambda s: (s["params"], lr_ratio.tokens_per_param(s)))
    bounds = [s for s in rows if not math.isfinite(value(s))]  # the curves did not cross: a bound only
    rows = [s for s in rows if s not in bounds]
    widths = sorted({s["params"] for s in rows})
    if len(widths) < 2:
        raise UserError(f"the fit needs {name}s at two or more model sizes; run lr_transfer over the small models' scans")
    tpp = np.array([lr_ratio.tokens_per_param(s) for s in rows])
    params = np.array([float(s["params"]) for s in rows])
    crossing = np.array([value(s) for s in rows])
    f = fit(tpp, params, crossing)
    (a, b, c), (sa, sb, sc) = f["coef"], f["se"]
    print(f"log2 {name} = {a:.2f} (± {sa:.2f}) + {b:.3f} (± {sb:.3f}) · log2(tokens per parameter) "
          f"+ {c:.3f} (± {sc:.3f}) · log2(parameters)")
    print(f"over {f['n']} settings at {MIN_TPP}+ tokens per parameter on models of {lr_ratio.size(widths[0])}-"
          f"{lr_ratio.size(widths[-1])} parameters; residual spread {f['sd']:.2f} octaves (×{2 ** f['sd']:.2f})")
    for s in bounds:
        kind, at, _ = s["carry"] or ("none", math.nan, math.nan)
        print(f"left out, the curves not crossing where both grids ran: {lr_ratio.size(s['params'])} at "
              f"{lr_ratio.tokens_per_param(s):,.0f} tokens per parameter ({kind} {at:.2f})")
    print()

    held = {}  # each width's crossings predicted by the fit from the other widths
    for w in widths:
        mine = params == w
        if len({p for p in params[~mine]}) >= 2 and (~mine).sum() >= 4:
            held[w] = fit(tpp[~mine], params[~mine], crossing[~mine])
    print(f"| parameters | tokens per parameter | {name} | fit | fit without this width | seeds (AdamW, AdamS) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for s, t, p, x in zip(rows, tpp, params, crossing):
        out = f"{predict(held[p], t, p)[0]:.2f}" if p in held else "—"
        print(f"| {lr_ratio.size(s['params'])} | {t:,.0f} | {x:.2f} | {predict(f, t, p)[0]:.2f} | {out} | "
              f"{s['seeds'][0]}, {s['seeds'][1]} |")

    print(f"\nRun length at which the fitted {name} reaches {one}, in tokens per parameter:\n")
    print("| parameters | measured bracket | fit (± 1 sd of a new setting) | fit without this width |")
    print("| --- | --- | ---: | ---: |")
    for w in widths:
        bracket = measured_bracket(sorted((t, x) for t, p, x in zip(tpp, params, crossing) if p == w))
        out = f"{tpp_at_one(held[w], w):,.0f}" if w in held else "—"
        lo, hi = tpp_range(f, w)
        print(f"| {lr_ratio.size(w)} | {bracket} | {tpp_at_one(f, w):,.0f} ({lo:,.0f}-{hi:,.0f}) | {out} |")
    for p in args.params:
        inside = widths[0] <= p <= widths[-1]
        lo, hi = tpp_range(f, p)
        print(f"\n{lr_ratio.size(int(p))} parameters: the fit puts {name} 1 at {tpp_at_one(f, p):,.0f} tokens per parameter "
              f"({lo:,.0f}-{hi:,.0f} at ± 1 sd" + (")" if inside else f"; an extrapolation: the fit saw "
                                                    f"{lr_ratio.size(widths[0])}-{lr_ratio.size(widths[-1])}, 2 layers)"))
    checked = []
    if args.check:
        checked = check(f, lr_ratio.settings(root, as_scans(args.check, root), rbar), quantity)
    plot(rows, f, held, quantity, out_file(args.out, ".png"), checked)
    return dict(fit=f, held=held, rows=rows, checked=checked)


def label_rises(ax, points: list[tuple[float, float]], texts: list[str], fontsize: float = 8,
                offset: tuple[float, float] = (5, 3), marker: float = 13) -> list[float]:
    """How far (in points) to raise each label above its place at ``offset`` from its point so that it
    covers neither another label nor a marker (``marker`` points across): from the lowest point up, a
    label that would cover one goes just above it."""
    if not points:
        return []
    xy = ax.transData.transform(points) * 72 / ax.figure.dpi  # in points
    half = marker / 2
    boxes = [(x - half, x + half, y - half, y + half) for x, y in xy]  # (left, right, bottom, top)
    rises = [0.0] * len(points)
    for i in sorted(range(len(points)), key=lambda i: xy[i][1]):
        left = xy[i][0] + offset[0]
        right = left + 0.6 * fontsize * len(texts[i])  # a bold character is about 0.6 em wide
        bottom = xy[i][1] + offset[1]
        others = boxes[:i] + boxes[i + 1:]  # a label sits beside its own marker, so that one never counts
        while hit := [b for b in others if left < b[1] and b[0] < right and bottom < b[3] and b[2] < bottom + fontsize]:
            bottom = max(b[3] for b in hit) + 0.5
        boxes.append((left, right, bottom, bottom + fontsize))
        rises[i] = bottom - xy[i][1] - offset[1]
    return rises


def plot(rows: list[dict], f: dict, held: dict, quantity: tuple, path: Path, checked: list[dict] = ()) -> None:
    """The fitted settings with the law per width (solid) and per held-out width (dotted); each --check setting
    as a red star, with the law at its size and the ± 1 and ± 2 sd bands of a new setting shaded around it; a
    setting whose curves did not cross inside the shared lrs as a red triangle at its bound, pointing the way
    the crossing lies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    widths = sorted({s["params"] for s in rows})
    colors = dict(zip(widths, plt.cm.viridis(np.linspace(0, 0.85, len(widths)))))
    for w in widths:
        mine = [s for s in rows if s["params"] == w]
        x = [lr_ratio.tokens_per_param(s) for s in mine]
        span = np.geomspace(min(x) / 1.5, max(x) * 1.5, 30)  # the lines stay near the lengths each width ran
        ax.plot(x, [quantity[1](s) for s in mine], "o", color=colors[w], ms=7, label=f"{lr_ratio.size(w)} parameters")
        ax.plot(span, predict(f, span, np.full_like(span, w)), "-", color=colors[w], lw=1)
        if w in held:
            ax.plot(span, predict(held[w], span, np.full_like(span, w)), ":", color=colors[w], lw=1)
    label = "settings the fit did not see, against the law at their size ± 1 and 2 sd"
    bound_label = "a bound: the curves did not cross inside the lrs both ran (▲ above, ▼ below)"
    for c in checked:
        span = np.geomspace(c["tpp"] / 2, c["tpp"] * 2, 30)
        mid = predict(f, span, np.full_like(span, c["params"]))
        sd = np.array([prediction_sd(f, t, c["params"]) for t in span])
        for k, alpha in ((2, 0.08), (1, 0.16)):
            ax.fill_between(span, mid * 2 ** (-k * sd), mid * 2 ** (k * sd), color="tab:red", alpha=alpha, lw=0)
        ax.plot(span, mid, "--", color="tab:red", lw=1)
        if c["z"] is not None:
            ax.plot([c["tpp"]], [c["measured"]], "*", color="tab:red", ms=13, mec="black", mew=0.6, label=label)
            label = None  # one legend entry for all of them
        elif c["bound"]:
            ax.plot([c["tpp"]], [c["measured"]], "^" if c["bound"][0] == ">" else "v", color="tab:red", ms=9,
                    mec="black", mew=0.6, label=bound_label)
            bound_label = None
    ax.axhline(1, color="black", lw=1.2, ls="--")
    low = min([MIN_TPP] + [c["tpp"] for c in checked])
    ax.text(low / 1.5, 1.04, quantity[5], fontsize=8)
    ax.set(xscale="log", yscale="log", xlabel="tokens per parameter (tokens per step × steps ÷ parameters)",
           ylabel=quantity[3], title=f"{quantity[4]}\nsolid: the fit over all widths; dotted: the fit without that width")
    ax.set_xticks([t for t in (0.75, 1.5, 3, 6, 12.5, 25, 50, 100, 200, 400, 800, 1600, 3200) if t >= low / 1.6])
    bottom, top = ax.get_ylim()  # ticks inside the data's range only: one past it would stretch the axis
    ax.set_yticks([v for v in (0.03, 0.045, 0.06, 0.09, 0.125, 0.18, 0.25, 0.35, 0.5, 0.7, 1, 1.4, 2, 2.8, 4) if bottom <= v <= top])
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)  # below: inside, it hid points
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    # each star numbered, with a key beside the axes by size and table (two depths of one size read alike
    # by size alone): whole names crowd each other where several settings sit close
    stars = [c for c in checked if c["z"] is not None or c["bound"]]
    numbers = [str(k) for k in range(1, len(stars) + 1)]
    at = [(c["tpp"], c["measured"]) for c in stars]
    for number, xy, rise in zip(numbers, at, label_rises(ax, at, numbers)):
        ax.annotate(number, xy, xytext=(5, 3 + rise), textcoords="offset points", fontsize=8, color="tab:red",
                    fontweight="bold", arrowprops=dict(arrowstyle="-", lw=0.5, color="tab:red", shrinkA=0, shrinkB=5)
                    if rise else None)
    if stars:
        key = "\n".join(f"{n:>2}  {lr_ratio.size(c['params'])}, {c['table']}"
                        + (f" ({c['bound'][0]} {c['measured']:.2f})" if c["bound"] else "") for n, c in zip(numbers, stars))
        ax.text(1.02, 1, key, transform=ax.transAxes, va="top", fontsize=7.5, color="tab:red", family="monospace")
    save_figure(fig, path, dpi=130, bbox_inches="tight")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
