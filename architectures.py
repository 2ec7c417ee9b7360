"""Which model class a run or a Hugging Face directory needs: GPT-2 (model.py) or Llama 2 (model_llama.py).

The one place that knows both architectures, so that neither model file imports the other.
"""

from __future__ import annotations

from pathlib import Path

from folders import read_json
from model import GPT, GPTConfig
from model_llama import Llama, LlamaConfig

ARCHITECTURES = {"gpt2": (GPT, GPTConfig), "llama": (Llama, LlamaConfig)}


def architecture(model_type: str) -> tuple[type, type]:
    """The model class and its config class for a ``model_type``: 'gpt2' or 'llama'."""
    if model_type not in ARCHITECTURES:
        raise ValueError(f"unknown model type '{model_type}'; choose 'gpt2' or 'llama'")
    return ARCHITECTURES[model_type]


def hf_model_type(name_or_path: str) -> str:
    """'llama' for a local Hugging Face Llama directory, else 'gpt2' (GPT-2 names and directories)."""
    config = Path(name_or_path) / "config.json"
    saved = read_json(config) if config.is_file() else {}
    return "llama" if isinstance(saved, dict) and saved.get("model_type") == "llama" else "gpt2"
