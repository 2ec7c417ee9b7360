"""GPT-2 Small (124M) on OpenWebText with Adagrad (an appendix baseline: AdamW's lr and schedule), 100K
iterations.

    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_small_adagrad.py
"""

from config.recipes import gpt2_paper

globals().update(gpt2_paper("small", "adagrad"))
