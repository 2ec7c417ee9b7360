"""GPT-2 Small (124M) on OpenWebText with adagrad, 100K iterations: the AdamS paper's setup.

Adagrad (appendix baseline): AdamW's lr and schedule, torch's defaults otherwise (no weight decay).
Section 4.1: context 1024, 480 sequences per step, warmup 2000, cosine to 0.1x lr, clip 1.0, float16.

    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_small_adagrad.py
"""

out_dir = "out/train_gpt2_small_adagrad"
wandb_run_name = "train_gpt2_small_adagrad"
dataset = "openwebtext"

# model: GPT-2 Small
n_layer = 12
n_head = 12
n_embd = 768
block_size = 1024
bias = True
dropout = 0.0

# 12 sequences per GPU x 5 micro-steps x 8 GPUs = 480 sequences = 491,520 tokens per iteration
batch_size = 12
gradient_accumulation_steps = 5 * 8  # summed over all ranks; divided by the world size at launch

optimizer = "adagrad"
learning_rate = 6e-4
min_lr = 6e-5  # 0.1x the peak, as in the paper (Rae et al., 2021)
weight_decay = 0.0
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
