"""The fused CUDA kernels of AdamS and Lion: one Triton launch updates every tensor of a step.

The kernels ``torch.compile`` emits for these updates run at the memory limit, but one launch per
tensor, the guards on every input and a foreach pass over the small tensors cost more CPU time than
the GPU needs (results/gpu/README.md has the profile). So here, as in torch's own fused AdamW
(``multi_tensor_apply``), one launch covers every tensor: program ``i`` reads which tensor and which
block of it to update from a block table, and that tensor's addresses from a pointer table; the
step's scalars are plain kernel arguments, so a new learning rate or bias correction does not
recompile.

Each tensor is read once and written once (p and m; g is read), in fp32 math whatever the
storage dtype, which must be the same for p, g and m. The tables are cached: the block table per
list of sizes, the pointer table per list of addresses (parameters and momenta never move; the
caching allocator usually hands the gradients the same addresses from one step to the next). A
new table goes to the GPU through pinned memory, without making the CPU wait for the GPU.
"""

from __future__ import annotations

import functools
import importlib.util
from contextlib import nullcontext
from operator import attrgetter, or_

import torch

# Per element size: (bytes of each of p, g and m that one program updates, elements per thread), the
# fastest that scripts/tune_triton.py found (results/gpu/tune_triton.json); fp16 takes bf16's setting.
SETTINGS = {4: (8192, 4), 2: (32768, 16)}
_ALIGN = 16  # bytes: every address the kernel takes is a multiple of this (128-bit loads and stores)


@functools.cache
def available() -> bool:
    """Whether Triton is installed (it is imported at the first CUDA step, not here); looked up once,
    not at every step."""
    return importlib.util.find_spec("triton") is not None


_TL_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _block(dtype: torch.dtype) -> int:
    """Elements per program."""
    return SETTINGS[dtype.itemsize][0] // dtype.itemsize


def _warps(dtype: torch.dtype) -> int:
    """Warps per program: its elements over 32 threads a warp and SETTINGS' elements a thread."""
    return _block(dtype) // (32 * SETTINGS[dtype.itemsize][1])


def fits(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor) -> bool:
    """Whether the kernel can update this tensor: one dtype, contiguous, 16-byte-aligned addresses."""
    return (p.dtype in _TL_DTYPES and g.dtype == p.dtype and m.dtype == p.dtype
            and all(t.is_contiguous() and t.data_ptr() % _ALIGN == 0 for t in (p, g, m)))


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor copied without blocking the CPU: a pageable copy would wait for the GPU's queue."""
    return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t.to(device)


@functools.lru_cache(maxsize=64)
def _block_table(numels: tuple[int, ...], block: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    counts = torch.tensor([-(-n // block) for n in numels])
    block_tensor = torch.repeat_interleave(torch.arange(len(numels)), counts)
    first = torch.cumsum(counts, 0) - counts  # each tensor's first program
    block_index = torch.arange(len(block_tensor)) - first[block_tensor]
    return (_to_device(torch.tensor(numels, dtype=torch.int64), device),
            _to_device(block_tensor.to(torch.int32), device), _to_device(block_index.to(torch.int32), device))


@functools.lru_cache(maxsize=16)
def _pointer_table(addresses: tuple[int, ...], device: torch.device) -> torch.Tensor:
    return _to_device(torch.tensor(addresses, dtype=torch.int64), device)


def step(kind: str, ps: list, gs: list, ms: list, hp: tuple) -> tuple[list, list, list]:
    """Update every (p, g, m) that ``fits``, in one launch per dtype; return the others as (ps, gs, ms).

    ``kind``: adams, lion. This runs at every step, so the usual case (one dtype, every tensor
    fits) is checked over the whole list at once rather than tensor by tensor.
    """
    tensors = [*ps, *gs, *ms]
    addresses = list(map(torch.Tensor.data_ptr, tensors))
    dtypes = set(map(attrgetter("dtype"), tensors))
    if (len(dtypes) == 1 and ps[0].dtype in _TL_DTYPES and all(map(torch.Tensor.is_contiguous, tensors))
            and not functools.reduce(or_, addresses) % _ALIGN):  # every address aligned
        _launch(kind, ps, addresses, hp)
        return [], [], []
    n, by_dtype, rest = len(ps), {}, ([], [], [])
    for i, triple in enumerate(zip(ps, gs, ms)):
        if fits(*triple):
            by_dtype.setdefault(triple[0].dtype, []).append(i)
        else:
            for bucket, t in zip(rest, triple):
                bucket.append(t)
    for index in by_dtype.values():
        _launch(kind, [ps[i] for i in index], [addresses[k * n + i] for k in range(3) for i in index], hp)
    return rest


def _launch(kind: str, ps: list, addresses: list, hp: tuple) -> None:
    """One kernel launch over the tensors ``ps`` (one dtype) and their (p..., g..., m...) ``addresses``."""
    import triton.language as tl

    from ._triton_kernels import multi_tensor_kernel

    device, block = ps[0].device, _block(ps[0].dtype)
    numels, block_tensor, block_index = _block_table(tuple(map(torch.Tensor.numel, ps)), block, device)
    scalars = [float(s) for s in hp] + [0.0] * (6 - len(hp))
    with torch.cuda.device(device) if device.type == "cuda" else nullcontext():  # CPU: TRITON_INTERPRET=1
        multi_tensor_kernel[(len(block_tensor),)](
            _pointer_table(tuple(addresses), device), numels, block_tensor, block_index, len(ps), *scalars,
            DTYPE=getattr(tl, _TL_DTYPES[ps[0].dtype]), ADAMS=kind == "adams", BLOCK=block, ALIGN=_ALIGN,
            num_warps=_warps(ps[0].dtype),
        )
