#!/usr/bin/env bash
# The GPU measurements results/gpu/README.md reports (issues #16 and #117), in stages, each meant to
# fit one 10-minute call on a lent GPU machine. Run from the repository root, with a Python that has
# torch and Triton (no install needed: the scripts import the repo's modules from its root):
#
#   bash scripts/gpu_checks.sh tests optim        # CUDA tests; optimizer step fp32 Small-XL, bf16 Small-Medium
#   bash scripts/gpu_checks.sh grpo train memory  # GRPO smoke run (tiny Qwen2, CUDA); tokens/s and MFU; Table 1 at Small and XL
#   bash scripts/gpu_checks.sh tune               # the Triton kernel's block size and elements per thread, fp32 and bf16
#
# The study's GPU learning-rate scans (the lr and rbar stages) are study/gpu_scans.sh.
# Each stage writes its JSON or log into $OUT (default out/gpu; OUT=results/gpu replaces the committed ones), named as
# the README cites them.
# The tests stage needs pytest and hypothesis; where the GPU machine lacks them, carry their wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-out/gpu}  # the committed figures ran with OUT=results/gpu: results/ is written only when asked
[ $# -gt 0 ] || { echo "usage: bash scripts/gpu_checks.sh STAGE... (stages: tests grpo optim tune train memory)" >&2; exit 2; }
for stage in "$@"; do
  case $stage in
    tests|grpo|optim|tune|train|memory) ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown stage '$stage': use tests, grpo, optim, tune, train or memory" >&2; exit 2 ;;
  esac
done
$PY -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU visible to torch: run this on a GPU machine')"
$PY -c "import torch; print('torch', torch.__version__, 'on', torch.cuda.get_device_name())"
mkdir -p "$OUT"

for stage in "$@"; do
  echo "== $stage ($(date -u +%H:%M:%S))"
  case $stage in
    tests)
      $PY -m pytest -q -rs tests/test_cuda.py 2>&1 | tee "$OUT/test_cuda.txt" ;;
    grpo)  # the TinyZero preset end to end on a tiny Qwen2 built from a config; on CUDA where the test finds one
      $PY -m pytest -q -rs tests/test_countdown.py -k tinyzero 2>&1 | tee "$OUT/grpo_smoke.txt" ;;
    optim)
      $PY -m scripts.bench_optim --sizes small medium large xl --only "adams fused" "lion fused" \
        --json "$OUT/bench_optim_triton_float32.json"
      $PY -m scripts.bench_optim --sizes small medium --dtype bfloat16 --only "adams fused" "lion fused" \
        --json "$OUT/bench_optim_triton_bfloat16.json" ;;
    tune)
      $PY -m scripts.tune_triton --json "$OUT/tune_triton.json" ;;
    train)
      $PY -m scripts.bench_train --iters 40 --json "$OUT/train_throughput.json" ;;
    memory)
      $PY -m scripts.bench_memory --sizes small xl --json "$OUT/table1_1gpu.json" ;;  # the paper's Table 1, one GPU
  esac
done
