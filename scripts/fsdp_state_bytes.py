"""Parameter and optimizer-state bytes per rank under FSDP2, AdamW against AdamS (and the others), measured.

    torchrun --standalone --nproc_per_node=2 -m scripts.fsdp_state_bytes --size small
    torchrun --standalone --nproc_per_node=8 -m scripts.fsdp_state_bytes --size xl --device cuda
    torchrun --standalone --nproc_per_node=8 -m scripts.fsdp_state_bytes --size 7b --device meta   # Llama 2, no memory
    python -m scripts.fsdp_state_bytes --size tiny                                                 # one process: one shard

Builds GPT-2 (or Llama 2, for --size 7b / 13b) at ``--size``, shards it with fully_shard as
train.py does, gives every parameter a gradient, takes one step with each optimizer, and counts
the bytes of each rank's local shards of the parameters and of the optimizer state (scalar step
counters left out). ``--device meta`` does all of it on meta tensors: shapes and dtypes without
memory, so 8 ranks of a 13B model fit on a laptop; Adam-mini, whose step exchanges real row
statistics between ranks, cannot run there and is left out. Prints a table; --json writes it.
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.distributed as dist
from adams_optim import build_optimizer
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import cli
import data_parallel
from errors import UserError
from model import GPT, SIZES, GPTConfig
from model_llama import SIZES as LLAMA_SIZES
from model_llama import Llama, LlamaConfig
from scripts import write_json


def local_state_bytes(optimizer) -> int:
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                t = value.to_local() if isinstance(value, DTensor) else value
                total += t.numel() * t.element_size()
    return total


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="small", choices=list(SIZES) + list(LLAMA_SIZES) + ["tiny"])
    parser.add_argument("--optimizers", nargs="+", type=cli.choice("adamw", "adams", "lion", "adam_mini"), default=["adamw", "adams", "lion", "adam_mini"])
    parser.add_argument("--device", choices=("cpu", "cuda", "meta"), default="cpu")
    parser.add_argument("--json", type=cli.place)
    args = parser.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda but no CUDA GPU is visible; pass --device cpu or meta")
    backend = "nccl" if args.device == "cuda" else "gloo"
    if "RANK" in os.environ:  # launched by torchrun
        dist.init_process_group(backend)
    else:  # one process: a group of one (every tensor whole), so the command also runs without torchrun
        with tempfile.NamedTemporaryFile(prefix="fsdp_state_bytes_") as f:
            dist.init_process_group(backend, init_method=f"file://{f.name}", rank=0, world_size=1)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(args.device, rank % torch.cuda.device_count()) if args.device == "cuda" else torch.device(args.device)
    mesh = init_device_mesh("cuda" if args.device == "cuda" else "cpu", (world,))
    if args.device == "meta":
        args.optimizers = [o for o in args.optimizers if o != "adam_mini"]
    rows = []
    for name in args.optimizers:
        torch.manual_seed(0)
        with torch.device(device):
            if args.size in LLAMA_SIZES:
                model = Llama(LlamaConfig(**LLAMA_SIZES[args.size]))  # Llama 2's 32,000-token vocabulary
            else:
                dims = dict(n_layer=2, n_head=2, n_embd=64) if args.size == "tiny" else SIZES[args.size]
                model = GPT(GPTConfig(vocab_size=50304, **dims))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        n_local = sum(p.to_local().numel() for p in model.parameters())
        optimizer = build_optimizer(name, model, implementation="foreach" if name != "adam_mini" else "auto",
                                    lr=1e-4, weight_decay=0.1)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        mine = torch.tensor([local_state_bytes(optimizer), n_local], dtype=torch.float64)
        gathered = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        per_rank = [int(g[0]) for g in gathered]
        rows.append(dict(optimizer=name, state_bytes_per_rank=per_rank, params_per_rank=[int(g[1]) for g in gathered]))
        del model, optimizer
    if rank == 0:
        arch = "Llama 2" if args.size in LLAMA_SIZES else "GPT-2"
        print(f"{arch} {args.size}, FSDP2 over {world} ranks ({args.device}): fp32 parameters "
              f"{rows[0]['params_per_rank'][0] * 4 / 2**30:.2f} GiB and optimizer state on each rank")
        base = rows[0]["state_bytes_per_rank"][0] if rows[0]["optimizer"] == "adamw" else None
        for r in rows:
            ratio = f" ({r['state_bytes_per_rank'][0] / base:.3f}x adamw)" if base else ""
            print(f"  {r['optimizer']:10} {', '.join(f'{b / 2**20:.1f} MiB' for b in sorted(set(r['state_bytes_per_rank'])))}"
                  f"{ratio}")
        if args.json:
            write_json(args.json, dict(size=args.size, world_size=world, device=args.device, rows=rows))
    dist.destroy_process_group()
    return rows


if __name__ == "__main__":
    data_parallel.exit_process(cli.main(main))
