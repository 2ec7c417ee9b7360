"""Run under torchrun by tests/test_fsdp.py: train.py's gradient code (step.gradients) over several micro-steps
on a model sharded by data_parallel.parallelize (FSDP2). After every micro-step each rank holds only its shard of
every gradient (reduce-scattered at once, as torchtitan does), never a whole unsharded one; and the accumulated,
reduced gradients equal those of one process that sees every rank's micro-batches.
"""

import torch
import torch.distributed as dist

import data_parallel
import step
from model import GPT, GPTConfig

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
here = data_parallel.Dist(rank, rank, world, torch.device("cpu"))
config = GPTConfig(block_size=16, vocab_size=64, n_layer=2, n_head=2, n_embd=16, bias=False)
MICRO_STEPS = 3  # per rank
batches = [torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(k)) for k in range(MICRO_STEPS * world)]

torch.manual_seed(0)
reference = GPT(config)
torch.manual_seed(0)
model = GPT(config)
sharded, autocast = data_parallel.parallelize(model, model.blocks, here, torch.float32, fsdp=True, compile=False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # unscale_ needs one; an lr of 0 changes nothing
scaler = torch.amp.GradScaler("cpu", enabled=False)
params = list(model.parameters())

seen = []


def micro_batches():
    for micro in range(MICRO_STEPS):
        if micro:  # what the previous micro-step's backward left on this rank
            seen.append([p.grad.to_local().numel() if p.grad is not None else 0 for p in params])
        x = batches[micro * world + rank]
        yield x[:, :-1], x[:, 1:]


step.gradients(sharded, micro_batches(), MICRO_STEPS, autocast, scaler, optimizer, params, grad_clip=0.0)
for counts in seen:
    for p, n in zip(params, counts):
        shard = -(-p.numel() // world)
        assert 0 < n <= shard, f"after a micro-step a rank held {n} of a gradient's {p.numel()} elements (its shard: {shard})"

# one process, every rank's micro-batches in turn, the same mean
for x in batches:
    _, loss = reference(x[:, :-1], x[:, 1:])
    (loss / (MICRO_STEPS * world)).backward()
for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    torch.testing.assert_close(p.grad.full_tensor(), q.grad, rtol=1e-5, atol=1e-6, msg=name)
if rank == 0:
    print(f"fsdp accumulation: sharded gradients after each of {MICRO_STEPS} micro-steps, equal to one process's", flush=True)
dist.destroy_process_group()
data_parallel.exit_process(0)
