"""Fixtures every test suite here shares (tests/ and study/tests/): a small real-text dataset, offline wandb."""

import sysconfig
from pathlib import Path

import numpy as np
import pytest

from tokens import write_tokens


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

