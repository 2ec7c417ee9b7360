"""The memory plan (plan.py, memory_model.py): the allocator model against the caching allocator's rules worked by
hand, the recorder against tensors of known sizes, the whole plan against this repository's H100 measurement, and
``train.py --plan`` on every config (a sample in CI, all of them under -m slow)."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import configurator
import memory_model as mm
import plan
from errors import UserError

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20


# --- the allocator model, rule by rule ---------------------------------------------------------------------


def test_requests_are_rounded_to_512_bytes_and_small_ones_share_a_2_mib_segment():
    a = mm.CachingAllocator()
    blocks = [a.malloc(1), a.malloc(512), a.malloc(513)]
    assert [b.size for b in blocks] == [512, 512, 1024]
    assert a.allocated == 2048 and a.reserved == 2 * MiB  # one small segment holds all three


def test_a_large_request_below_10_mib_takes_a_20_mib_segment_and_splits_it():
    a = mm.CachingAllocator()
    first = a.malloc(3 * MiB)
    second = a.malloc(5 * MiB)  # from the rest of the same segment
    assert (first.size, second.size) == (3 * MiB, 5 * MiB)
    assert a.reserved == 20 * MiB and a.allocated == 8 * MiB


def test_a_request_of_10_mib_or_more_gets_a_segment_of_its_size_rounded_to_2_mib():
    a = mm.CachingAllocator()
    a.malloc(10 * MiB + 1)  # rounded to 10 MiB + 512 bytes; the segment is 12 MiB and the rest (> 1 MiB) split off
    assert a.reserved == 12 * MiB and a.allocated == 10 * MiB + 512


def test_a_large_remainder_of_at_most_1_mib_is_not_split_off_and_counts_as_allocated():
    a = mm.CachingAllocator()
    block = a.malloc(20 * MiB - 100 * 1024)  # a 20 MiB segment; 100 KiB would remain: it stays with the block
    assert block.size == 20 * MiB and a.allocated == 20 * MiB


def test_freed_blocks_merge_with_free_neighbours_and_serve_the_smallest_fit():
    a = mm.CachingAllocator()
    x, y, z = a.malloc(4 * MiB), a.malloc(4 * MiB), a.malloc(4 * MiB)  # one 20 MiB segment, 8 MiB left
    a.free(x)
    a.free(y)  # x and y merge into one free 8 MiB block
    w = a.malloc(6 * MiB)  # two free 8 MiB blocks: either fits, no new segment
    assert a.reserved == 20 * MiB and w.size == 6 * MiB
    a.free(w)
    a.free(z)
    assert a.allocated == 0
    a.release_cached()  # everything merged back into one free segment, which is given back
    assert a.reserved == 0


def test_out_of_memory_releases_the_cache_first_then_fails():
    a = mm.CachingAllocator(capacity=40 * MiB)
    a.free(a.malloc(30 * MiB))  # a cached 30 MiB segment
    a.malloc(36 * MiB)  # needs a 36 MiB segment: 30 + 36 > 40, so the cache is released first
    assert a.reserved == 36 * MiB
    with pytest.raises(mm.OutOfMemory):
        a.malloc(6 * MiB)  # a 20 MiB segment: 36 + 20 > 40 and nothing cached to release


# --- the recorder ------------------------------------------------------------------------------------------


def record(program):
    from torch._subclasses.fake_tensor import FakeTensorMode

    recorder = mm.Recorder()
    with FakeTensorMode(), recorder:
        program(recorder)
    return mm.replay(recorder.events)


def test_the_recorder_counts_each_storage_once_and_frees_it_when_it_dies():
    def program(recorder):
        a = torch.empty(1000)  # 4,000 bytes: a 4,096-byte block
        b = a * 2
        view = b.view(10, 100)  # shares b's storage: nothing new
        del b, view  # b's storage dies
        c = torch.empty(250)  # 1,000 bytes: 1,024
        del a, c

    out = record(program)
    assert out["peak_allocated"] == 2 * 4096
    assert out["peak_reserved"] == 2 * MiB


def test_the_recorder_follows_storages_resized_in_place():
    def program(recorder):
        t = torch.empty(1 << 20, dtype=torch.uint8)  # 1 MiB
        t.untyped_storage().resize_(0)  # how FSDP2 frees a gathered parameter
        t.untyped_storage().resize_(4 << 20)  # and how it gathers it again: 4 MiB
        del t

    out = record(program)
    assert out["peak_allocated"] == 4 * MiB


def test_marks_give_the_peak_between_them():
    def program(recorder):
        recorder.mark("one")
        a = torch.empty(1 << 18)  # 1 MiB
        del a
        recorder.mark("two")
        b = torch.empty(1 << 19)  # 2 MiB
        del b

    out = record(program)
    assert out["marks"] == {"one": MiB, "two": 2 * MiB}


def test_ddp_buckets_follow_the_reducer_defaults():
    params = [torch.empty(n) for n in (1 << 20, 1 << 18, 1 << 16, 10 << 20)]  # 4 MiB, 1 MiB, 256 KiB, 40 MiB
    # reversed: the 40 MiB parameter fills the 1 MiB first bucket alone; then 256 KiB + 1 MiB + 4 MiB (< 25 MiB)
    assert plan.ddp_buckets(params) == [40 * MiB, 256 * 1024 + MiB + 4 * MiB]


# --- the plan ----------------------------------------------------------------------------------------------


def xl(optimizer: str) -> configurator.TrainConfig:
    """results/gpu/memory_xl.json's setting: GPT-2 XL with biases, bf16 autocast, 1,024 tokens, one H100, eager."""
    return configurator.TrainConfig(n_layer=48, n_head=25, n_embd=1600, block_size=1024, bias=True, dtype="bfloat16",
                                    optimizer=optimizer, batch_size=1, dataset="openwebtext", compile=False)


@pytest.mark.parametrize("optimizer", ["adamw", "adams"])
def test_the_plan_reproduces_the_h100_measurement_of_gpt2_xl(optimizer):
    measured = {r["optimizer"]: r for r in json.loads((REPO / "results/gpu/memory_xl.json").read_text())["rows"]}[optimizer]
    out = plan.make(xl(optimizer), "h100-80gb", 1, say=lambda *a: None)
    assert out["vocab_size"] == 50304 and out["parameters"] == measured["params"]
    # bench_memory measured torch.cuda.max_memory_allocated over the first iteration at micro-batch 1
    first = out["iteration_peak_allocated_bytes"]["iteration 1"]
    assert abs(first / measured["peak_bytes"] - 1) < 0.02, (first, measured["peak_bytes"])
    # and found the largest micro-batch by two iterations at each size tried
    assert abs(out["largest_micro_batch"] - measured["max_micro_batch"]) <= 1
    assert out["fits"] and out["headroom_sequences"] == out["largest_micro_batch"] - 1


def test_an_optimizer_state_shows_in_what_a_plan_holds_between_iterations():
    # between iterations a GPU holds the weights and the optimizer's state: AdamW's two fp32 tensors a parameter
    # against AdamS's one, 4 bytes a parameter apart, to the allocator's rounding (512 bytes a tensor) and fused
    # AdamW's step count, a 0-d tensor on the device for each parameter (512 bytes each)
    small = dict(n_layer=2, n_head=2, n_embd=64, block_size=64, batch_size=2, dataset="openwebtext", max_iters=10)
    held = {}
    for name in ("adamw", "adams"):
        sim = plan.simulate(configurator.TrainConfig(optimizer=name, **small), 1, 50304)
        held[name] = mm.replay(sim.events)["marks"]["end"]
    assert 0 <= held["adamw"] - held["adams"] - 4 * sim.parameters <= 2 * 512 * sim.tensors


def test_train_py_plan_prints_the_plan_writes_its_json_and_nothing_else(tmp_path):
    out_dir = tmp_path / "run"
    result = subprocess.run([sys.executable, "train.py", "--n_layer=2", "--n_embd=64", "--n_head=2", "--block_size=64",
                             f"--out_dir={out_dir}", "--plan=a100-40gb", f"--plan_json={tmp_path / 'plan.json'}"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "fits at micro-batch 16" in result.stdout and "largest micro-batch that fits" in result.stdout
    saved = json.loads((tmp_path / "plan.json").read_text())
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "usable_bytes", "fits", "largest_micro_batch",
                "iteration_seconds"):
        assert key in saved
    assert saved["vocab_size"] == 256 and saved["usable_bytes"] == plan.KINDS["a100-40gb"].total - (1 << 30)
    assert not out_dir.exists()  # a plan trains nothing and writes no run


@pytest.mark.parametrize("args, says", [
    (["--plan=h100"], "--plan=h100: must be one of"),
    (["--plan_gpus=8"], "needs --plan=KIND"),
    (["--plan=h100-80gb", "--plan_gpus=0"], "--plan_gpus=0: must be"),
    (["--plan=h100-80gb", "--plan_gpus=3", "--gradient_accumulation_steps=4"], "not divisible by the world size 3"),
])
def test_plan_options_that_cannot_be_planned_are_one_error_line(args, says, capsys):
    import train

    assert train.cli(args) == 2  # train.py's own command line, in this process
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1, err


def test_a_run_that_cannot_fit_is_refused_naming_the_largest_micro_batch_that_does(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-40GB")
    cfg = configurator.TrainConfig(n_layer=2, n_head=2, n_embd=64, block_size=1024, batch_size=512, dataset="openwebtext",
                                   gradient_accumulation_steps=1)
    with pytest.raises(UserError, match=r"batch_size=512 cannot fit on this a100-40gb: .* the largest micro-batch that "
                                        r"fits is (\d+); --batch_size=\d+ --gradient_accumulation_steps=\d+ keeps the batch"):
        plan.refuse_if_unfit(cfg, 1, torch.device("cuda"))
    # compiled, the eager plan is only an upper bound: said, not refused
    said = plan.refuse_if_unfit(dataclasses.replace(cfg, compile=True), 1, torch.device("cuda"))
    assert "compiled it may" in said
    # a GPU the plan does not know is not checked
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA GeForce RTX 4090")
    assert plan.refuse_if_unfit(cfg, 1, torch.device("cuda")) is None


CONFIGS = sorted(p.name for p in (REPO / "config").glob("train_*.py"))
SAMPLE = ("train_gpt2_small_adamw.py", "train_llama2_7b_adams.py")  # (all of them: -m slow, about a minute)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in SAMPLE else pytest.mark.slow) for n in CONFIGS])
def test_every_config_can_be_planned_on_its_gpus(name):
    # each config as its file says, on the 8 GPUs its command names, one layer deep (the widths, vocabulary, batch,
    # precision, sharding and optimizer are the config's; depth only adds layers)
    cfg = configurator.load([f"config/{name}", "--n_layer=1"])
    out = plan.make(cfg, "h100-80gb", 8, say=lambda *a: None)
    assert out["sharding"] == ("fsdp2" if cfg.fsdp else "ddp")
    assert out["fits"] == (out["peak_reserved_bytes"] <= out["usable_bytes"]) or not out["fits"]
    assert (out["largest_micro_batch"] >= cfg.batch_size) == out["fits"]
    assert out["iteration_seconds"] > 0 and out["run_seconds"] > cfg.max_iters * out["iteration_seconds"]
    state = {"adamw": 8, "adams": 4, "lion": 4, "adam_mini": 4, "adagrad": 4, "rmsprop": 4}[cfg.optimizer]
    shards = 8 if cfg.fsdp else 1
    assert out["peak_allocated_bytes"] >= (4 + 4 + state) * out["parameters"] / shards * 0.99


@pytest.mark.parametrize("optimizer", [pytest.param(n, marks=() if n in ("adam_mini", "sgd") else pytest.mark.slow)
                                       for n in ("adamw", "adams", "lion", "adam_mini", "sgd", "adagrad", "rmsprop")])
def test_every_optimizer_can_be_planned(optimizer):
    cfg = configurator.TrainConfig(n_layer=2, n_head=2, n_embd=64, block_size=64, optimizer=optimizer, max_iters=10)
    out = plan.make(cfg, "h200-141gb", 1, say=lambda *a: None)
    assert out["fits"] and out["largest_micro_batch"] > cfg.batch_size


def test_the_front_pages_table_of_plans_is_the_one_plan_paper_writes():
    from scripts.plan_paper import front_table

    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("<!-- plans -->\n") + len("<!-- plans -->\n"):readme.index("<!-- /plans -->")]
    plans = json.loads((REPO / "results/plans/plans.json").read_text())
    assert table == front_table(plans), "rerun python -m scripts.plan_paper --out results/plans and copy its table"
