"""GPT-2 Medium (355M) on OpenWebText with AdamW (the baseline), 100K iterations.

    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_medium_adamw.py
"""

from config.recipes import gpt2_paper

globals().update(gpt2_paper("medium", "adamw"))
