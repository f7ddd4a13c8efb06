"""Choose the Triton backend before any kernel is decorated.

With no CUDA device, kernels run through Triton's interpreter: TRITON_INTERPRET=1 is set here unless the
user set it themselves. Triton reads the variable when `@triton.jit` runs, so this module is imported first
by `kernels/__init__.py`.
"""

from __future__ import annotations

import ctypes
import os
import sys


def cuda_device_count() -> int:
    """The CUDA devices visible to this process (CUDA_VISIBLE_DEVICES applies). Asked of the driver itself unless
    torch is imported already, so that importing `autotuner` does not import torch (seconds of imports;
    `autotuner tune` starts its fork server first)."""
    if "torch" in sys.modules:
        try:
            return int(sys.modules["torch"].cuda.device_count())
        except Exception:  # pragma: no cover - broken driver
            return 0
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def _cuda_available() -> bool:
    return cuda_device_count() > 0


def select_backend() -> None:
    if "TRITON_INTERPRET" not in os.environ and not _cuda_available():
        os.environ["TRITON_INTERPRET"] = "1"


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def dot_needs_upcast(dtype: object) -> bool:
    """Triton's interpreter multiplies bfloat16 bit patterns in `tl.dot` (triton-lang/triton#11584).

    Kernels take this as a constexpr and convert bfloat16 dot operands to float32 under the interpreter
    only; on a GPU the native bfloat16 path is compiled.
    """
    import torch

    return interpreting() and dtype == torch.bfloat16


select_backend()
