"""Behaving like the tools users know (issue #116): checkpoints torch.load(weights_only=True) reads, a
sharded run as one .pt, nanoGPT's token files, Llama runs as Hugging Face directories, Adam-mini on
grouped-query models, wandb and log lines, the end-of-run sample's prompt, --out conventions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import checkpoint
import cli
import consolidate
import dataset
import export
import metrics
import run_folder
import train
import vocabulary
from tests.helpers import cli_args, tiny_config
from tokens import read_tokens

REPO = Path(__file__).resolve().parents[1]


def torchrun_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}


@pytest.fixture(scope="module")
def sharded_run(data_dir, tmp_path_factory):
    """A run trained with fsdp=True (one process under torchrun): .dcp checkpoints at iterations 2 and 4."""
    cfg = tiny_config(data_dir, tmp_path_factory.mktemp("sharded") / "run", max_iters=4, eval_interval=2,
                      max_consecutive_skips=10, fsdp=True, lr_decay_iters=8)
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
                             "train.py", *cli_args(cfg)], cwd=REPO, capture_output=True, text=True, env=torchrun_env(),
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert checkpoint.latest(cfg.out_dir).name == "ckpt_00000004.dcp"
    return cfg


def test_checkpoints_load_with_weights_only(data_dir, tmp_path, sharded_run):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2)
    train.main(cfg)
    # torch's own loader, as a user would call it on a file they did not write
    state = torch.load(checkpoint.latest(cfg.out_dir), weights_only=True)
    assert state["iter_num"] == 2 and "model" in state and len(state["rng"]) == 1
    meta = torch.load(checkpoint.latest(sharded_run.out_dir) / "meta.pt", weights_only=True)
    assert meta["iter_num"] == 4




def test_consolidating_a_sharded_run_gives_one_pt_that_resumes_exactly_as_the_shards_do(sharded_run, tmp_path):
    src = Path(sharded_run.out_dir)
    assert cli.main(consolidate.main, [str(src), str(tmp_path / "one")]) == 0
    one = checkpoint.latest(tmp_path / "one")
    assert one.name == "ckpt_00000004.pt" and (tmp_path / "one" / "config.json").is_file()
    torch.load(one, weights_only=True)
    # both resume in one process to iteration 6, from the shards and from the one file, to the same bits
    import shutil

    shutil.copytree(src, tmp_path / "shards")
    for run in ("shards", "one"):
        assert train.cli(["--init_from=resume", f"--out_dir={tmp_path / run}", "--max_iters=6", "--eval_interval=2"]) == 0
    a, b = (checkpoint.load(tmp_path / run) for run in ("shards", "one"))
    assert a["iter_num"] == b["iter_num"] == 6
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert [r["val_loss"] for r in metrics.read(tmp_path / "shards")[1]] == [r["val_loss"] for r in metrics.read(tmp_path / "one")[1]]
    export.export(tmp_path / "one", tmp_path / "hf")  # and export reads it
    assert cli.main(consolidate.main, [str(tmp_path / "one"), str(tmp_path / "again")]) == 2  # already one file


def test_nanogpt_token_files_convert_and_train(tmp_path, data_dir):
    ids = np.arange(30_000) % 50257
    nano = tmp_path / "nano"
    nano.mkdir()
    for split in ("train", "val"):
        ids.astype(np.uint16).tofile(nano / f"{split}.bin")  # nanoGPT's prepare.py: arr.tofile, no header
    code = subprocess.run([sys.executable, "-m", "tokens", "from-nanogpt", str(nano), str(tmp_path / "data" / "owt")],
                          cwd=REPO, capture_output=True, text=True).returncode
    assert code == 0
    tokens, vocab = read_tokens(tmp_path / "data" / "owt" / "train.bin")
    assert vocab == 50257 and np.array_equal(np.asarray(tokens), ids)
    # a vocabulary too small for the ids is one line, and nothing is written
    result = subprocess.run([sys.executable, "-m", "tokens", "from-nanogpt", str(nano / "val.bin"), str(tmp_path / "x.bin"),
                             "--vocab-size", "256"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2 and "outside a vocabulary of 256" in result.stderr and not (tmp_path / "x.bin").exists()
    # the loader's refusal of the raw file points at the converter
    from errors import UserError

    with pytest.raises(UserError, match="python -m tokens from-nanogpt"):
        dataset.load(str(tmp_path), "nano", 32)


def test_a_llama_run_exports_to_a_transformers_llama_with_our_logits(data_dir, tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = tiny_config(data_dir, tmp_path / "run", model="llama", max_iters=2, eval_interval=2)
    train.main(cfg)
    export.export(cfg.out_dir, tmp_path / "hf")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == "LlamaForCausalLM"
    ours, _ = checkpoint.load_model(cfg.out_dir)
    ids = torch.randint(0, 256, (3, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (hf(ids).logits - ours(ids, ids)[0]).abs().max().item()
    assert diff <= 1e-5, diff
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tok("hi")["input_ids"] == list(b"hi")  # the byte-level tokenizer went with it


def test_adam_mini_on_a_grouped_query_model_matches_the_official_package():
    # a Hugging Face Llama with 4 query heads and 2 KV heads: K (and Q) get one second moment per head of
    # width / n_head rows, which for K is one per KV head; V one per row, as the official package does
    transformers = pytest.importorskip("transformers")
    from adam_mini import Adam_mini
    from adams_optim import AdamMini

    config = transformers.LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    ref_model = transformers.LlamaForCausalLM(config)
    our_model = transformers.LlamaForCausalLM(config)
    our_model.load_state_dict(ref_model.state_dict())
    hp = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    ref = Adam_mini(ref_model.named_parameters(), dim=32, n_heads=4, n_kv_heads=2, verbose=False, **hp)
    ours = AdamMini.from_model(our_model, **hp)
    blocks = {n: k for n, _, k in ours.partition()}
    assert blocks["model.layers.0.self_attn.q_proj.weight"] == 4 and blocks["model.layers.0.self_attn.k_proj.weight"] == 2
    assert blocks["model.layers.0.self_attn.v_proj.weight"] == 16  # 2 KV heads x 8 rows: one per row
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        idx = torch.randint(0, 40, (3, 16), generator=gen)
        for model, opt in ((ref_model, ref), (our_model, ours)):
            opt.zero_grad()
            model(idx, labels=idx).loss.backward()
            opt.step()
        for (name, p), q in zip(ref_model.named_parameters(), our_model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)


def test_a_resumed_run_continues_its_wandb_run(data_dir, tmp_path, offline_wandb):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2, wandb_log=True)
    train.main(cfg)
    run_id = (tmp_path / "run" / run_folder.WANDB_ID).read_text().strip()
    train.cli(["--init_from=resume", f"--out_dir={cfg.out_dir}", "--max_iters=4", "--lr_decay_iters=20"])
    assert (tmp_path / "run" / run_folder.WANDB_ID).read_text().strip() == run_id
    runs = sorted(offline_wandb.glob("offline-run-*"))
    assert len(runs) == 2 and all(run_id in r.name for r in runs)  # two sessions of one wandb run (a -1 if in one second)


def test_redirected_output_gets_plain_log_lines_not_progress_bars(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=4, eval_interval=2, log_interval=2)
    result = subprocess.run([sys.executable, "train.py", *cli_args(cfg)], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0
    assert "\r" not in result.stdout + result.stderr  # no bar redraws in a log file
    lines = [line for line in result.stdout.splitlines() if line.startswith("iter 2: loss")]
    assert len(lines) == 1 and "ms" in lines[0], result.stdout


def test_the_end_of_run_sample_starts_from_the_datas_newline():
    assert vocabulary.newline(256) == ord("\n")
    tiktoken = pytest.importorskip("tiktoken")
    try:
        encoding = tiktoken.get_encoding("gpt2")
    except Exception as e:
        pytest.skip(f"GPT-2's BPE files are not available here ({type(e).__name__}); set TIKTOKEN_CACHE_DIR")
    assert [vocabulary.newline(50257)] == encoding.encode("\n")


def test_out_names_a_file_stem_whatever_extension_it_ends_in(tmp_path):
    from scripts import out_file

    assert out_file(tmp_path / "a" / "curves.png", ".png") == tmp_path / "a" / "curves.png"  # not curves.png.png
    assert out_file(tmp_path / "a" / "curves.png", ".csv") == tmp_path / "a" / "curves.csv"
    assert out_file(tmp_path / "noise_b0.95", ".csv") == tmp_path / "noise_b0.95.csv"
    assert (tmp_path / "a").is_dir()


def test_the_config_json_of_a_run_names_its_machine(data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2)
    train.main(cfg)
    derived = json.loads((tmp_path / "run" / "config.json").read_text())["derived"]
    assert derived["torch"] == torch.__version__ and derived["threads"] == torch.get_num_threads() and derived["hardware"]
