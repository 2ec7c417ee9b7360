"""GPT-2 model: parity with Hugging Face transformers' GPT2LMHeadModel on the same weights."""

import math

import pytest
import torch

from model import GPT, MLP, SIZES, GPTConfig


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A random small GPT-2 saved the way transformers saves one, so loading works offline."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=97, n_positions=64, n_embd=48, n_layer=3, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).eval()
    path = tmp_path_factory.mktemp("hf_gpt2")
    model.save_pretrained(path)
    return path, model


def test_logits_equal_transformers(hf_dir):
    path, hf = hf_dir
    ours = GPT.from_pretrained(str(path)).eval()
    idx = torch.randint(0, 97, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(idx).logits
        got, _ = ours(idx, targets=idx)  # targets: logits at every position
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_loss_equals_transformers(hf_dir):
    path, hf = hf_dir
    ours = GPT.from_pretrained(str(path)).eval()
    idx = torch.randint(0, 97, (2, 33), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = hf(idx, labels=idx).loss  # HF shifts labels inside
        _, got = ours(idx[:, :-1], targets=idx[:, 1:])
    assert got.item() == pytest.approx(want.item(), rel=1e-5)


def test_missing_local_checkpoint_is_an_error(tmp_path):
    with pytest.raises(OSError):
        GPT.from_pretrained(str(tmp_path / "nothing-here"))


def test_initial_loss_is_about_ln_vocab():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=32, vocab_size=512, n_layer=2, n_head=2, n_embd=64))
    gen = torch.Generator().manual_seed(1)
    idx, targets = torch.randint(0, 512, (2, 8, 32), generator=gen)  # targets independent of the inputs
    _, loss = model(idx, targets=targets)
    assert loss.item() == pytest.approx(math.log(512), abs=0.1)


def test_gpt2_initialisation_and_tying():
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=64, vocab_size=2048, n_layer=6, n_head=4, n_embd=256)
    model = GPT(cfg)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.transformer.h[0].mlp.c_fc.weight.std().item() == pytest.approx(0.02, rel=0.05)
    residual_std = 0.02 / math.sqrt(2 * cfg.n_layer)
    assert model.transformer.h[0].attn.c_proj.weight.std().item() == pytest.approx(residual_std, rel=0.05)
    assert model.transformer.h[0].mlp.c_fc.bias.abs().max().item() == 0


def test_parameter_count_matches_gpt2_small():
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=50257, **SIZES["small"]))
    # GPT-2 Small: 124,439,808 parameters in all, 786,432 of them in position embeddings
    assert model.num_params(non_embedding=False) == 124_439_808
    assert model.num_params() == 124_439_808 - 1024 * 768


def test_generate_appends_tokens_and_respects_block_size():
    model = GPT(GPTConfig(block_size=8, vocab_size=50, n_layer=1, n_head=1, n_embd=16)).eval()
    out = model.generate(torch.zeros(2, 3, dtype=torch.long), 12, top_k=5, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 15) and out.max() < 50


def test_mfu_estimate_is_flops_over_peak():
    model = GPT(GPTConfig(block_size=16, vocab_size=64, n_layer=2, n_head=2, n_embd=32))
    n, cfg = model.num_params(), model.config
    flops_per_token = 6 * n + 12 * cfg.n_layer * cfg.n_embd * cfg.block_size
    assert model.estimate_mfu(1000.0, 1e12) == pytest.approx(flops_per_token * 1000 / 1e12)


@pytest.mark.parametrize("gelu", ["tanh", "exact"])
def test_the_mlp_applies_the_gelu_it_is_given(gelu):
    # the two forms by hand: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and x/2 (1 + erf(x / sqrt(2)))
    mlp = MLP(GPTConfig(n_embd=4, n_head=1, bias=False, gelu=gelu))
    h = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0] * 2).reshape(1, 1, 16)
    if gelu == "tanh":
        by_hand = [x / 2 * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))) for x in h.flatten().tolist()]
    else:
        by_hand = [x / 2 * (1 + math.erf(x / math.sqrt(2))) for x in h.flatten().tolist()]
    assert torch.allclose(mlp.gelu(h).flatten(), torch.tensor(by_hand), atol=1e-6)
    assert mlp.gelu(torch.tensor([1.0])).item() != pytest.approx(
        MLP(GPTConfig(n_embd=4, n_head=1, gelu="exact" if gelu == "tanh" else "tanh")).gelu(torch.tensor([1.0])).item(),
        abs=1e-5)  # (the two differ: 0.84119 against 0.84134 at 1)
