"""The paper's experiments in config/ match the paper's numbers (Section 4.1, Appendix C).

The table below is typed from the paper, not derived from the config files.
"""

import json
from pathlib import Path

import pytest

import configurator

REPO = Path(__file__).resolve().parents[1]

# GPT-2 sizes (OpenAI 2019) and the paper's peak AdamW learning rates
SIZES = {"small": (12, 12, 768, 6e-4), "medium": (24, 16, 1024, 3e-4), "large": (36, 20, 1280, 3e-4)}
# optimizer: (lr multiplier over AdamW's, weight decay, betas); Lion's 0.1x lr / 10x wd rule;
# Adagrad and RMSprop: AdamW's lr and schedule, "other hyperparameters as default" (wd 0)
OPTIMIZERS = {"adamw": (1, 0.1, (0.9, 0.95)), "adams": (1, 0.1, (0.9, 0.95)), "adam_mini": (1, 0.1, (0.9, 0.95)),
              "lion": (0.1, 1.0, (0.95, 0.98)), "adagrad": (1, 0.0, None), "rmsprop": (1, 0.0, None)}
EXPERIMENTS = ([(size, opt, 100_000) for size in SIZES for opt in ("adamw", "adams", "lion", "adam_mini")]
               + [("small", opt, 300_000) for opt in ("adamw", "adams", "lion")]
               + [("small", opt, 100_000) for opt in ("adagrad", "rmsprop")])


def config_path(size, opt, iters):
    return REPO / "config" / f"train_gpt2_{size}_{opt}{'' if iters == 100_000 else '_300k'}.py"


@pytest.mark.parametrize("size, opt, iters", EXPERIMENTS)
def test_paper_config(size, opt, iters):
    cfg = configurator.load([str(config_path(size, opt, iters))])
    configurator.check(cfg, world_size=8)
    n_layer, n_head, n_embd, adamw_lr = SIZES[size]
    lr_mult, wd, betas = OPTIMIZERS[opt]
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.bias) == (n_layer, n_head, n_embd, 1024, True)
    assert cfg.optimizer == opt
    assert cfg.learning_rate == pytest.approx(lr_mult * adamw_lr)
    assert cfg.min_lr == pytest.approx(0.1 * cfg.learning_rate)  # cosine to 0.1x lr
    assert cfg.weight_decay == wd
    if betas:
        assert (cfg.beta1, cfg.beta2) == betas
    assert cfg.batch_size * cfg.gradient_accumulation_steps == 480  # sequences per iteration
    assert cfg.gradient_accumulation_steps % 8 == 0  # divisible over 8 GPUs
    assert (cfg.warmup_iters, cfg.grad_clip, cfg.dtype, cfg.dataset) == (2000, 1.0, "float16", "openwebtext")
    assert cfg.max_iters == cfg.lr_decay_iters == iters


def test_every_config_file_is_in_the_table_or_a_cpu_reproduction():
    listed = {config_path(*e).name for e in EXPERIMENTS}
    listed |= {f"train_llama2_{size}_{opt}.py" for size in LLAMA2 for opt in LLAMA2_OPTIMIZERS}
    assert {p.name for p in (REPO / "config").glob("train_*.py")} == listed
    others = {"__init__.py", "recipes.py", "torchtitan_llama2.py"}  # the last: torchtitan's configs, not train.py's
    assert {p.name for p in (REPO / "config").glob("*.py")} - listed == others
    for path in (REPO / "config" / "repro").glob("*.py"):
        configurator.check(configurator.load([str(path)]))


@pytest.mark.parametrize("optimizer", ["adamw", "adams", "lion", "adam_mini", "adagrad", "rmsprop"])
def test_repro_configs_still_give_the_committed_runs(optimizer):
    # results/runs/optimizers holds the runs these files made (sweep.py added seed and out_dir):
    # every setting must be what it was then, or the commands in results/README.md reproduce nothing
    run = REPO / "results" / "runs" / "optimizers" / f"config=cpu_{optimizer}_seed=1"
    then = json.loads((run / "config.json").read_text())["config"]
    now = configurator.as_dict(configurator.load([str(REPO / "config" / "repro" / f"cpu_{optimizer}.py"),
                                                  "--seed=1", f"--out_dir={then['out_dir']}", "--init_from=auto"]))
    removed = {"nonfinite_policy"}  # settings that no longer exist
    assert {k: v for k, v in then.items() if k not in removed} == {k: v for k, v in now.items() if k in then}
    defaults = configurator.as_dict(configurator.TrainConfig())
    assert all(now[k] == defaults[k] for k in set(now) - set(then))  # settings added since, at their defaults


# Llama 2 (Touvron et al., 2023) and the AdamS paper's runs, typed from the papers:
# n_layer, n_head, n_embd, context, sequences per step, steps, warmup
LLAMA2 = {"7b": (32, 32, 4096, 4096, 1024, 8000, 2000), "13b": (40, 40, 5120, 2048, 16, 30000, 100)}
LLAMA2_OPTIMIZERS = ("adamw", "adams", "adam_mini", "lion")


@pytest.mark.parametrize("size", LLAMA2)
@pytest.mark.parametrize("opt", LLAMA2_OPTIMIZERS)
def test_llama2_config(size, opt):
    path = REPO / "config" / f"train_llama2_{size}_{opt}.py"
    cfg = configurator.load([str(path)])
    configurator.check(cfg, world_size=8)
    n_layer, n_head, n_embd, context, sequences, steps, warmup = LLAMA2[size]
    lr_mult, wd, betas = OPTIMIZERS[opt]
    assert (cfg.model, cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size) == ("llama", n_layer, n_head, n_embd, context)
    assert cfg.batch_size * cfg.gradient_accumulation_steps == sequences  # accumulation counts all 8 GPUs' micro-steps
    assert cfg.gradient_accumulation_steps % 8 == 0
    assert cfg.learning_rate == pytest.approx(lr_mult * 3e-4) and cfg.min_lr == pytest.approx(0.1 * cfg.learning_rate)
    assert (cfg.weight_decay, (cfg.beta1, cfg.beta2)) == (wd, betas)
    assert (cfg.max_iters, cfg.lr_decay_iters, cfg.warmup_iters, cfg.decay_shape) == (steps, steps, warmup, "linear")
    assert (cfg.grad_clip, cfg.dtype, cfg.fsdp, cfg.activation_checkpointing) == (1.0, "bfloat16", True, True)
    if opt != "lion":
        assert cfg.eps == 1e-5
    from config.recipes import llama2_memory_gib

    assert f"{llama2_memory_gib(size, opt)['total']:.0f} GiB of 80" in path.read_text()  # the docstring's estimate
