"""Llama 2 13B on C4 with AdamW: the AdamS paper's appendix
(AdamW's peak lr 1e-4 there, Adam-mini's 13B setting).

2 sequences per GPU x 1 micro-steps x 8 GPUs = 16 sequences x 2,048 tokens = 32,768 tokens per step;
30,000 steps. Memory per GPU, planned on 8 H100s (results/plans): 31 GiB of 80.

    torchrun --standalone --nproc_per_node=8 train.py config/train_llama2_13b_adamw.py
"""

from config.recipes import llama2_paper

globals().update(llama2_paper("13b", "adamw"))
