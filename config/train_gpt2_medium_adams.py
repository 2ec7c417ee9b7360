"""GPT-2 Medium (350M) on OpenWebText with adams, 100K iterations: the AdamS paper's setup.

AdamS with AdamW's hyperparameters unchanged, as in the paper.
Section 4.1: context 1024, 480 sequences per step, warmup 2000, cosine to 0.1x lr, clip 1.0, float16.

    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_medium_adams.py
"""

out_dir = "out/train_gpt2_medium_adams"
wandb_run_name = "train_gpt2_medium_adams"
dataset = "openwebtext"

# model: GPT-2 Medium
n_layer = 24
n_head = 16
n_embd = 1024
block_size = 1024
bias = True
dropout = 0.0

# 6 sequences per GPU x 10 micro-steps x 8 GPUs = 480 sequences = 491,520 tokens per iteration
batch_size = 6
gradient_accumulation_steps = 10 * 8  # summed over all ranks; divided by the world size at launch

optimizer = "adams"
learning_rate = 3e-4
min_lr = 3e-5  # 0.1x the peak, as in the paper (Rae et al., 2021)
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0

max_iters = 100000
lr_decay_iters = 100000
warmup_iters = 2000

eval_interval = 1000
eval_iters = 200
log_interval = 10

# The paper trained in float16 (with a GradScaler). On Ampere or Hopper GPUs bfloat16 is the
# better choice: same speed, no loss scaling, no overflow; pass --dtype=bfloat16.
dtype = "float16"
compile = True
