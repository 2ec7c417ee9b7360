"""The shell shared by optimizers whose whole state is one momentum tensor (AdamS, Lion).

Each such optimizer supplies the same update rule in up to four forms:

- ``update``: a function over one tensor (``p, grad, exp_avg, hp``), written with plain tensor
  ops. The for-loop implementation calls it eagerly; where neither kernel below is available, the
  fused implementation calls the very same function through ``torch.compile`` over the list of a
  group's tensors (one kernel per tensor, one pass over memory, all launched from one call).
- ``update_foreach``: the same rule with ``torch._foreach_*`` ops over lists of tensors.
- ``cpu_kernel``: on CPU the fused implementation is a C++ kernel (optim/_cpu_kernels.cpp,
  compiled at first use), one pass over memory with the step's scalars as plain values (the
  compiled kernel would reload its 0-d tensor scalars at every vector).
- ``triton_kernel``: on CUDA the fused implementation is one Triton launch over all tensors
  (optim/_triton_fused.py), where the compiled path launches one kernel per tensor.

``hp`` is a NamedTuple of the step's scalars (``AdamSStep``, ``LionStep``: lr, weight decay,
betas, ...), read by name. The loop and foreach paths get Python floats; the fused path gets
0-d float32 tensors, which keeps the compiled kernel from recompiling when the learning rate or
the bias correction changes from one step to the next.

Low-precision parameters (bf16, fp16) are updated with fp32 math: ``update`` upcasts inside
the kernel; the foreach path upcasts copies and writes the result back.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable

import torch
from torch.optim import Optimizer

from . import _cpu_fused, _triton_fused

_FUSED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _scalar(name: str, value) -> float:
    """A hyperparameter as a float: a number, or a tensor of one element (what torch.optim takes)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex():
            raise ValueError(f"Invalid {name}: a tensor {name} must hold one real number, got shape {tuple(value.shape)}")
        return float(value.detach().reshape(()).item())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"Invalid {name}: {value!r} (must be a number)")
    return float(value)


def check_hyperparameters(lr, betas, weight_decay, eps=None) -> None:
    """Raise ValueError, naming the argument, for values torch.optim would also refuse: for the defaults and for
    every parameter group's own values alike (numbers, or tensors of one element)."""
    if not (math.isfinite(_scalar("learning rate", lr)) and _scalar("learning rate", lr) >= 0.0):
        raise ValueError(f"Invalid learning rate: {lr} (must be a finite number >= 0)")
    if isinstance(betas, torch.Tensor) or not hasattr(betas, "__len__") or len(betas) != 2:
        raise ValueError(f"Invalid betas: {betas} (must be a pair (beta1, beta2))")
    for i, beta in enumerate(betas):
        if not 0.0 <= _scalar(f"beta parameter at index {i}", beta) < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta} (must be in [0, 1))")
    if not 0.0 <= _scalar("weight_decay value", weight_decay) < math.inf:
        raise ValueError(f"Invalid weight_decay value: {weight_decay} (must be a finite number >= 0)")
    if eps is not None and not 0.0 <= _scalar("epsilon value", eps) < math.inf:
        raise ValueError(f"Invalid epsilon value: {eps} (must be a finite number >= 0)")


def check_group(group: dict) -> None:
    """``check_hyperparameters`` on one parameter group's values (its own, or the defaults it took)."""
    check_hyperparameters(group["lr"], group["betas"], group["weight_decay"], group.get("eps"))


def check_gradients(name: str, pairs) -> None:
    """Refuse, before any parameter or state changes, a step whose gradients cannot be applied: sparse, or of
    another shape or device than their parameter. A step either updates every parameter or none."""
    for p, g in pairs:
        if g.is_sparse:
            raise RuntimeError(f"{name} does not support sparse gradients")
        if g.shape != p.shape or g.device != p.device:
            raise RuntimeError(f"{name}: a gradient of shape {tuple(g.shape)} on {g.device} does not fit its parameter of "
                               f"shape {tuple(p.shape)} on {p.device}")


# Hyperparameters that tell torch.optim's and our optimizers apart in their groups (not the switches,
# such as foreach, that torch adds to any): a saved group that has one that this optimizer does not
# take, or lacks one it does, was saved by another optimizer.
_KNOWN_HYPERPARAMETERS = {"lr", "betas", "eps", "weight_decay", "bias_correction", "amsgrad", "decoupled_weight_decay",
                          "momentum", "dampening", "nesterov", "alpha", "centered", "lr_decay", "initial_accumulator_value"}


def check_state_dict(optimizer: Optimizer, state_dict: dict, state_shapes) -> None:
    """Refuse, at load time, a state_dict that another optimizer saved (ValueError naming what differs).

    ``state_shapes(p)`` gives the {name: shape} of the state this optimizer keeps for parameter ``p``
    (a shape of None: a scalar, any type); saved states are matched to parameters in order, as
    ``Optimizer.load_state_dict`` does."""
    name = type(optimizer).__name__
    ours = set(optimizer.defaults) & _KNOWN_HYPERPARAMETERS
    for group in state_dict.get("param_groups", []):
        theirs = set(group) & _KNOWN_HYPERPARAMETERS
        missing, extra = ours - theirs, theirs - ours
        if missing or extra:
            raise ValueError(f"this state_dict was not saved by {name}: its groups "
                             + (f"lack {sorted(missing)}" if missing else f"have {sorted(extra)}, which {name} does not take")
                             + "; load it into the optimizer that saved it")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved_ids = [i for group in state_dict.get("param_groups", []) for i in group["params"]]
    for p, i in zip(params, saved_ids):
        saved = state_dict.get("state", {}).get(i)
        if saved is None:
            continue
        want = state_shapes(p)
        if set(saved) != set(want) or any(shape is not None and tuple(saved[k].shape) != shape for k, shape in want.items()):
            got = {k: tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__ for k, v in saved.items()}
            raise ValueError(f"this state_dict was not saved by {name}: a parameter of shape {tuple(p.shape)} has "
                             f"state {got}, where {name} keeps {want}; load it into the optimizer that saved it")


def is_dtensor(t: torch.Tensor) -> bool:
    """``isinstance(t, DTensor)`` without importing torch.distributed.tensor, which would add about
    45% to ``import optim`` (1.8 s on a 2-core VM): no DTensor exists until something else has."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (FSDP2), a view sharing its storage; a plain tensor as is.

    AdamS and Lion are elementwise, so updating every rank's shard in place is the exact update.
    """
    return t.to_local() if is_dtensor(t) else t


def upcast(t: torch.Tensor) -> torch.Tensor:
    """``t`` in at least fp32: bf16/fp16 become fp32, fp32 and fp64 stay as they are."""
    return t.float() if t.element_size() < 4 else t


# Tensors below this size (biases, norms) go through one foreach pass together: compiling them
# into the fused graph costs more compile time than it saves at run time.
FUSED_MIN_NUMEL = 1 << 16
# One graph per distinct list of tensor shapes (one per parameter group, in practice).
_RECOMPILE_LIMIT = 256


@functools.cache
def _compiled(update: Callable) -> Callable:
    """``update`` over lists of tensors, compiled as one graph with static shapes: one call runs every
    tensor's kernel, which costs less per step than a call per tensor or one dynamic-shape kernel for all
    sizes (results/cpu/README.md has the measurements); the price is the first step's compile time, which
    grows with the number of tensors."""

    def update_all(ps, gs, ms, hp):
        for p, g, m in zip(ps, gs, ms):
            update(p, g, m, hp)

    return torch.compile(update_all, dynamic=False, fullgraph=True)


class MomentumOnlyOptimizer(Optimizer):
    """Lazy ``exp_avg`` state, grad collection and loop/foreach/fused dispatch.

    Subclasses set ``update`` and ``update_foreach`` (static methods) and implement
    ``_hyperparameters(group, step)``, which returns that step's scalars ``hp`` (a NamedTuple).
    """

    update: Callable
    update_foreach: Callable
    cpu_kernel: str  # its name in optim/_cpu_kernels.cpp, called with (ps, gs, ms, *hp)
    triton_kernel: str | None = None  # its kind in optim/_triton_fused.py (CUDA); None: torch.compile
    _compiled_on_cpu = False  # tests: take the torch.compile path on CPU too, as on CUDA

    def __init__(self, params, defaults: dict, foreach: bool | None, fused: bool | None):
        if fused and foreach:
            raise ValueError("foreach and fused are mutually exclusive: set at most one of them to True")
        defaults = dict(defaults, foreach=foreach, fused=fused)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        check_group({**self.defaults, **param_group})  # a group's own values are held to the rules of the defaults
        super().add_param_group(param_group)
        if self.param_groups[-1]["fused"]:
            for p in self.param_groups[-1]["params"]:
                if p.real.dtype not in _FUSED_DTYPES:  # a complex parameter is updated as its pairs of reals
                    del self.param_groups[-1]
                    raise ValueError(f"fused=True supports {_FUSED_DTYPES} parameters, got {p.dtype}")

    def load_state_dict(self, state_dict: dict) -> None:
        check_state_dict(self, state_dict, lambda p: {"step": None, "exp_avg": tuple(p.shape)})
        super().load_state_dict(state_dict)

    def _hyperparameters(self, group: dict, step: int) -> tuple:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        check_gradients(type(self).__name__, ((p, p.grad) for group in self.param_groups for p in group["params"]
                                              if p.grad is not None))
        for group in self.param_groups:
            # Tensors are bucketed by (device, step) so that a parameter whose grad was None on
            # some steps (and so has a smaller step count) gets its own bias correction.
            buckets: dict[tuple, tuple[list, list, list]] = {}
            # This loop runs over every parameter at every step (on CUDA it is most of the fused
            # step's CPU time): one attribute read per use, no temporary lists.
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] = step = state["step"] + 1
                m = state["exp_avg"]
                if is_dtensor(p):
                    p, g, m = local(p), local(g), local(m)
                if p.is_complex():  # as torch.optim.AdamW does: the real and imaginary parts as two reals
                    p, g, m = torch.view_as_real(p), torch.view_as_real(g), torch.view_as_real(m)
                key = (p.device, step)
                if key not in buckets:
                    buckets[key] = ([], [], [])
                ps, gs, ms = buckets[key]
                ps.append(p)
                gs.append(g)
                ms.append(m)

            for (device, step), (ps, gs, ms) in buckets.items():
                hp = self._hyperparameters(group, step)
                if group["fused"]:
                    self._step_fused(ps, gs, ms, hp, device)
                elif group["foreach"] is False:
                    for p, g, m in zip(ps, gs, ms):
                        type(self).update(p, g, m, hp)
                else:
                    self._step_foreach(ps, gs, ms, hp)
        return loss

    def _step_fused(self, ps, gs, ms, hp, device):
        if device.type == "cpu" and _cpu_fused.kernels() is not None and not self._compiled_on_cpu:
            kernel = getattr(_cpu_fused.kernels(), self.cpu_kernel)
            fits = [g.dtype == p.dtype and p.is_contiguous() and g.is_contiguous() and m.is_contiguous()
                    for p, g, m in zip(ps, gs, ms)]
            if any(fits):  # (the kernel takes no empty lists)
                kernel(*([t for t, ok in zip(ts, fits) if ok] for ts in (ps, gs, ms)), *hp)
            if not all(fits):
                self._step_foreach(*([t for t, ok in zip(ts, fits) if not ok] for ts in (ps, gs, ms)), hp)
            return
        if device.type == "cuda" and _triton_fused.available() and self.triton_kernel:
            rest = _triton_fused.step(self.triton_kernel, ps, gs, ms, hp)
            if rest[0]:
                self._step_foreach(*rest, hp)
            return
        big, rest = ([], [], []), ([], [], [])
        for p, g, m in zip(ps, gs, ms):
            fits = (p.numel() >= FUSED_MIN_NUMEL and g.dtype == p.dtype and p.is_contiguous() and g.is_contiguous()
                    and m.is_contiguous())
            for bucket, t in zip(big if fits else rest, (p, g, m)):
                bucket.append(t)
        if big[0]:
            hp_tensors = type(hp)(*torch.tensor(hp, dtype=torch.float32, device=device))  # one copy to the device
            with torch._dynamo.config.patch(recompile_limit=_RECOMPILE_LIMIT):
                _compiled(type(self).update)(*big, hp_tensors)
        if rest[0]:
            self._step_foreach(*rest, hp)

    def _step_foreach(self, ps, gs, ms, hp):
        if all(p.element_size() >= 4 and g.dtype == p.dtype for p, g in zip(ps, gs)):
            type(self).update_foreach(ps, gs, ms, hp)
            return
        # fp32 math for low-precision tensors: update fp32 copies, then write them back.
        p32 = [upcast(p) for p in ps]
        m32 = [upcast(m) for m in ms]
        type(self).update_foreach(p32, [g.to(p.dtype) for g, p in zip(gs, p32)], m32, hp)
        torch._foreach_copy_(ps, p32)
        torch._foreach_copy_(ms, m32)
