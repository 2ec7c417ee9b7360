#!/usr/bin/env bash
# The GPU measurements the README's "On one H100" section reports (issue #16), in stages, each meant to
# fit one 10-minute call on a lent GPU machine. Run from the repository root, with a Python that has
# torch and Triton (no install needed: the scripts import the repo's modules from its root):
#
#   bash scripts/gpu_checks.sh tests optim        # CUDA tests; optimizer step fp32 Small-XL, bf16 Small-Medium
#   bash scripts/gpu_checks.sh train memory       # train.py tokens/s and MFU; memory and max micro-batch, Large and XL
#
# Each stage writes its JSON or log into $OUT (default results/gpu), named as the README cites them.
# The tests stage needs pytest and hypothesis; where the GPU machine lacks them, carry their wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-results/gpu}
[ $# -gt 0 ] || { echo "usage: bash scripts/gpu_checks.sh STAGE... (stages: tests optim train memory)" >&2; exit 2; }
for stage in "$@"; do
  case $stage in
    tests|optim|train|memory) ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown stage '$stage': use tests, optim, train or memory" >&2; exit 2 ;;
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
    optim)
      $PY -m scripts.bench_optim --sizes small medium large xl --only "adams fused" "lion fused" \
        --json "$OUT/bench_optim_triton_float32.json"
      $PY -m scripts.bench_optim --sizes small medium --dtype bfloat16 --only "adams fused" "lion fused" \
        --json "$OUT/bench_optim_triton_bfloat16.json" ;;
    train)
      $PY -m scripts.bench_train --iters 40 --json "$OUT/train_throughput.json" ;;
    memory)
      $PY -m scripts.bench_memory --sizes large xl --json "$OUT/memory_large_xl.json" ;;
  esac
done
