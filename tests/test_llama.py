"""Llama 2 (model_llama.py) against transformers' LlamaForCausalLM and the official adam-mini, and
in train.py with every optimizer, the linear schedule and activation checkpointing."""

import copy
import json

import pytest
import torch
from adams_optim import OPTIMIZERS, AdamMini

import checkpoint
import train
from configurator import TrainConfig
from errors import UserError
from model import GPT, GPTConfig
from model_llama import SIZES, Llama, LlamaConfig, mlp_hidden
from tests.helpers import lr_for, per_optimizer, read_metrics, tiny_config

transformers = pytest.importorskip("transformers")


def hf_llama_dir(tmp_path, vocab=96, dim=32, layers=2, heads=4, context=32, seed=0):
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=dim, intermediate_size=mlp_hidden(dim, 256),
                                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                                      max_position_embeddings=context, rms_norm_eps=1e-5, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # RMSNorm weights away from 1, so that they are tested too
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(tmp_path / "hf_llama")
    return tmp_path / "hf_llama", model


def test_logits_equal_transformers_llama(tmp_path):
    path, hf = hf_llama_dir(tmp_path)
    ours = Llama.from_pretrained(str(path)).eval()
    ids = torch.randint(0, 96, (3, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (ours(ids, ids)[0] - hf(ids).logits).abs().max().item()
    assert diff <= 1e-5, diff
    with torch.no_grad():  # without targets: the last position only, as for sampling
        assert torch.allclose(ours(ids)[0][:, -1], hf(ids).logits[:, -1], atol=1e-5)


def test_llama_2_shapes():
    assert mlp_hidden(4096, 256) == 11008 and mlp_hidden(5120, 256) == 13824  # Llama 2 7B and 13B
    with torch.device("meta"):
        counts = {size: Llama(LlamaConfig(**shape)).num_params(non_embedding=False) for size, shape in SIZES.items()}
    assert counts == {"7b": 6_738_415_616, "13b": 13_015_864_320}  # the released models' parameter counts


def test_a_grouped_query_checkpoint_is_refused(tmp_path):
    config = transformers.LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=256, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "gqa")
    with pytest.raises(UserError, match="grouped-query attention"):
        Llama.from_pretrained(str(tmp_path / "gqa"))


def llama_config(data_dir, out_dir, **overrides):
    return tiny_config(data_dir, out_dir, model="llama", **overrides)


@pytest.mark.parametrize("name", per_optimizer(OPTIMIZERS, ("adamw", "adams", "adam_mini", "lion")))
def test_every_optimizer_trains_llama(name, data_dir, tmp_path):
    cfg = llama_config(data_dir, tmp_path / name, optimizer=name, learning_rate=lr_for(name),
                       min_lr=lr_for(name) / 10, max_iters=20, eval_interval=20)
    summary = train.main(cfg)
    _, evals = read_metrics(cfg.out_dir)
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] - 0.5, evals
    state = checkpoint.load(cfg.out_dir)
    assert state["model_type"] == "llama" and "q_proj" in " ".join(state["model"])
    assert summary["skipped_steps"] == 0


def test_llama_init_from_a_hugging_face_directory_and_resume(data_dir, tmp_path):
    path, hf = hf_llama_dir(tmp_path, vocab=256, context=64)
    cfg = tiny_config(data_dir, tmp_path / "ft", init_from=str(path), max_iters=4, eval_interval=2)
    train.main(cfg)
    state = checkpoint.load(cfg.out_dir)
    assert state["model_type"] == "llama" and state["model_args"]["n_embd"] == 32
    assert state["model_args"]["block_size"] == cfg.block_size  # cropped to the run's context
    train.main(tiny_config(data_dir, tmp_path / "ft", init_from="resume", max_iters=6, eval_interval=2))
    assert [r["iter"] for r in read_metrics(tmp_path / "ft")[1]] == [0, 2, 4, 6]


def test_resuming_as_another_architecture_is_refused(data_dir, tmp_path):
    train.main(llama_config(data_dir, tmp_path / "run", max_iters=2, eval_interval=2))
    from errors import UserError

    cfg = tiny_config(data_dir, tmp_path / "run", init_from="resume", max_iters=4)
    with pytest.raises(UserError, match="holds a run with model='llama'; model='gpt2' cannot continue it"):
        train.main(cfg, explicit={"model"})  # as --model=gpt2 on the command line


def test_adam_mini_on_llama_matches_the_official_package():
    from adam_mini import Adam_mini

    torch.manual_seed(0)
    ref_model = Llama(LlamaConfig(block_size=16, vocab_size=40, n_layer=2, n_head=4, n_embd=32))
    our_model = copy.deepcopy(ref_model)
    hp = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    ref = Adam_mini(ref_model.named_parameters(), dim=32, n_heads=4, verbose=False, **hp)
    # the package decays every tensor whose name lacks norm/ln/bias; these groups do the same
    named = list(our_model.named_parameters())
    no_decay = [(n, p) for n, p in named if any(s in n for s in ("norm", "ln", "bias"))]
    decay = [(n, p) for n, p in named if (n, p) not in no_decay]
    ours = AdamMini([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], n_head=4, **hp)
    rules = {n: r for n, r, _ in ours.partition()}
    assert rules["model.layers.0.self_attn.q_proj.weight"] == "head" and rules["lm_head.weight"] == "row"
    assert rules["model.layers.0.mlp.gate_proj.weight"] == "row" and rules["model.norm.weight"] == "whole"
    gen = torch.Generator().manual_seed(1)
    for _ in range(6):
        idx = torch.randint(0, 40, (3, 16), generator=gen)
        for model, opt in ((ref_model, ref), (our_model, ours)):
            opt.zero_grad()
            model(idx[:, :-1], idx[:, 1:])[1].backward()
            opt.step()
        for (name, p), q in zip(ref_model.named_parameters(), our_model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)


def test_linear_schedule_is_warmup_then_a_straight_line():
    cfg = TrainConfig(learning_rate=1.0, min_lr=0.0, warmup_iters=10, lr_decay_iters=110, decay_shape="linear")
    assert train.get_lr(0, cfg) == pytest.approx(1 / 11)
    assert train.get_lr(10, cfg) == pytest.approx(1.0)
    assert train.get_lr(35, cfg) == pytest.approx(0.75)
    assert train.get_lr(60, cfg) == pytest.approx(0.5)
    assert train.get_lr(110, cfg) == train.get_lr(500, cfg) == 0.0


@pytest.mark.parametrize("make", [
    lambda: GPT(GPTConfig(block_size=16, vocab_size=40, n_layer=3, n_head=2, n_embd=16, dropout=0.0)),
    lambda: Llama(LlamaConfig(block_size=16, vocab_size=40, n_layer=3, n_head=2, n_embd=16)),
], ids=["gpt2", "llama"])
def test_activation_checkpointing_gives_the_same_gradients(make):
    torch.manual_seed(0)
    plain = make()
    recomputed = copy.deepcopy(plain)
    recomputed.checkpointing = True
    idx = torch.randint(0, 40, (4, 16), generator=torch.Generator().manual_seed(0))
    for model in (plain, recomputed):
        model.train()
        model(idx[:, :-1], idx[:, 1:])[1].backward()
    for (name, a), b in zip(plain.named_parameters(), recomputed.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-6, atol=1e-7), name


def test_activation_checkpointing_in_train_py(data_dir, tmp_path, monkeypatch):
    common = dict(max_iters=4, eval_interval=4)
    a = train.main(llama_config(data_dir, tmp_path / "a", **common))
    calls = []
    original = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", lambda *a, **k: calls.append(1) or original(*a, **k))
    b = train.main(llama_config(data_dir, tmp_path / "b", activation_checkpointing=True, **common))
    assert len(calls) == 4 * 2  # every block of every training step (none in evaluation)
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)
    assert json.loads((tmp_path / "b" / "config.json").read_text())["config"]["activation_checkpointing"] is True
