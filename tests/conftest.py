"""Shared fixtures: a small real-text dataset written with our token-file writer, a tiny config."""

import os
import subprocess
import sysconfig
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from configurator import TrainConfig
from tokens import write_tokens


def analysis_module(name: str):
    """results/analysis/<name>.py as a module (it lives outside the importable packages)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / f"results/analysis/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def lr_ratio():
    return analysis_module("lr_ratio")


@pytest.fixture(scope="session")
def start_lr():
    return analysis_module("start_lr")


@pytest.fixture(scope="session")
def lr_sensitivity():
    return analysis_module("lr_sensitivity")


@pytest.fixture(scope="session")
def optimum_drift():
    return analysis_module("optimum_drift")


@pytest.fixture(scope="session")
def crossing_fit():
    return analysis_module("crossing_fit")


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """data_dir holding dataset 'tiny': ~200 KB of standard-library source as byte tokens."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = b"".join((stdlib / name).read_bytes() for name in ("json/encoder.py", "json/decoder.py", "textwrap.py", "bisect.py", "heapq.py"))
    tokens = np.frombuffer(text, dtype=np.uint8)
    root = tmp_path_factory.mktemp("data")
    split = int(0.9 * len(tokens))
    write_tokens(root / "tiny" / "train.bin", tokens[:split], vocab_size=256)
    write_tokens(root / "tiny" / "val.bin", tokens[split:], vocab_size=256)
    return root


def start_together(commands: dict, **run_kwargs) -> dict[object, Future]:
    """key -> the future of ``subprocess.run(commands[key], **run_kwargs)``, as many at a time as there are cores.

    For parametrized tests that each start a process and read its result: most of such a process is
    the single-threaded import of torch, so a module fixture that starts them all together, for each
    test to wait on its own, takes about half the time on 2 cores. ``run_kwargs`` may hold callables
    of the key (``cwd=lambda key: ...``).
    """
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
    futures = {}
    for key, command in commands.items():
        kwargs = {k: v(key) if callable(v) else v for k, v in run_kwargs.items()}
        futures[key] = pool.submit(subprocess.run, command, capture_output=True, text=True, **kwargs)
    pool.shutdown(wait=False)  # the submitted runs go on; each test waits for its own
    return futures


def tiny_config(data_dir: Path, out_dir: Path, **overrides) -> TrainConfig:
    """A model and run small enough for a few seconds of CPU; no sample at the end unless asked for (each costs
    about 0.65 s on a 2-core VM, and only the tests of the sample read it)."""
    values = dict(
        dataset="tiny", data_dir=str(data_dir), out_dir=str(out_dir), n_layer=2, n_head=2, n_embd=32, block_size=32,
        batch_size=8, max_iters=20, eval_interval=10, eval_iters=4, log_interval=1, warmup_iters=2,
        lr_decay_iters=20, learning_rate=3e-3, min_lr=3e-4, device="cpu", dtype="float32", sample_tokens=0,
    )
    values.update(overrides)
    return TrainConfig(**values)


def per_optimizer(names, representatives=("adams", "adam_mini")):
    """Parametrize over optimizers; all but the representatives are marked slow (out of CI's budget).

    Run them with `python -m pytest -m slow`, everything with `python -m pytest -m "slow or not slow"`.
    """
    return [pytest.param(n, marks=() if n in representatives else pytest.mark.slow) for n in names]


@pytest.fixture(scope="session")
def seed_spread():
    return analysis_module("seed_spread")


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """wandb in offline mode, writing under tmp_path/wandb; its process-wide state is torn down after the test,
    so that the next test's runs go to that test's folder, not to the first one's."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    wandb.teardown()
    yield tmp_path / "wandb"
    wandb.teardown()
