"""GPT-2 Small (124M) on OpenWebText with AdamW (the baseline), 300K iterations.

    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_small_adamw_300k.py
"""

from config.recipes import gpt2_paper

globals().update(gpt2_paper("small", "adamw", iters=300_000))
