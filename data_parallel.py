"""Data parallelism: process-group setup under torchrun (NCCL on CUDA, gloo on CPU), and the one
seam where a model becomes DDP, FSDP2 or stays as it is.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist

# torch.distributed.tensor and FSDP are imported where they are used: at the top they would add
# about a third to every start, `train.py --help` and a config error included.
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


@dataclass(frozen=True)
class Dist:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif torch.backends.mps.is_available():
            name = "mps"
        else:
            name = "cpu"
    if name == "cuda" and "LOCAL_RANK" in os.environ:
        name = f"cuda:{local_rank}"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        from errors import UserError

        raise UserError(f"device='{name}' but CUDA is not available here; use --device=cpu or --device=auto")
    return device


def hardware(device: torch.device | str) -> str:
    """What a run ran on, for its config.json: the GPU's name, or the CPU's model (/proc/cpuinfo's, else
    the platform's) and the vector instructions torch's kernels use there ("AMD EPYC, AVX2"). The same
    command on two kinds of CPU can part after a few hundred steps."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    return f"{model or platform.processor() or platform.machine()}, {torch.backends.cpu.get_cpu_capability()}"


def free_memory(device: torch.device) -> tuple[int | None, str]:
    """(bytes this process can still allocate on ``device``, what sets that number): the GPU's free memory, or on
    a CPU the least of /proc/meminfo's MemAvailable and every cgroup memory limit over this process less its use
    (``cgroup_limits``); (None, why) where none could be read."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0], f"{device}'s free memory"
    if device.type != "cpu":
        return None, f"{device.type} does not say"
    found = []
    meminfo = Path("/proc/meminfo")
    try:
        line = next((x for x in meminfo.read_text().splitlines() if x.startswith("MemAvailable:")), None)
    except OSError:
        line = None
    if line:
        found.append((int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"))
    found += [(limit - used, f"the memory limit in {where}") for limit, used, where in cgroup_limits()]
    return min(found) if found else (None, "neither /proc/meminfo nor a cgroup memory limit could be read")


NO_LIMIT = 1 << 62  # cgroup v1 writes its "unlimited" as 9223372036854771712


def cgroup_limits(root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc/self/cgroup")) -> list[tuple[int, int, str]]:
    """(limit, usage, the limit's file) of every cgroup memory limit over this process, the tightest first not
    implied: cgroup v2 (memory.max and memory.current of the process's own group and of each group above it) and
    v1 (memory.limit_in_bytes and memory.usage_in_bytes of the memory controller's group and those above it). A
    container that sees its own group at the root of the mount (a cgroup namespace, or docker on a v1 host) is
    read there too. Unreadable files are left out."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        lines = []
    groups = []  # (folder of the hierarchy, the process's group path, limit file, usage file)
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            groups.append((root, path, "memory.max", "memory.current"))
        elif "memory" in controllers.split(","):
            groups.append((root / "memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes"))
    if not groups:  # no /proc/self/cgroup: look at the mount's root, both kinds
        groups = [(root, "/", "memory.max", "memory.current"), (root / "memory", "/", "memory.limit_in_bytes",
                                                                "memory.usage_in_bytes")]
    found, seen = [], set()
    for base, path, limit_name, usage_name in groups:
        parts = [p for p in path.split("/") if p]
        folders = [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
        for folder in folders:
            limit, usage = folder / limit_name, folder / usage_name
            if limit in seen:
                continue
            seen.add(limit)
            try:
                text, used = limit.read_text().strip(), int(usage.read_text())
            except (OSError, ValueError):
                continue
            if text.isdigit() and int(text) < NO_LIMIT:
                found.append((int(text), used, str(limit)))
    return found


def setup(backend: str, device: str) -> Dist:
    """Join the process group when launched by torchrun (RANK set), else run as one process."""
    if "RANK" not in os.environ:
        return Dist(0, 0, 1, resolve_device(device))
    rank, local_rank, world_size = launch()
    dev = resolve_device(device, local_rank)
    if backend == "auto":
        backend = "nccl" if dev.type == "cuda" else "gloo"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend=backend, device_id=dev if dev.type == "cuda" else None)
    return Dist(rank, local_rank, world_size, dev)


LAUNCH = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def launch() -> tuple[int, int, int]:
    """(rank, local rank, world size) of a launch, as torchrun (or another launcher) sets them; one error line
    for a launch environment that is partial or not numbers (a torchrun job's leftovers in a shell, say), and a
    line saying what the process waits for where they do not come from torchrun."""
    from errors import UserError

    missing = [k for k in LAUNCH if k not in os.environ]
    fix = ("unset " + " ".join(k for k in LAUNCH if k in os.environ) + " to run as one process, or launch with "
           "torchrun --nproc_per_node=N")
    if missing:
        raise UserError(f"RANK is set in the environment but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                        f"not: a launch's leftovers? {fix}")
    try:
        rank, local_rank, world_size = (int(os.environ[k]) for k in LAUNCH[:3])
    except ValueError:
        raise UserError(f"RANK, LOCAL_RANK and WORLD_SIZE must be numbers, got {[os.environ[k] for k in LAUNCH[:3]]}; "
                        f"{fix}") from None
    if not 0 <= rank < world_size or local_rank < 0:
        raise UserError(f"RANK={rank} does not fit WORLD_SIZE={world_size}; {fix}")
    if world_size > 1 and "TORCHELASTIC_RUN_ID" not in os.environ and rank == 0:
        print(f"note: RANK and WORLD_SIZE={world_size} come from the environment, not from torchrun: waiting for the "
              f"other ranks at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} (Ctrl-C stops; {fix})", flush=True)
    return rank, local_rank, world_size


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def exit_process(code: int) -> NoReturn:
    """End the process with ``code``; a torchrun worker skips Python's interpreter shutdown, in which a gloo
    thread still releasing a finished collective's tensors can abort a run that had finished (std::terminate,
    exit -6; destroy_process_group does not stop those threads). Its files are closed by then: it flushes its
    output and leaves."""
    if "RANK" not in os.environ:
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def all_gather_object(obj) -> list:
    """``obj`` from every rank, in rank order (a one-element list without a process group)."""
    if not dist.is_initialized():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def parallelize(model: nn.Module, blocks: nn.ModuleList, dist_: Dist, dtype: torch.dtype, fsdp: bool,
                compile: bool, mesh=None) -> tuple[nn.Module, object]:
    """The module a training step calls, and the autocast context its forward runs in.

    ``fsdp``: FSDP2 shards ``model`` in place (each of ``blocks``, then the rest) and casts the
    parameters to ``dtype`` itself. Otherwise, with several processes, DDP wraps it. One process
    uses it as it is. ``compile`` puts torch.compile inside DDP. ``mesh``: the device mesh FSDP shards over
    (default: one over every rank; plan.py passes its own, made outside its fake tensors). Build the optimizer from
    ``model`` itself, not from what this returns: after FSDP its parameters are the shards.
    """
    autocast = nullcontext() if dtype == torch.float32 else torch.autocast(dist_.device.type, dtype=dtype)
    if fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy() if dtype == torch.float32 else \
            MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        mesh = mesh or init_device_mesh(dist_.device.type, (dist_.world_size,))
        for block in blocks:
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        autocast = nullcontext()
    wrapped = torch.compile(model) if compile else model
    if dist_.world_size > 1 and not fsdp:
        wrapped = DDP(wrapped, device_ids=[dist_.device.index] if dist_.device.type == "cuda" else None)
    return wrapped, autocast


def sync_gradients(model: nn.Module, enabled: bool) -> None:
    """Whether the next backward reduces gradients across ranks. Under DDP only an iteration's last
    micro-step needs to; the others accumulate locally. FSDP2 reduce-scatters on every micro-step, as
    torchtitan does: switched off, it would keep every parameter's unsharded fp32 gradient until the
    last micro-step (Llama 2 7B on 8 GPUs: about 47 GiB a GPU instead of 25), for one reduce-scatter
    of the model's gradients a micro-step saved."""
    if isinstance(model, DDP):
        model.require_backward_grad_sync = enabled


def is_dtensor(t: torch.Tensor) -> bool:
    """Whether ``t`` is a DTensor (FSDP2's), without importing torch.distributed.tensor: none exists until
    something else has imported it."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor, a view sharing its storage; a plain tensor as is."""
    return t.to_local() if is_dtensor(t) else t


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole of a DTensor (FSDP2), gathered from every rank; a plain tensor as is."""
    return t.full_tensor() if is_dtensor(t) else t


def agree(decide: Callable[[], object]) -> None:
    """Run ``decide`` on rank 0 alone (taking a folder, say); if it refuses (UserError), every rank raises the
    same error, before any rank goes on to a collective that rank 0 would never join."""
    from errors import UserError

    refused = ""
    if not dist.is_initialized() or dist.get_rank() == 0:
        try:
            decide()
        except UserError as e:
            refused = str(e) or "refused"
    refused = all_gather_object(refused)[0]
    if refused:
        raise UserError(refused)
