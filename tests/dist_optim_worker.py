"""Run under torchrun by tests/test_fsdp.py: each optimizer on row-sharded DTensors vs unsharded.

Shapes are chosen so shards split unevenly and cut through attention heads and Q|K|V blocks.
Exits non-zero (an AssertionError) if any sharded result differs from the unsharded one.
"""


import torch
import torch.distributed as dist
from adams_optim import AdamMini, AdamS, Lion
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import data_parallel

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
# C = 6, 3 heads of 2 rows: c_attn's 18 rows are Q 0-5, K 6-11, V 12-17, and on 2 ranks the shard
# boundary at row 9 cuts K's second head (rows 8-9) in half; 37 and 33 rows split unevenly.
N_HEAD = 3
SHAPES = {"transformer.wte.weight": (37, 6), "transformer.wpe.weight": (11, 6), "transformer.h.0.ln_1.weight": (6,),
          "transformer.h.0.attn.c_attn.weight": (18, 6), "transformer.h.0.attn.c_attn.bias": (18,),
          "transformer.h.0.attn.c_proj.weight": (6, 6), "transformer.h.0.mlp.c_fc.weight": (33, 6)}
MAKERS = {
    "adams": lambda named: AdamS([p for _, p in named], lr=1e-2, weight_decay=0.1),
    "lion": lambda named: Lion([p for _, p in named], lr=1e-3, weight_decay=0.5),
    "adam_mini": lambda named: AdamMini(named, lr=1e-2, weight_decay=0.1, n_head=N_HEAD),
}
for name, make in MAKERS.items():
    gen = torch.Generator().manual_seed(0)
    full = {n: torch.randn(s, generator=gen) for n, s in SHAPES.items()}
    grads = [{n: torch.randn(s, generator=gen) for n, s in SHAPES.items()} for _ in range(3)]
    plain = [(n, torch.nn.Parameter(t.clone())) for n, t in full.items()]
    sharded = [(n, torch.nn.Parameter(distribute_tensor(t.clone(), mesh, [Shard(0)]))) for n, t in full.items()]
    opt_plain, opt_sharded = make(plain), make(sharded)
    for step_grads in grads:
        for (n, p), (_, q) in zip(plain, sharded):
            p.grad = step_grads[n].clone()
            q.grad = distribute_tensor(step_grads[n].clone(), mesh, [Shard(0)])
        opt_plain.step()
        opt_sharded.step()
    for (n, p), (_, q) in zip(plain, sharded):
        torch.testing.assert_close(q.full_tensor(), p.detach(), rtol=1e-6, atol=1e-7, msg=f"{name} {n}")
    if dist.get_rank() == 0:
        print(f"{name}: sharded == unsharded over {len(grads)} steps", flush=True)
dist.destroy_process_group()
data_parallel.exit_process(0)  # not Python's shutdown: see its docstring
