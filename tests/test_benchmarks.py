"""The benchmarks (the optimizer step, training throughput, Table 1's memory, the kernels) at small scale on CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from errors import UserError
from scripts import bench_memory, bench_optim, bench_train, kernel_cycles

REPO = Path(__file__).resolve().parents[1]


def test_tune_triton_settings_are_the_warp_counts_triton_accepts():
    from scripts.tune_triton import settings

    # fp32: 8 KiB = 2,048 elements; /32 threads a warp /16 elements a thread = 4 warps (the kernel's setting)
    assert settings(torch.float32, [8192], [16]) == [(8192, 16, 4)]
    # bf16: 4,096 elements; 4 elements a thread would be 32 warps (kept), 2 would be 64 (dropped)
    assert settings(torch.bfloat16, [8192], [2, 4, 16]) == [(8192, 4, 32), (8192, 16, 8)]
    assert settings(torch.float32, [4096], [64]) == []  # 1,024 elements cannot fill a warp at 64 each


def test_tune_triton_refuses_clearly_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here; the refusal is for machines without one")
    with pytest.raises(UserError, match="needs a CUDA GPU and Triton"):
        from scripts.tune_triton import main

        main([])


def test_bench_optim_small_writes_json(tmp_path):
    result = bench_optim.main(["--small", "--repeats", "2", "--only", "adamw fused", "adams foreach", "adam_mini",
                               "--json", str(tmp_path / "b.json")])
    labels = [r["optimizer"] for r in json.loads((tmp_path / "b.json").read_text())["rows"]]
    assert labels == ["adamw fused (torch)", "adams foreach", "adam_mini"]
    assert all(r["ms"] > 0 and r["ratio_to_adamw_fused"] > 0 for r in result["rows"])
    for r in result["rows"]:  # the median of the paired ratios lies between their quartiles
        q1, q3 = r["ratio_quartiles"]
        assert q1 <= r["ratio_to_adamw_fused"] <= q3


def test_bench_optim_no_math_floor_moves_every_byte():
    # the floor case must load p, g and m and store p and m, or it is no floor: p + g and m + g exactly
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in ((70, 70), (5,))]
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(dtype)
        before = [p.detach().clone() for p in params]
        floor = bench_optim.NoMath(params)
        floor.step(), floor.step()
        for p, b, m in zip(params, before, floor.momenta):
            want_p = (b.float() + p.grad.float()).to(dtype)  # one rounding per add, as in the kernel
            torch.testing.assert_close(p.detach(), (want_p.float() + p.grad.float()).to(dtype), rtol=0, atol=0)
            torch.testing.assert_close(m, (2 * p.grad.float()).to(dtype), rtol=0, atol=0)
    rows = bench_optim.main(["--small", "--repeats", "2", "--only", "floor"])["rows"]
    assert [r["optimizer"] for r in rows] == ["adamw fused (torch)", "no-math floor (C++)"]


def test_kernel_cycles_times_each_kernel_and_refuses_a_bad_revision(capsys):
    rows = kernel_cycles.main(["--elements", "4099", "--rounds", "2", "--calls", "2", "--dtypes", "float32", "bfloat16"])
    assert {(r["dtype"], r["kernel"]) for r in rows} == {(d, k) for d in ("float32", "bfloat16")
                                                          for k in ("adams", "lion", "no-math")}
    assert all(r["ns_per_element"] > 0 and r["revision"] == "this tree" for r in rows)
    with pytest.raises(UserError, match="cannot read optim/_cpu_kernels.cpp at revision 'no-such-rev'"):
        kernel_cycles.main(["--against", "no-such-rev"])


def test_bench_memory_state_bytes_on_cpu(tmp_path):
    result = bench_memory.main(["--small", "--block-size", "32", "--global-batch", "4",
                                "--json", str(tmp_path / "m.json")])
    per_param = {r["optimizer"]: r["state_bytes_per_param"] for r in result["rows"]}
    assert per_param == {"adamw": 8.0, "adams": 4.0}  # fp32: AdamW keeps m and v, AdamS only m
    assert all(r["seconds_per_iter"] > 0 and r["accumulation"] == 4 for r in result["rows"])
    assert json.loads((tmp_path / "m.json").read_text())["rows"][0]["peak_bytes"] is None  # CPU: not measured


def test_bench_memory_on_a_cpu_says_each_stage_as_it_starts_and_ends_in_a_table(capsys):
    # fp16 with loss scaling, the paper's precision: the GradScaler path runs on a CPU too
    result = bench_memory.main(["--small", "--block-size", "16", "--precision", "fp16", "--optimizers", "adams"])
    assert (result["precision"], result["compiled"], result["global_batch"]) == ("fp16", False, 1)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "stand-in (2 x 128) x adams on 1 CPU process: fp16, eager, 1 sequence of 16 tokens an iteration"
    assert lines[1].startswith("stand-in (2 x 128), adams: one iteration of 1 sequence")
    header, row = lines[-2:]
    assert header.split() == ["size", "optimizer", "state", "GB", "B/param", "peak", "GB", "max", "micro", "s/iter"]
    assert row.startswith("stand-in (2 x 128)  adams ") and row.split()[-4:-1] == ["4.0", "-", "-"]
    assert len(header) == len(row)  # aligned: every column right-justified to the widest cell
    with pytest.raises(UserError, match="--small measures one 2-layer stand-in"):
        bench_memory.main(["--small", "--sizes", "xl"])


def test_bench_memory_prints_its_first_line_before_the_first_iteration():
    # GPT-2 Small on a CPU takes ~10 s an iteration here: the first line must come well before one ends
    proc = subprocess.Popen([sys.executable, "-m", "scripts.bench_memory", "--device", "cpu"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        first = proc.stdout.readline()
        second = proc.stdout.readline()
    finally:
        proc.kill()
        proc.wait()
    assert first.startswith("small x adamw, adams on 1 CPU process: fp32, eager, 1 sequence of 1024 tokens")
    assert second.startswith("small, adamw: one iteration of 1 sequence") and proc.returncode != 0  # still running


def test_bench_memory_splits_a_global_batch_into_micro_batches_of_the_largest_size():
    assert bench_memory.micro_batches(60, 16) == [16, 16, 16, 12]  # 480 sequences over 8 GPUs, micro-batch 16
    assert bench_memory.micro_batches(60, 60) == [60] and bench_memory.micro_batches(3, 1) == [1, 1, 1]


def test_bench_memory_under_torchrun_gives_each_rank_its_share_of_the_batch(tmp_path):
    # the paper's Table 1 runs DDP over 8 GPUs; here 2 CPU processes (gloo) share 4 sequences, 2 each
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "-m", "scripts.bench_memory", "--small", "--block-size", "32",
                             "--global-batch", "4", "--device", "cpu", "--json", str(tmp_path / "t.json")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    table = json.loads((tmp_path / "t.json").read_text())
    assert table["world_size"] == 2 and table["command"].startswith("torchrun --nproc_per_node=2 -m scripts.bench_memory")
    assert {r["optimizer"]: (r["accumulation"], r["state_bytes_per_param"]) for r in table["rows"]} == \
        {"adamw": (2, 8.0), "adams": (2, 4.0)}
    assert bench_memory.main(["--small", "--block-size", "32", "--global-batch", "4"])["world_size"] == 1


def test_bench_train_runs_train_py_and_reads_its_metrics(tmp_path):
    rows = bench_train.main(["--iters", "6", "--batch-size", "2", "--set", "n_layer=1", "--set", "n_head=2",
                             "--set", "n_embd=32", "--set", "block_size=32", "--set", "compile=False",
                             "--set", "device=cpu", "--json", str(tmp_path / "t.json")])
    assert [r["optimizer"] for r in rows] == ["adamw", "adams"]
    assert all(r["tokens_per_s"] > 0 and r["mfu"] is None for r in rows)  # no peak FLOPs known for a CPU
    assert rows[1]["config"]["config"]["optimizer"] == "adams"
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["torch"] == torch.__version__ and saved["device"] and saved["rows"] == rows
    assert saved["command"].startswith("python -m scripts.bench_train --iters 6 --batch-size 2")


def test_cuda_step_host_time_takes_the_triton_branch():
    # scripts/cuda_step_host_time.py stubs Triton to time the CUDA step's CPU work; it asserts that
    # each step launched the (stubbed) kernel once, so a refactor that bypasses the branch fails here.
    repo = REPO
    result = subprocess.run([sys.executable, "-m", "scripts.cuda_step_host_time", "--repeats", "5"], cwd=repo,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split() for line in result.stdout.splitlines()[2:]]
    assert [(r[0], int(r[1])) for r in rows] == [("small", 148), ("medium", 292), ("large", 436), ("xl", 580)]
    assert all(0 < float(x) < 100 for r in rows for x in r[2:])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("stages, message", [([], "usage"), (["optim", "nonsense"], "unknown stage 'nonsense'"),
                                             (["tests", "optim"], "no CUDA GPU visible")])
def test_gpu_checks_refuses_clearly_and_writes_nothing_without_a_gpu(stages, message, tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "gpu")}
    result = subprocess.run(["bash", str(REPO / "scripts/gpu_checks.sh"), *stages], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert not (tmp_path / "gpu").exists()


def test_tune_triton_times_each_setting_and_restores_the_kernels_own(monkeypatch, tmp_path, capsys):
    """The loop around the timing, with the GPU faked: each setting reaches the kernel module while it is
    timed, the kernel's constants come back afterwards, and the JSON holds one row per setting."""
    from adams_optim import _triton_fused

    from scripts import tune_triton

    seen = []

    def fake_bench(size, small, dtype, device, repeats, only):
        seen.append((dtype, *_triton_fused.SETTINGS[dtype.itemsize]))
        yield dict(optimizer="adamw fused (torch)", ms=1.0, gbps=1.0, ratio_to_adamw_fused=1.0)
        ms = _triton_fused.SETTINGS[dtype.itemsize][0] / 8192
        yield dict(optimizer="adams fused", ms=ms, gbps=100 / ms, ratio_to_adamw_fused=ms)

    monkeypatch.setattr(tune_triton.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune_triton.torch.cuda, "get_device_name", lambda *a: "fake GPU")
    monkeypatch.setattr(tune_triton._triton_fused, "available", lambda: True)
    monkeypatch.setattr(tune_triton, "copy_bandwidth", lambda *a: 200.0)
    monkeypatch.setattr(tune_triton, "bench", fake_bench)
    before = dict(_triton_fused.SETTINGS)
    result = tune_triton.main(["--dtypes", "float32", "--block-bytes", "4096", "8192", "--elements", "8", "16",
                               "--json", str(tmp_path / "t.json")])
    assert seen == [(torch.float32, 4096, 8), (torch.float32, 4096, 16), (torch.float32, 8192, 8), (torch.float32, 8192, 16)]
    assert _triton_fused.SETTINGS == before
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert rows == result["rows"] and [r["warps"] for r in rows] == [4, 2, 8, 4]
    assert [r["pct_copy"] for r in rows] == [100.0, 100.0, 50.0, 50.0]
    assert sum(r["default"] for r in rows) == (before[4] in {(4096, 8), (4096, 16), (8192, 8), (8192, 16)})
    table = capsys.readouterr().out.splitlines()
    assert table[-4].split()[:2] == ["4096", "8"] and table[-1].split()[:2] == ["8192", "16"]  # fastest first


def test_gpu_checks_help_names_the_stages():
    result = subprocess.run(["bash", str(REPO / "scripts/gpu_checks.sh"), "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "bash scripts/gpu_checks.sh tests optim" in result.stdout, result.stderr


FAKE_NANOGPT = '''
import json, os, pickle, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
meta = pickle.load(open(os.path.join("data", args["dataset"], "meta.pkl"), "rb"))  # nanoGPT's own path join
size = os.path.getsize(os.path.join("data", args["dataset"], "train.bin"))
seen = dict(vocab=meta["vocab_size"], tokens=size // 2, cwd=os.getcwd(), **args)
open(os.path.join(os.path.dirname(__file__), "seen.json"), "w").write(json.dumps(seen))
for it in range(0, int(args["max_iters"]) + 1, int(args["log_interval"])):
    print(f"iter {it}: loss 1.0000, time {4000.0 if it == 0 else 10.0}ms, mfu 0.00%")
'''


def test_bench_nanogpt_runs_both_at_one_shape_and_reports_the_ratio(tmp_path, capsys):
    # a stand-in for a nanoGPT checkout: it reads its data as nanoGPT does and prints nanoGPT's log lines
    from scripts import bench_nanogpt

    checkout = tmp_path / "nanoGPT"
    checkout.mkdir()
    for name in ("model.py", "configurator.py"):
        (checkout / name).write_text("")
    (checkout / "train.py").write_text(FAKE_NANOGPT)
    with pytest.raises(UserError, match="is not a nanoGPT checkout \\(no train.py\\)"):
        bench_nanogpt.main(["--nanogpt", str(tmp_path)])
    result = bench_nanogpt.main(["--nanogpt", str(checkout), "--pairs", "1", "--iters", "10", "--json", str(tmp_path / "b.json")])
    pair = result["pairs"][0]
    assert result["ratio"] == pytest.approx(pair["nanoGPT"]["wall_s"] / pair["ours"]["wall_s"])
    assert result["iter_ms"]["nanoGPT"] == 10.0  # iteration 0 (warm-up, evaluation) is left out
    assert result["iter_ms"]["ours"] > 0
    assert "nanoGPT's wall time over ours" in capsys.readouterr().out
    assert json.loads((tmp_path / "b.json").read_text())["shape"]["n_layer"] == 4
    seen = json.loads((checkout / "seen.json").read_text())  # what nanoGPT was given: our corpus, the same shape
    from tokens import read_tokens

    tokens, vocab = read_tokens(REPO / "data" / "pystdlib" / "train.bin")
    assert (seen["vocab"], seen["tokens"], seen["cwd"]) == (vocab, len(tokens), str(checkout))
    assert {k: seen[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "gradient_accumulation_steps",
                                 "dtype", "device", "compile", "max_iters")} == dict(
        n_layer="4", n_head="4", n_embd="128", block_size="128", batch_size="16", gradient_accumulation_steps="1",
        dtype="float32", device="cpu", compile="False", max_iters="10")
