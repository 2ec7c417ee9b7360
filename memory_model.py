"""What a training step asks of a GPU's memory, worked out on a CPU: a recorder of every tensor a step
allocates and frees (on fake tensors, which have shapes but no data), and a model of PyTorch's CUDA
caching allocator that replays them.

The recorder sees every operator's outputs (a TorchDispatchMode), notes each new storage's bytes, and a
weak reference tells it when that storage dies; FSDP2 frees and refills its unsharded parameters by
resizing their storages in place, which it notes too. The allocator model follows
c10/cuda/CUDACachingAllocator.cpp at its defaults: requests rounded up to 512 bytes; those of at most
1 MiB served from 2 MiB segments, larger ones below 10 MiB from 20 MiB segments, the rest from segments
of their size rounded up to 2 MiB; the smallest free block that fits, split when what remains is at
least 512 bytes (small blocks) or more than 1 MiB (large ones); freed blocks merged with free
neighbours; and when the device cannot give a new segment, every wholly free segment released and the
request tried once more before it fails. ``max_memory_allocated`` counts whole blocks (a request's
rounding and an unsplit remainder included), which is what ``allocated`` counts here.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

KiB, MiB = 1 << 10, 1 << 20
MIN_BLOCK = 512  # every request is rounded up to a multiple of this
SMALL_REQUEST = 1 * MiB  # requests up to this come from the small pool
SMALL_SEGMENT = 2 * MiB
LARGE_SEGMENT = 20 * MiB  # for large requests below MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 * MiB
ROUND_LARGE = 2 * MiB


class OutOfMemory(Exception):
    """The replay asked for more than the device's capacity (after releasing what the cache held)."""


def round_size(nbytes: int) -> int:
    return MIN_BLOCK if nbytes < MIN_BLOCK else MIN_BLOCK * -(-nbytes // MIN_BLOCK)


def segment_size(size: int) -> int:
    if size <= SMALL_REQUEST:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return ROUND_LARGE * -(-size // ROUND_LARGE)


class _Block:
    __slots__ = ("size", "small", "prev", "next", "free", "serial")

    def __init__(self, size: int, small: bool, serial: int):
        self.size, self.small, self.serial = size, small, serial
        self.prev = self.next = None
        self.free = False


class CachingAllocator:
    """The CUDA caching allocator's bookkeeping, without memory: ``malloc(nbytes)`` gives a block,
    ``free(block)`` returns it; ``allocated``, ``reserved`` and their peaks as torch.cuda reports them.
    ``capacity``: bytes the device can give (None: unlimited); a request beyond it raises OutOfMemory."""

    def __init__(self, capacity: int | None = None):
        self.capacity = capacity
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0
        self._pools = {True: [], False: []}  # small?: the free blocks, sorted by (size, serial)
        self._free: dict[int, _Block] = {}  # serial -> free block
        self._segments: list[_Block] = []  # each segment's first block (never merged into another)
        self._serial = itertools.count()

    def _insert(self, block: _Block) -> None:
        block.free = True
        bisect.insort(self._pools[block.small], (block.size, block.serial))
        self._free[block.serial] = block

    def _take(self, block: _Block) -> None:
        pool = self._pools[block.small]
        del pool[bisect.bisect_left(pool, (block.size, block.serial))]
        del self._free[block.serial]
        block.free = False

    def release_cached(self) -> None:
        """``torch.cuda.empty_cache()``: give back every segment that holds no allocation."""
        keep = []
        for head in self._segments:
            if head.free and head.next is None:
                self._take(head)
                self.reserved -= head.size
            else:
                keep.append(head)
        self._segments = keep

    def _new_segment(self, size: int, small: bool) -> _Block:
        want = segment_size(size)
        if self.capacity is not None and self.reserved + want > self.capacity:
            self.release_cached()  # what the allocator does before it gives up
            if self.reserved + want > self.capacity:
                raise OutOfMemory(f"{want:,} bytes asked with {self.reserved:,} of {self.capacity:,} reserved")
        head = _Block(want, small, next(self._serial))
        self._segments.append(head)
        self.reserved += want
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return head

    def malloc(self, nbytes: int) -> _Block:
        size = round_size(nbytes)
        small = size <= SMALL_REQUEST
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            block = self._free[pool[i][1]]
            self._take(block)
        else:
            block = self._new_segment(size, small)
        remaining = block.size - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_REQUEST:
            rest = _Block(remaining, small, next(self._serial))
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            self._insert(rest)
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: _Block) -> None:
        self.allocated -= block.size
        after = block.next
        if after is not None and after.free:  # absorb the free block after it
            self._take(after)
            block.size += after.size
            block.next = after.next
            if after.next is not None:
                after.next.prev = block
        before = block.prev
        if before is not None and before.free:  # and be absorbed by the free block before it
            self._take(before)
            before.size += block.size
            before.next = block.next
            if block.next is not None:
                block.next.prev = before
            block = before
        self._insert(block)


ALLOC, FREE = 0, 1


class Recorder(TorchDispatchMode):
    """Under a FakeTensorMode: every storage a step makes and frees, in order, as ``events``:
    (ALLOC, key, bytes) and (FREE, key). Enter it inside the FakeTensorMode (so it sees fake outputs)."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple] = []
        self._live: dict[int, tuple[int, int]] = {}  # storage address -> (key, bytes)
        self._keys = itertools.count()
        self._patched: list[tuple] = []
        self._paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self._paused:
            return out
        for t in tree_leaves(out):
            while isinstance(getattr(t, "_local_tensor", None), torch.Tensor):  # a DTensor: its shard is the memory
                t = t._local_tensor
            if isinstance(t, torch.Tensor):
                self.note(t.untyped_storage())
        return out

    def note(self, storage: torch.UntypedStorage) -> None:
        address = storage._cdata
        if address in self._live:
            return
        self._alloc(address, storage.nbytes())
        weakref.finalize(storage, self._died, address)

    def _alloc(self, address: int, nbytes: int) -> None:
        key = next(self._keys)
        self._live[address] = (key, nbytes)
        if nbytes:
            self.events.append((ALLOC, key, nbytes))

    def _died(self, address: int) -> None:
        key, nbytes = self._live.pop(address)
        if nbytes:
            self.events.append((FREE, key))

    def resized(self, storage: torch.UntypedStorage, nbytes: int) -> None:
        """A storage resized in place (FSDP2 frees a gathered parameter with resize_(0) and refills it)."""
        address = storage._cdata
        if address not in self._live:
            self.note(storage)
            return
        self._died(address)
        self._alloc(address, nbytes)

    def __enter__(self):
        recorder = self

        def resize_(original):
            def patched(storage, size):
                out = original(storage, size)
                recorder.resized(storage, int(size))
                return out
            return patched

        def paused(original):  # DTensor works out an op's output shape on global-sized fake tensors: not memory
            def patched(*args, **kwargs):
                recorder._paused += 1
                try:
                    return original(*args, **kwargs)
                finally:
                    recorder._paused -= 1
            return patched

        self._patch(torch.UntypedStorage, "resize_", resize_)
        try:
            from torch.distributed.tensor._sharding_prop import ShardingPropagator
        except ImportError:  # (a torch without torch.distributed)
            pass
        else:
            self._patch(ShardingPropagator, "_propagate_tensor_meta_non_cached", paused)
        return super().__enter__()

    def _patch(self, owner, name, wrap) -> None:
        original = getattr(owner, name)
        self._patched.append((owner, name, original))
        setattr(owner, name, wrap(original))

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched.clear()
        return super().__exit__(*exc)

    @contextlib.contextmanager
    def paused(self):
        """Allocations made here are not the device's (a model built in host memory, say): not recorded."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def mark(self, label: str) -> None:
        """A named point in the events (an iteration's start, say), for the peak between two marks."""
        self.events.append((label,))


def replay(events: list[tuple], capacity: int | None = None, reserve: list[int] = ()) -> dict:
    """The events through a CachingAllocator: peak allocated and reserved bytes overall and between marks
    ({label: peak allocated from that mark to the next}). ``reserve``: allocations made first and never freed
    (cuBLAS's workspaces). Raises OutOfMemory where ``capacity`` is exceeded."""
    allocator = CachingAllocator(capacity)
    for nbytes in reserve:
        allocator.malloc(nbytes)
    blocks, marks, label = {}, {}, None
    for event in events:
        if len(event) == 1:
            label = event[0]
            marks[label] = allocator.allocated
            continue
        if event[0] == ALLOC:
            blocks[event[1]] = allocator.malloc(event[2])
            if label is not None:
                marks[label] = max(marks[label], allocator.allocated)
        else:
            block = blocks.pop(event[1], None)
            if block is not None:
                allocator.free(block)
    return dict(peak_allocated=allocator.peak_allocated, peak_reserved=allocator.peak_reserved, marks=marks)
