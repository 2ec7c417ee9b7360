"""GPT-2 Large (774M) on OpenWebText with Lion (the paper's rule: 0.1x lr, 10x weight decay, beta
(0.95, 0.98)), 100K iterations.

    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_large_lion.py
"""

from config.recipes import gpt2_paper

globals().update(gpt2_paper("large", "lion"))
