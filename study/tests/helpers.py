"""What the study's tests share: finished runs as train.py leaves them, made in the test."""

import csv
import json
import math


def fake_run(folder, optimizer, lr, loss, seed=1, batch_tokens=2048, params=1000, max_iters=10, **settings):
    """A finished run as train.py leaves it, for the analysis scripts: config.json and metrics.jsonl
    (loss=inf: a run train.py stopped on non-finite steps, whose log ends with a ``diverged`` line)."""
    folder.mkdir(parents=True)
    config = dict(config=dict(optimizer=optimizer, learning_rate=lr, seed=seed, max_iters=max_iters, **settings),
                  derived=dict(parameters=params, tokens_per_iter=batch_tokens))
    (folder / "config.json").write_text(json.dumps(config))
    lines = [dict(iter=max_iters, val_loss=loss)] if math.isfinite(loss) else \
        [dict(kind="eval", iter=0, val_loss=11.0), dict(kind="diverged", iter=max_iters // 2, reason="the loss is nan")]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


def write_noise_csv(path, tensor_ratios, run="a"):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["run", "iter", "tensor", "measured_ratio"])
        writer.writeheader()
        writer.writerows(dict(run=run, iter=i, tensor=t, measured_ratio=r) for i, (t, r) in enumerate(tensor_ratios))
