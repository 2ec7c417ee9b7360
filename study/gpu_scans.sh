#!/usr/bin/env bash
# The study's learning-rate scans of GPT-2 Small on one GPU (study/report/gpu.md), in stages, each meant to fit
# one 10-minute call on a lent GPU machine. Run from the repository root, with the project installed:
#
#   bash study/gpu_scans.sh lr                 # GPT-2 Small lr bracket, AdamW and AdamS
#   bash study/gpu_scans.sh rbar               # R-bar along an AdamW 6e-4 run of the lr stage's kind
#
# The lr stage trains GPT-2 Small for 600 steps of 32 x 1,024 tokens (19.7M tokens, about one pass)
# on PyTorch's own Python source in GPT-2 tokens (the GPU machine has no network, so no OpenWebText),
# one run per optimizer:lr point in LR_POINTS (the scan's seed-1 points if unset), finished points skipped,
# and after each run packs every run's metrics into $OUT/$LR_OUT.tar.gz (LR_OUT: lr_small if unset). GPT-2's BPE files must be
# reachable: TIKTOKEN_CACHE_DIR (e.g. a copy of ../shared/tiktoken_cache carried along). Other settings:
#   LR_OUT=lr_emb LR_POINTS="adams:1.5e-4" LR_EXTRA="--grid embedding_lr_scale=2,4" bash study/gpu_scans.sh lr
# LR_CORPUS=site tokenizes every Python file in the site-packages folder that holds torch instead of
# torch's alone (87.5M training tokens on the CPU venv, 134.5M on the GPU image, against 20M), into data/sitesrc_gpt2,
# for runs that would otherwise see torch's 20M tokens many times (the 491,520-token batch):
#   LR_CORPUS=site LR_OUT=lr_200_491k LR_EXTRA="--set gradient_accumulation_steps=15 --set max_iters=200 --set lr_decay_iters=200 --set warmup_iters=20 --set eval_interval=50" bash study/gpu_scans.sh lr
# (the plan for the next GPU session, with why: study/report/gpu.md, "Next on a GPU")
# The rbar stage trains AdamW at 6e-4 as the lr stage would (on LR_CORPUS, without LR_EXTRA), keeping a
# checkpoint every 100 steps, then runs study/noise_scale.py on them: $OUT/rbar/ (R-bar per checkpoint).
#
# Each stage writes its archive or table into $OUT (default out/gpu; OUT=study/results/gpu replaces the committed ones).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-out/gpu}
# the lr stage's optimizer:lr points, seed 1 of the scan in study/report/gpu.md, the two optima first
# LR_EXTRA: more sweep arguments (a later --set wins), LR_OUT: their runs' folder under out/ and tarball's name
LR_EXTRA=${LR_EXTRA:-}
LR_OUT=${LR_OUT:-lr_small}
LR_CORPUS=${LR_CORPUS:-torch}
LR_POINTS=${LR_POINTS:-adamw:6e-4 adams:1.5e-4 adams:6e-4 adamw:3e-4 adamw:1.2e-3 adams:1e-4 adams:2e-4 adams:3e-4 adamw:1.5e-4 adamw:2.4e-3 adams:5e-5}
[ $# -gt 0 ] || { echo "usage: bash study/gpu_scans.sh STAGE... (stages: lr rbar)" >&2; exit 2; }
[[ $LR_CORPUS == torch || $LR_CORPUS == site ]] ||
  { echo "LR_CORPUS='$LR_CORPUS': use torch (torch's own source) or site (all of site-packages)" >&2; exit 2; }
for stage in "$@"; do
  case $stage in
    rbar) ;;
    lr)
      for point in $LR_POINTS; do
        [[ $point == ?*:?* && -f config/train_gpt2_small_${point%%:*}.py ]] ||
          { echo "LR_POINTS entry '$point': write OPTIMIZER:LR with a config/train_gpt2_small_OPTIMIZER.py, e.g. adams:1.5e-4" >&2; exit 2; }
      done ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown stage '$stage': use lr or rbar (the product's GPU checks are scripts/gpu_checks.sh)" >&2; exit 2 ;;
  esac
done
$PY -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU visible to torch: run this on a GPU machine')"
$PY -c "import torch; print('torch', torch.__version__, 'on', torch.cuda.get_device_name())"
mkdir -p "$OUT"

corpus() {  # prepare the lr and rbar stages' corpus once (LR_CORPUS); print its dataset name
  local src  # (errexit does not reach into $(...), so each step's failure is returned by hand)
  src=$($PY -c "import os, torch; print(os.path.dirname(torch.__file__))") || return
  [ "$LR_CORPUS" = torch ] || src=$(dirname "$src")
  [ -f "data/${LR_CORPUS}src_gpt2/val.bin" ] ||
    $PY -m data.pystdlib.prepare --stdlib "$src" --tokenizer tiktoken:gpt2 --out "data/${LR_CORPUS}src_gpt2" >&2 || return
  echo "${LR_CORPUS}src_gpt2"
}

small_run() {  # OPTIMIZER OUT_DIR SWEEP_ARGS...: GPT-2 Small, 600 steps of 32 x 1,024 tokens (a later --set wins)
  local opt=$1 out=$2
  shift 2
  # bias=True: the committed scans (study/results/gpu) ran before the paper configs took the authors' bias=False
  $PY -m scripts.sweep "config/train_gpt2_small_$opt.py" --set bias=True \
    --set dataset="$dataset" --set batch_size=32 --set gradient_accumulation_steps=1 --set dtype=bfloat16 \
    --set max_iters=600 --set lr_decay_iters=600 --set warmup_iters=60 --set min_lr=0.1*learning_rate \
    --set eval_interval=150 --set eval_iters=20 --set always_save_checkpoint=False "$@" --out "$out"
}

for stage in "$@"; do
  echo "== $stage ($(date -u +%H:%M:%S))"
  case $stage in
    rbar)
      dataset=$(corpus)
      small_run adamw out/rbar --grid learning_rate=6e-4 --seeds 1 \
        --set eval_interval=100 --set always_save_checkpoint=True --set keep_checkpoints=6
      mkdir -p "$OUT/rbar"
      $PY -m study.noise_scale out/rbar/learning_rate=6e-4_seed=1 --device cuda --batch_tokens 32768 491520 \
        --out "$OUT/rbar/noise_scale" 2>&1 | tee "$OUT/rbar/noise_scale.txt"
      tar -czf "$OUT/rbar/run.tar.gz" -C out --exclude checkpoints rbar ;;
    lr)
      dataset=$(corpus)
      for point in $LR_POINTS; do
        small_run "${point%%:*}" "out/$LR_OUT/${point%%:*}" --grid "learning_rate=${point#*:}" --seeds ${LR_SEEDS:-1} $LR_EXTRA
        rm -rf "out/$LR_OUT"/*/*/checkpoints
        tar -czf "$OUT/$LR_OUT.tar.gz" -C out "$LR_OUT"
      done ;;
  esac
done
