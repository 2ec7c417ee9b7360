"""Small-scale reproduction on a CPU: lion on the embedded corpus (see results/README.md).

Lion with the paper's transfer rule: 0.1x AdamW's lr, 10x its weight decay, beta=(0.95, 0.98).
The paper's recipe scaled down: warmup then cosine to 0.1x lr, clip 1.0; a 0.8M-parameter GPT
(3.2M with --set n_embd=256), 16 x 128 = 2,048 byte tokens per iteration, 600 iterations (1.2M tokens).
"""

dataset = "pystdlib"
n_layer = 4
n_head = 4
n_embd = 128
block_size = 128
batch_size = 16
gradient_accumulation_steps = 1

optimizer = "lion"
learning_rate = 0.0003
min_lr = 3e-05
weight_decay = 1.0
beta1 = 0.95
beta2 = 0.98
grad_clip = 1.0
max_iters = 600
lr_decay_iters = 600
warmup_iters = 60

eval_interval = 50
eval_iters = 20  # the same 20 x 16 validation windows at every evaluation, for every run
log_interval = 10
device = "cpu"
dtype = "float32"
