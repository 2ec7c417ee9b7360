"""GPT-2 Large (774M) on OpenWebText with Adam-mini (AdamW's hyperparameters): an addition, the paper ran
GPT-2 with AdamW, AdamS and Lion only. 100K iterations.

    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_large_adam_mini.py
"""

from config.recipes import gpt2_paper

globals().update(gpt2_paper("large", "adam_mini"))
