"""GPT-2 Medium (355M) on OpenWebText with Adam-mini (AdamW's hyperparameters): an addition, the paper ran
GPT-2 with AdamW, AdamS and Lion only. 100K iterations.

    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_medium_adam_mini.py
"""

from config.recipes import gpt2_paper

globals().update(gpt2_paper("medium", "adam_mini"))
