"""The starting policy for GRPO on Countdown (the paper's Figure 5, at CPU scale): a 0.82M-parameter
GPT warmed up with AdamW on solved problems, bytes as tokens.

    python -m data.countdown.prepare && python train.py config/repro/countdown_sft.py
    python export.py out/countdown_sft out/countdown_sft/hf      # what scripts/grpo.py starts from
"""

from config.recipes import cpu_repro

globals().update(cpu_repro("adamw"))
out_dir = "out/countdown_sft"
dataset = "countdown"
max_iters = lr_decay_iters = 3000  # copying the numbers into the answer is learned after ~2,000
warmup_iters = 100
eval_interval = 500
