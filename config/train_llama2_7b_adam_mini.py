"""Llama 2 7B on C4 with Adam-mini (AdamW's hyperparameters): the AdamS paper's Section 4.2, Figure 1.

4 sequences per GPU x 32 micro-steps x 8 GPUs = 1,024 sequences x 4,096 tokens = 4,194,304 tokens per step;
8,000 steps. Memory per GPU, planned on 8 H100s (results/plans): 26 GiB of 80.

    torchrun --standalone --nproc_per_node=8 train.py config/train_llama2_7b_adam_mini.py
"""

from config.recipes import llama2_paper

globals().update(llama2_paper("7b", "adam_mini"))
