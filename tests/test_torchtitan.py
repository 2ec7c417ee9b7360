"""Our optimizers inside torchtitan (optim/torchtitan.py) and the paper's Llama 2 runs as torchtitan
configs (config/torchtitan_llama2.py).

torchtitan comes with the dev extra (``pip install -e ".[titan]"`` alone for users); where it is
not installed, these tests skip. Its trainer itself does not run on CPU (its Llama attention has no
backward pass there), so the optimizer container and the configs are tested here, not a training run.
"""

import copy

import pytest
import torch

pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install -e '.[titan]')")

from adams_optim import AdamS, Lion  # noqa: E402
from adams_optim.torchtitan import OptimizersContainer, optimizer_config  # noqa: E402

HYPER = {"AdamS": dict(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1), "Lion": dict(lr=1e-3, betas=(0.95, 0.98), weight_decay=1.0)}


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))


def train(model, optimizer, steps, seed=1):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = torch.randn(32, 8, generator=gen), torch.randn(32, 4, generator=gen)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("name", ["AdamS", "Lion"])
@pytest.mark.parametrize("implementation", ["fused", "foreach", "for-loop"])
def test_the_container_steps_our_optimizer_with_torchtitans_groups(name, implementation):
    config = optimizer_config(name, no_decay=r"bias|^2\.", **HYPER[name])
    config.implementation = implementation
    model, reference = tiny_model(), tiny_model()
    container = config.build(model_parts=[model])
    assert isinstance(container, OptimizersContainer) and [type(o) for o in container] == [{"AdamS": AdamS, "Lion": Lion}[name]]
    (no_decay, decay), = [o.param_groups for o in container]
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == HYPER[name]["weight_decay"]
    assert set(no_decay["param_names"]) == {"0.bias", "2.weight", "2.bias", "3.bias"}
    assert no_decay["fused"] is (implementation == "fused") and decay["foreach"] is (implementation == "foreach")

    named = dict(reference.named_parameters())
    groups = [{"params": [named[n] for n in no_decay["param_names"]], "weight_decay": 0.0},
              {"params": [named[n] for n in decay["param_names"]]}]
    direct = {"AdamS": AdamS, "Lion": Lion}[name](groups, **HYPER[name])  # our optimizer, built by hand
    train(model, container, 5)
    train(reference, direct, 5)
    for (n, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=n)
    assert not torch.equal(model[0].weight, tiny_model()[0].weight)  # it trained


@pytest.mark.parametrize("name", ["AdamS", "Lion"])
def test_torchtitans_checkpoint_format_saves_and_restores_our_state(name):
    model = tiny_model()
    container = optimizer_config(name, **HYPER[name]).build(model_parts=[model])
    train(model, container, 3)
    saved_model, saved = copy.deepcopy((model.state_dict(), container.state_dict()))  # flat, keyed by parameter name
    assert any(k.endswith("exp_avg") and "0.weight" in k for k in saved), list(saved)[:4]

    resumed = tiny_model(seed=7)
    resumed.load_state_dict(saved_model)
    again = optimizer_config(name, **HYPER[name]).build(model_parts=[resumed])
    again.load_state_dict(saved)
    train(model, container, 2, seed=9)
    train(resumed, again, 2, seed=9)
    for p, q in zip(model.parameters(), resumed.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_an_unknown_optimizer_name_says_which_exist():
    with pytest.raises(NotImplementedError, match="AdamS, Lion"):
        optimizer_config("Sophia", lr=1e-3).build(model_parts=[tiny_model()])


def test_torchtitans_own_optimizers_still_build():
    container = optimizer_config("AdamW", lr=1e-3).build(model_parts=[tiny_model()])
    assert [type(o) for o in container] == [torch.optim.AdamW]


@pytest.mark.parametrize("size, params", [("7b", 6_738_415_616), ("13b", 13_015_864_320)])
def test_the_llama2_configs_have_meta_s_parameter_counts_and_the_papers_rules(size, params):
    from config import torchtitan_llama2 as titan

    runs = {name: getattr(titan, f"llama2_{size}_{name}")() for name in ("adamw", "adams", "lion")}
    with torch.device("meta"):
        model = runs["adams"].model_spec.model.build()
    assert sum(p.numel() for p in model.parameters()) == params
    kwargs = {name: run.optimizer.param_groups[-1].optimizer_kwargs for name, run in runs.items()}
    assert [run.optimizer.param_groups[-1].optimizer_name for run in runs.values()] == ["AdamW", "AdamS", "Lion"]
    lr = {"7b": 3e-4, "13b": 1e-4}[size]  # the paper's Section 4.2 and its appendix (13B)
    assert kwargs["adamw"] == kwargs["adams"] == dict(lr=lr, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-5)
    assert kwargs["lion"] == dict(lr=pytest.approx(0.1 * lr), betas=(0.95, 0.98), weight_decay=1.0)
    run = runs["adams"]
    tokens = run.training.global_batch_size * run.training.seq_len
    assert tokens == {"7b": 4_194_304, "13b": 32_768}[size]  # the paper's 4M tokens per step; the appendix's 2 x 8 x 2,048
    assert run.lr_scheduler.decay_type == "linear" and run.lr_scheduler.min_lr_factor == pytest.approx(0.1)
    assert run.lr_scheduler.warmup_steps == {"7b": 2000, "13b": 100}[size] and run.training.max_norm == 1.0


def test_the_readme_command_line_parses_to_our_container():
    from torchtitan.config import ConfigManager

    config = ConfigManager().parse_args(["--module", "config.torchtitan_llama2", "--config", "llama2_7b_adams",
                                         "--hf_assets_path", "somewhere", "--training.steps", "100"])
    assert isinstance(config.optimizer, OptimizersContainer.Config) and config.training.steps == 100
    assert config.optimizer.param_groups[-1].optimizer_name == "AdamS"
