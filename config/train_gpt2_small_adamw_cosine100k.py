"""GPT-2 Small (124M) on OpenWebText with AdamW, 100K iterations,
the cosine ending at 100K: a variant of config/train_gpt2_small_adamw.py, whose cosine runs over the authors' 600K iterations
and is stopped at 100K, as the paper's runs were (config/recipes.py). For a run of fixed length this
one decays to min_lr by its end; its final loss is not comparable with the paper's numbers.

    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_small_adamw_cosine100k.py
"""

from config.recipes import gpt2_paper

globals().update(gpt2_paper("small", "adamw", decay_iters=100_000))
