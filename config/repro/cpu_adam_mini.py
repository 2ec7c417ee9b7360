"""Adam-mini (AdamW's hyperparameters) on the embedded corpus: the paper's recipe at CPU scale.

    python train.py config/repro/cpu_adam_mini.py                  # 0.82M parameters
    python train.py config/repro/cpu_adam_mini.py --n_embd=256     # 3.2M
"""

from config.recipes import cpu_repro

globals().update(cpu_repro("adam_mini"))
