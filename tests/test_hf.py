"""Hugging Face: export.py (our checkpoint -> a transformers GPT-2 directory), sample.py, and our
optimizers inside transformers' Trainer. The reference is transformers' own GPT2LMHeadModel."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from adams_optim import AdamMini, AdamS, Lion

import checkpoint
import cli
import dataset
import export
import metrics
import sample
import train
import vocabulary
from model import GPT, GPTConfig
from tests.helpers import tiny_config
from tokens import write_tokens

transformers = pytest.importorskip("transformers")
REPO = Path(__file__).resolve().parents[1]


def hf_logits(hf_dir, ids):
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    with torch.no_grad():
        return model(ids).logits


def our_logits(model, ids):
    with torch.no_grad():
        return model(ids, ids)[0]  # with targets: the logits of every position


@pytest.fixture(scope="module")
def byte_run(data_dir, tmp_path_factory):
    """A tiny byte-level model trained by train.py (the embedded corpus's kind of vocabulary)."""
    cfg = tiny_config(data_dir, tmp_path_factory.mktemp("byte_run"), max_iters=30, eval_interval=30)
    train.main(cfg)
    return cfg


@pytest.mark.parametrize("bias, gelu", [(False, "tanh"), (True, "tanh"), (False, "exact")])
def test_export_gives_our_logits_in_transformers(bias, gelu, data_dir, tmp_path):
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=3, eval_interval=3, bias=bias, gelu=gelu)
    train.main(cfg)
    export.export(cfg.out_dir, tmp_path / "hf")
    ours, _ = checkpoint.load_model(cfg.out_dir)
    ids = torch.randint(0, 256, (3, 32), generator=torch.Generator().manual_seed(0))
    diff = (hf_logits(tmp_path / "hf", ids) - our_logits(ours, ids)).abs().max().item()
    assert diff <= 1e-5, diff
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (hf_config["vocab_size"], hf_config["n_layer"], hf_config["n_positions"]) == (256, 2, 32)
    assert hf_config["activation_function"] == {"tanh": "gelu_new", "exact": "gelu"}[gelu]
    back = GPT.from_pretrained(str(tmp_path / "hf"))  # and back: the same GELU
    assert back.config.gelu == gelu and (our_logits(back, ids) - our_logits(ours, ids)).abs().max().item() <= 1e-5


def test_the_byte_tokenizer_round_trips_any_text_as_utf8_bytes(byte_run, tmp_path):
    export.export(byte_run.out_dir, tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    for text in ("def f(x):\n    return x  # ok", "héllo ✓ wörld", "\x00\x01\x7f\t\r\n", "日本語 😀"):
        ids = tok(text)["input_ids"]
        assert ids == list(text.encode("utf-8"))
        assert tok.decode(ids) == text
    # the alphabet is GPT-2's byte-level one: the same characters the tokenizers library uses
    from tokenizers import pre_tokenizers

    assert set(vocabulary.bytes_to_unicode().values()) == set(pre_tokenizers.ByteLevel.alphabet())


def test_a_padded_vocabulary_is_cropped_to_the_datas(tmp_path, capsys):
    root = tmp_path / "data"
    tokens = np.random.default_rng(0).integers(0, 300, 20_000)
    write_tokens(root / "v300" / "train.bin", tokens, 300)
    write_tokens(root / "v300" / "val.bin", tokens[:5000], 300)
    cfg = tiny_config(root, tmp_path / "run", dataset="v300", max_iters=2, eval_interval=2)
    train.main(cfg)
    ours, state = checkpoint.load_model(cfg.out_dir)
    assert ours.config.vocab_size == 320 and state["data_vocab"] == 300  # padded to a multiple of 64
    export.export(cfg.out_dir, tmp_path / "hf")
    assert "neither bytes nor GPT-2's; no tokenizer written" in capsys.readouterr().out
    ids = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    theirs = hf_logits(tmp_path / "hf", ids)
    assert theirs.shape[-1] == 300
    assert (theirs - our_logits(ours, ids)[..., :300]).abs().max().item() <= 1e-5


def test_gpt2_vocabulary_gets_gpt2s_tokenizer(tmp_path):
    try:
        import tiktoken

        tiktoken.get_encoding("gpt2")
    except Exception as e:
        pytest.skip(f"GPT-2's BPE files are not available here ({type(e).__name__}); set TIKTOKEN_CACHE_DIR")
    root = tmp_path / "data"
    tokens = np.random.default_rng(0).integers(0, 50257, 20_000)
    write_tokens(root / "gpt2" / "train.bin", tokens, 50257)
    write_tokens(root / "gpt2" / "val.bin", tokens[:5000], 50257)
    cfg = tiny_config(root, tmp_path / "run", dataset="gpt2", max_iters=1, eval_interval=1, eval_iters=1)
    train.main(cfg)
    export.export(cfg.out_dir, tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tok("Hello world")["input_ids"] == [15496, 995] == tiktoken.get_encoding("gpt2").encode("Hello world")
    text = "def f(x):\n    return x  # the café's 2 ✓<|endoftext|>"
    assert tok(text)["input_ids"] == tiktoken.get_encoding("gpt2").encode(text, allowed_special="all")
    assert tok.decode(tok(text)["input_ids"]) == text and tok.eos_token_id == 50256
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["vocab_size"] == 50257 and config["eos_token_id"] == 50256


def test_hf_to_ours_to_hf_is_the_identity(tmp_path):
    config = transformers.GPT2Config(vocab_size=96, n_positions=24, n_embd=32, n_layer=2, n_head=4)
    torch.manual_seed(0)
    original = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # non-zero biases, so that they are carried too
        for name, p in original.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.02)
    original.save_pretrained(tmp_path / "a")
    ours = GPT.from_pretrained(str(tmp_path / "a"))
    again = ours.to_hf(vocab_size=96)
    theirs, back = original.state_dict(), again.state_dict()
    assert theirs.keys() == back.keys()
    for key in theirs:
        assert torch.equal(theirs[key], back[key]), key


def test_export_refuses_to_overwrite_and_says_why(byte_run, tmp_path, capsys):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "keep.txt").write_text("mine")
    for overwrite in ([], ["--overwrite"]):  # what is not an export is never replaced
        assert cli.main(export.main, [str(byte_run.out_dir), str(tmp_path / "hf"), *overwrite]) == 2
        assert "will not replace; choose another HF_DIR" in capsys.readouterr().err
        assert (tmp_path / "hf" / "keep.txt").read_text() == "mine"
    export.export(byte_run.out_dir, tmp_path / "hf1")
    assert cli.main(export.main, [str(byte_run.out_dir), str(tmp_path / "hf1")]) == 2  # an export: only with --overwrite
    assert "holds a Hugging Face model (an export); choose another HF_DIR, or pass --overwrite" in capsys.readouterr().err
    assert cli.main(export.main, [str(byte_run.out_dir), str(tmp_path / "hf1"), "--overwrite"]) == 0
    assert cli.main(export.main, [str(tmp_path / "nowhere"), str(tmp_path / "hf2")]) == 2
    assert "argument source: must be an existing file or folder" in capsys.readouterr().err
    assert not (tmp_path / "hf2").exists()


def test_export_of_a_sharded_checkpoint(data_dir, tmp_path):
    # an FSDP run (1 process under torchrun) saves .dcp checkpoints; the exported weights must be
    # the ones the run evaluated: the same validation loss on the same batches
    cfg = tiny_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2, fsdp=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
                             "train.py", *[f"--{k}={v}" for k, v in vars(cfg).items()]], cwd=REPO,
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert checkpoint.latest(cfg.out_dir).name.endswith(".dcp")
    export.export(cfg.out_dir, tmp_path / "hf")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    val = dataset.load(cfg.data_dir, cfg.dataset, cfg.block_size)["val"]
    with torch.no_grad():
        losses = [hf(*[dataset.get_batch(val, cfg.seed, dataset.EVAL_VAL, 0, k, cfg.batch_size, cfg.block_size, 256,
                                         torch.device("cpu"))[0]], labels=None).logits for k in range(cfg.eval_iters)]
    targets = [dataset.get_batch(val, cfg.seed, dataset.EVAL_VAL, 0, k, cfg.batch_size, cfg.block_size, 256,
                                 torch.device("cpu"))[1] for k in range(cfg.eval_iters)]
    loss = sum(torch.nn.functional.cross_entropy(lg.flatten(0, 1), t.flatten()).item()
               for lg, t in zip(losses, targets)) / cfg.eval_iters
    logged = metrics.read(cfg.out_dir)[1][-1]
    assert logged["iter"] == 2 and loss == pytest.approx(logged["val_loss"], abs=1e-5)


# --- sample.py ---------------------------------------------------------------------------------------


def test_sample_greedy_equals_transformers_generate_on_the_exported_model(byte_run, tmp_path, capsys):
    prompt = "def main("
    assert cli.main(sample.main, [f"--out_dir={byte_run.out_dir}", f"--start={prompt}", "--temperature=0",
                        "--max_new_tokens=20"]) == 0
    ours = capsys.readouterr().out.split("\n---------------\n")[0]
    export.export(byte_run.out_dir, tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    out = hf.generate(ids, max_new_tokens=20, do_sample=False, pad_token_id=0)  # 9 + 20 within block_size 32
    assert tok.decode(out[0]) == ours
    assert len(ours.encode("utf-8")) >= len(prompt) + 1  # (bytes may merge into fewer characters)


def test_sample_is_deterministic_for_a_seed(byte_run):
    args = ["--out_dir", str(byte_run.out_dir), "--num_samples", "2", "--max_new_tokens", "12"]
    a = sample.sample(sample.parse_args([*args, "--seed", "1"]))
    b = sample.sample(sample.parse_args([*args, "--seed", "1"]))
    c = sample.sample(sample.parse_args([*args, "--seed", "2"]))
    assert a == b and a != c and len(a) == 2 and a[0] != a[1]


@pytest.mark.parametrize("argv, message", [
    (["--out_dir=NOWHERE"], "no checkpoint in"),
    (["--out_dir=RUN", "--start=FILE:/no/such/prompt.txt"], "no such file"),
    (["--out_dir=RUN", "--start="], "the prompt is empty"),
    (["--out_dir=RUN", "--temperature=-1"], "argument --temperature: must be 0 (greedy) or a number from 0.001 to 1e6, got '-1'"),
    (["--init_from=/no/such/hf_dir"], "neither 'resume' nor a GPT-2 name"),
    (["--out_dir=RUN", "--start=caf\udce9"], "--start is not UTF-8 text"),  # a latin-1 byte, as a shell passes it
    (["--out_dir=RUN", "--temperature=1e-300"], "must be 0 (greedy) or a number from 0.001"),  # it used to overflow
])
def test_sample_errors_are_one_line(argv, message, byte_run, tmp_path, capsys):
    argv = [a.replace("NOWHERE", str(tmp_path / "none")).replace("RUN", str(byte_run.out_dir)) for a in argv]
    assert cli.main(sample.main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_sample_refuses_characters_outside_the_vocabulary(tmp_path, capsys):
    root = tmp_path / "data"
    ascii_tokens = np.random.default_rng(0).integers(0, 128, 20_000)
    write_tokens(root / "ascii" / "train.bin", ascii_tokens, 128)
    write_tokens(root / "ascii" / "val.bin", ascii_tokens[:5000], 128)
    cfg = tiny_config(root, tmp_path / "run", dataset="ascii", max_iters=1, eval_interval=1, eval_iters=1)
    train.main(cfg)
    assert cli.main(sample.main, [f"--out_dir={cfg.out_dir}", "--start=café"]) == 2
    assert "outside the model's vocabulary of 128" in capsys.readouterr().err


# --- our optimizers in transformers' Trainer -------------------------------------------------------------


class Patterns(torch.utils.data.Dataset):
    """Sequences of a few repeating patterns: a tiny GPT-2 learns them within a few dozen steps."""

    def __init__(self, n=256, length=16, vocab=64):
        gen = torch.Generator().manual_seed(0)
        bases = torch.randint(0, vocab, (4, 4), generator=gen)
        self.items = [bases[i % 4].repeat(length // 4) for i in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return {"input_ids": self.items[i], "labels": self.items[i]}


def tiny_hf_model():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=4)
    return transformers.GPT2LMHeadModel(config)


def trainer_for(model, out, steps=30, **kwargs):
    args = transformers.TrainingArguments(output_dir=str(out), max_steps=steps, per_device_train_batch_size=8,
                                          learning_rate=3e-3, lr_scheduler_type="constant", logging_steps=5,
                                          save_steps=steps // 2, use_cpu=True, report_to=[], seed=0, disable_tqdm=True)
    return transformers.Trainer(model=model, args=args, train_dataset=Patterns(), **kwargs)


def losses(trainer):
    return [r["loss"] for r in trainer.state.log_history if "loss" in r]


@pytest.mark.parametrize("make", [
    lambda m: AdamS(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01),
    lambda m: Lion(m.parameters(), lr=3e-3, betas=(0.95, 0.98), weight_decay=0.1),
    lambda m: AdamMini.from_model(m, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01),
], ids=["adams", "lion", "adam_mini"])
def test_trainer_trains_with_our_optimizer_and_resumes_its_state(make, tmp_path):
    model = tiny_hf_model()
    optimizer = make(model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    trainer = trainer_for(model, tmp_path, optimizers=(optimizer, scheduler))
    trainer.train()
    curve = losses(trainer)
    assert curve[-1] < 0.5 * curve[0], curve
    # resuming from the halfway checkpoint loads the optimizer's saved state into a fresh one
    saved = torch.load(tmp_path / "checkpoint-15" / "optimizer.pt", weights_only=False)
    model2 = tiny_hf_model()
    fresh = make(model2)
    resumed = trainer_for(model2, tmp_path / "again", optimizers=(fresh, torch.optim.lr_scheduler.LambdaLR(
        fresh, lambda step: 1.0)))
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-15"))
    assert resumed.state.global_step == 30
    assert saved["state"] and set(saved["state"][0]) == set(fresh.state_dict()["state"][0])
    assert math.isfinite(losses(resumed)[-1]) and losses(resumed)[-1] < 0.5 * curve[0]


def test_trainer_builds_adams_from_its_class_and_kwargs(tmp_path):
    model = tiny_hf_model()
    # the Trainer does not pass its learning_rate to a class given this way: give lr in the kwargs
    trainer = trainer_for(model, tmp_path, optimizer_cls_and_kwargs=(AdamS, {"lr": 3e-3, "betas": (0.9, 0.95)}))
    trainer.train()
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate may wrap it
    assert type(optimizer) is AdamS and optimizer.param_groups[0]["lr"] == 3e-3
    curve = losses(trainer)
    assert curve[-1] < 0.5 * curve[0], curve


def test_adam_mini_from_model_cuts_conv1d_weights_by_output_like_ours():
    # the exported HF model's Conv1D weights are ours transposed: the partitions must be the same blocks
    ours = GPT(GPTConfig(block_size=16, vocab_size=64, n_layer=2, n_head=4, n_embd=32, bias=True))
    hf = ours.to_hf(64)
    a = {name: (rule, n) for name, rule, n in AdamMini.from_model(ours).partition()}
    b = {name: (rule, n) for name, rule, n in AdamMini.from_model(hf).partition()}
    assert a == b and a["transformer.h.0.attn.c_attn.weight"] == ("qkv", 4 + 4 + 32)
    # and one step from the same gradients moves the two models alike
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    opt_a, opt_b = AdamMini.from_model(ours, lr=1e-2), AdamMini.from_model(hf, lr=1e-2)
    for _ in range(3):
        for model, opt in ((ours, opt_a), (hf, opt_b)):
            opt.zero_grad()
            # the same loss: each position predicts the next token
            loss = model(ids[:, :-1], ids[:, 1:])[1] if model is ours else model(ids, labels=ids).loss
            loss.backward()
            opt.step()
    with torch.no_grad():
        assert (our_logits(ours, ids) - hf(ids).logits).abs().max().item() < 1e-4
