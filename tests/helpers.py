"""What the product's tests share (and the study's tests borrow): small configs, command lines, readers."""

import os
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

import metrics
from configurator import TrainConfig

REPO = Path(__file__).resolve().parents[1]
LR = {"adamw": 3e-3, "adams": 3e-3, "adam_mini": 3e-3, "lion": 2e-3, "sgd": 0.3, "adagrad": 3e-2, "rmsprop": 1e-3}


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


def lr_for(name: str) -> float:
    return LR.get(name, 3e-3)  # AdamW's, for an optimizer added later


def read_metrics(out_dir):
    return metrics.read(out_dir)


def cli_args(cfg: TrainConfig) -> list[str]:
    return [f"--{k}={v}" for k, v in vars(cfg).items()]


def losses(out_dir) -> dict[int, float]:
    return {r["iter"]: r["train_loss"] for r in read_metrics(out_dir)[0]}


def tiny_encoding():
    import tiktoken

    ranks = {bytes([i]): i for i in range(256)}
    for i, merge in enumerate((b"th", b"he", b"the", b"in", b"ng")):
        ranks[merge] = 256 + i
    return tiktoken.Encoding(name="tiny-bpe", pat_str=r"""'s|'t| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                             mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 261})


def gpt2_or_skip():
    cache = REPO.parent / "shared" / "tiktoken_cache"
    if "TIKTOKEN_CACHE_DIR" not in os.environ and cache.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        import tiktoken

        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # offline and no cache
        pytest.skip(f"GPT-2 BPE files not available offline ({type(e).__name__}); set TIKTOKEN_CACHE_DIR")
