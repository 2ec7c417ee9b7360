"""Adagrad (an appendix baseline: AdamW's lr and schedule) on the embedded corpus: the paper's recipe
at CPU scale.

    python train.py config/repro/cpu_adagrad.py                  # 0.82M parameters
    python train.py config/repro/cpu_adagrad.py --n_embd=256     # 3.2M
"""

from config.recipes import cpu_repro

globals().update(cpu_repro("adagrad"))
eps = 1e-8  # the committed CPU runs (study/results/runs/optimizers) took the shared default; the paper's configs take torch's 1e-10
