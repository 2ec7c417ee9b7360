"""The fused CPU kernels of AdamS and Lion (optim/_cpu_kernels.cpp), compiled at first use.

``torch.utils.cpp_extension`` builds them once per machine (a C++ compiler and ninja are needed) into torch's extension cache, for the CPU's vector width
(AVX-512, AVX2, or portable code), as a library of torch operators (``torch.ops.<name>``). If they
cannot be built, ``kernels()`` returns None and the optimizers fall back to the torch.compile path,
saying so once.
"""

from __future__ import annotations

import functools
import logging
import platform
from pathlib import Path

import torch

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("_cpu_kernels.cpp")

# torch's own vector code (ATen/cpu/vec) picks its implementation by these macros
_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mf16c", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY_AVX2"],
}


def capability() -> str:
    """'AVX512', 'AVX2' or 'DEFAULT': the vector instructions the kernels are built for."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "DEFAULT"
    found = torch.backends.cpu.get_cpu_capability()
    return "AVX512" if found.startswith("AVX512") else "AVX2" if found.startswith("AVX2") else "DEFAULT"


def build(name: str, source: Path):
    """Compile ``source`` for this CPU and load its operators: ``torch.ops.<name>``, each kernel an attribute."""
    from torch.utils.cpp_extension import load

    load(name=name, sources=[str(source)], is_python_module=False, verbose=False, extra_ldflags=["-fopenmp"],
         extra_cflags=["-O3", "-fopenmp", f"-DADAMS_GPT_OPS={name}", *_FLAGS.get(capability(), [])])
    return getattr(torch.ops, name)


@functools.cache
def kernels():
    """The compiled kernels (``adams_step``, ``lion_step``), or None if they cannot be built here."""
    try:
        return build(f"adams_gpt_cpu_{capability().lower()}", SOURCE)
    except Exception as e:  # no compiler or ninja, or a build error
        log.warning("fused CPU kernels unavailable (%s: %s); using the torch.compile path", type(e).__name__,
                    str(e).splitlines()[0] if str(e) else "")
        return None
