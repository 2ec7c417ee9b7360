"""How much of a seed's final loss is its validation windows? One checkpoint, every seed's windows.

    python -m study.val_windows RUN_DIR_OR_CHECKPOINT [...] --seeds 1-20 --out study/results/analysis/val_windows

train.py scores a run on ``eval_iters`` batches of ``batch_size`` windows drawn from val.bin with the
run's own seed (``dataset.get_batch(val, seed, EVAL_VAL, 0, k)``), so runs of different seeds are
scored on different windows. A difference between two seeds' runs is then partly training (the
initial weights, the order of the batches) and partly which windows were scored. This script scores
one trained model on the windows each seed draws, and on all of val.bin (every non-overlapping
window), so the spread over seeds is the windows' share alone: the same weights, only the windows
differ. Comparisons within one seed (two optimizers, two learning rates) score the same windows and
are not affected; unpaired spreads over seeds are.

For each checkpoint it prints and writes (OUT.csv) the loss on each seed's windows and its offset
from the loss on all of val.bin, and plots the offsets (OUT.png), one line per checkpoint. Given
more than one checkpoint it also prints each one's loss minus the first one's, on all of val.bin and
on each seed's windows (mean ± std over the seeds): how far the windows move a paired comparison,
the kind that results/ draws between two runs of one seed.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import torch

import checkpoint
import cli
import dataset
from errors import UserError
from scripts import out_file, save_figure, write_csv
from study.noise_scale import load_checkpoint_model

ROOT = Path(__file__).resolve().parents[1]


def seed_list(text: str) -> list[int]:
    """'1-20' or '1,2,5' or '3'."""
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-"))
            return list(range(lo, hi + 1))
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"--seeds {text!r} is not a list of seeds; write e.g. 1-20 or 1,2,5") from None


def checkpoint_path(path: Path) -> Path:
    """A run folder means its newest checkpoint; a file is taken as it is."""
    if path.is_file():
        return path
    found = checkpoint.latest(path) if path.is_dir() else None
    if found is None:
        raise UserError(f"{path} is neither a checkpoint file nor a run folder with checkpoints; "
                         "pass a train.py out_dir that still has its checkpoints/ (or a .pt file in it)")
    return found


def run_label(path: Path) -> str:
    """A checkpoint as its sweep names it: optimizer folder / run folder (…/adamw/learning_rate=4e-3_seed=5)."""
    parents = path.resolve().parents
    return "/".join(p.name for p in parents[2:0:-1] if p.name) if len(parents) > 2 else path.name


@torch.no_grad()
def seed_loss(model, tokens: np.ndarray, seed: int, cfg: dict, vocab: int) -> float:
    """The validation loss train.py's evaluate() reports for a run of this seed: the mean over
    eval_iters batches of the run's validation stream."""
    total = 0.0
    for k in range(cfg["eval_iters"]):
        x, y = dataset.get_batch(tokens, seed, dataset.EVAL_VAL, 0, k, cfg["batch_size"], cfg["block_size"], vocab,
                                 torch.device("cpu"))
        total += model(x, y)[1].double().item()
    return total / cfg["eval_iters"]


@torch.no_grad()
def full_loss(model, tokens: np.ndarray, block: int, batch: int) -> float:
    """Mean per-token loss over every non-overlapping window of val.bin (the tail shorter than a window
    is left out), batch windows at a time."""
    n = (len(tokens) - 1) // block
    starts = np.arange(n) * block
    total, count = 0.0, 0
    for i in range(0, n, batch):
        w = np.stack([tokens[s : s + block + 1] for s in starts[i : i + batch]]).astype(np.int64)
        x, y = torch.from_numpy(w[:, :-1].copy()), torch.from_numpy(w[:, 1:].copy())
        total += model(x, y)[1].double().item() * y.numel()
        count += y.numel()
    return total / count


def measure(path: Path, seeds: list[int], data_dir: str | None = None) -> list[dict]:
    state = checkpoint.load_file(path)
    if "dcp_path" in state:
        raise UserError(f"{path} is a sharded (FSDP) checkpoint; this script reads single-file ones")
    cfg, vocab = state["config"], state["model_args"]["vocab_size"]
    tokens = dataset.load(data_dir or cfg["data_dir"], cfg["dataset"], cfg["block_size"])["val"]
    model = load_checkpoint_model(state, torch.device("cpu"))
    model.eval()
    whole = full_loss(model, tokens, cfg["block_size"], cfg["batch_size"])
    from tqdm import tqdm

    rows = []
    for seed in tqdm(seeds, desc=run_label(path), leave=False):
        loss = seed_loss(model, tokens, seed, cfg, vocab)
        rows.append(dict(checkpoint=str(path), run_seed=cfg["seed"], iter=state["iter_num"], seed=seed, val_loss=loss,
                         all_val_loss=whole, offset=loss - whole))
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = cli.Parser(description=__doc__)
    parser.add_argument("paths", nargs="+", type=cli.existing, help="train.py run folders (their newest checkpoint) or checkpoint files")
    parser.add_argument("--seeds", default="1-20", help="the seeds whose validation windows to score (default 1-20)")
    parser.add_argument("--data_dir", type=cli.folder, default=None, help="where the dataset is, if not where the run trained")
    parser.add_argument("--out", type=cli.place, default=Path("out/val_windows"), help="OUT.csv and OUT.png")
    args = parser.parse_args(argv)
    seeds = seed_list(args.seeds)
    if len(seeds) < 2:
        raise UserError("--seeds needs at least two seeds to spread over")
    rows = []
    for path in map(checkpoint_path, args.paths):
        here = measure(path, seeds, args.data_dir)
        rows += here
        offsets = [r["offset"] for r in here]
        print(f"{path} (iter {here[0]['iter']}, trained with seed {here[0]['run_seed']}): all of val.bin "
              f"{here[0]['all_val_loss']:.4f}; seeds' windows {statistics.mean(offsets):+.4f} ± "
              f"{statistics.stdev(offsets):.4f} from it ({min(offsets):+.4f} to {max(offsets):+.4f})")
        print("  " + ", ".join(f"seed {r['seed']} {r['offset']:+.4f}" for r in here))
    first = [r for r in rows if r["checkpoint"] == rows[0]["checkpoint"]]
    for name in list(dict.fromkeys(r["checkpoint"] for r in rows))[1:]:
        diffs = [r["val_loss"] - f["val_loss"] for r, f in zip((r for r in rows if r["checkpoint"] == name), first)]
        whole = next(r["all_val_loss"] for r in rows if r["checkpoint"] == name) - first[0]["all_val_loss"]
        print(f"{name} minus {first[0]['checkpoint']}: {whole:+.4f} on all of val.bin; on each seed's windows "
              f"{statistics.mean(diffs):+.4f} ± {statistics.stdev(diffs):.4f} ({min(diffs):+.4f} to {max(diffs):+.4f})")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = out_file(out, ".csv"), out_file(out, ".png")
    write_csv(csv_path, rows)
    plot(rows, seeds, png_path)
    print(f"wrote {csv_path} and {png_path}")
    return rows


def plot(rows: list[dict], seeds: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in dict.fromkeys(r["checkpoint"] for r in rows):
        mine = [r for r in rows if r["checkpoint"] == name]
        label = f"{run_label(Path(name))}, iter {mine[0]['iter']} (all of val.bin {mine[0]['all_val_loss']:.3f})"
        ax.plot([r["seed"] for r in mine], [r["offset"] for r in mine], "o-", ms=4, label=label)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(seeds)
    ax.set_xlabel("seed whose validation windows are scored")
    ax.set_ylabel("loss − loss on all of val.bin")
    ax.set_title("one model, each seed's validation windows", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    fig.tight_layout()
    save_figure(fig, path, dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
