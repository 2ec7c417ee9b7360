"""Config files: the paper's experiments (config/train_gpt2_*.py), their CPU-scale reproduction
(config/repro/), and the recipes they are made from (config/recipes.py)."""
