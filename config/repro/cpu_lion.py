"""Lion (the paper's rule: 0.1x lr, 10x weight decay, beta (0.95, 0.98)) on the embedded corpus: the
paper's recipe at CPU scale.

    python train.py config/repro/cpu_lion.py                  # 0.82M parameters
    python train.py config/repro/cpu_lion.py --n_embd=256     # 3.2M
"""

from config.recipes import cpu_repro

globals().update(cpu_repro("lion"))
