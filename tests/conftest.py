"""Fixtures the product's tests share: a finished sweep of tiny runs."""

import pytest

from scripts import sweep


@pytest.fixture(scope="session")
def sweep_out(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    args = ["--grid", "beta1=0.9,0.95", "--grid", "beta2=0.95,0.999", "--seeds", "1", "2", "--out", str(out), "--jobs", "2"]
    for item in (f"data_dir={data_dir}", "dataset=tiny", "n_layer=1", "n_head=2", "n_embd=32", "block_size=32",
                 "batch_size=4", "max_iters=6", "lr_decay_iters=6", "warmup_iters=1", "eval_interval=3",
                 "eval_iters=2", "device=cpu", "dtype=float32", "sample_tokens=0"):
        args += ["--set", item]
    sweep.main(args)
    return out, args
