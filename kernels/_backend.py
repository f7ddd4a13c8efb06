"""Choose the Triton backend before any kernel is decorated.

With no CUDA device, kernels run through Triton's interpreter: TRITON_INTERPRET=1 is set here unless the
user set it themselves. Triton reads the variable when `@triton.jit` runs, so this module is imported first
by `kernels/__init__.py`.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any, NamedTuple

# True in a process whose Triton launches compile and never run (a compile pool's: autotuner.engine.compile_pool):
# there, kernels take meta tensors (shapes, strides and dtypes without memory) as those of CUDA device META_DEVICE
# (None: the current one).
COMPILE_ONLY = False
META_DEVICE: int | None = None

# cuDeviceGetAttribute's CUdevice_attribute values (cuda.h)
_SM_COUNT, _CC_MAJOR, _CC_MINOR, _SMEM_OPTIN = 16, 75, 76, 97


def _driver() -> ctypes.CDLL | None:
    """The CUDA driver, initialised; None where there is none (or it fails)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return libcuda if libcuda.cuInit(0) == 0 else None


def cuda_device_count() -> int:
    """The CUDA devices visible to this process (CUDA_VISIBLE_DEVICES applies). Asked of the driver itself unless
    torch is imported already, so that importing `autotuner` does not import torch (seconds of imports;
    `autotuner tune` starts its fork server first)."""
    if "torch" in sys.modules:
        try:
            return int(sys.modules["torch"].cuda.device_count())
        except Exception:  # pragma: no cover - broken driver
            return 0
    libcuda = _driver()
    count = ctypes.c_int(0)
    if libcuda is None or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


class CudaProperties(NamedTuple):
    name: str
    capability: tuple[int, int]
    sm_count: int
    total_memory: int
    smem_per_block: int  # the opt-in maximum of shared memory per block


def cuda_properties(index: int) -> CudaProperties:
    """CUDA device `index`'s name, compute capability, SM count, memory and opt-in shared memory per block, asked
    of the driver (the values torch.cuda.get_device_properties gives, without importing torch or making a
    context). Raises RuntimeError where the driver cannot say."""
    libcuda = _driver()
    device, name, memory = ctypes.c_int(0), ctypes.create_string_buffer(256), ctypes.c_size_t(0)
    if libcuda is None or libcuda.cuDeviceGet(ctypes.byref(device), index) != 0:
        raise RuntimeError(f"no CUDA device {index} (this process sees {cuda_device_count()})")
    values = {}
    for key, attribute in (("sm_count", _SM_COUNT), ("major", _CC_MAJOR), ("minor", _CC_MINOR),
                           ("smem_optin", _SMEM_OPTIN)):
        value = ctypes.c_int(0)
        if libcuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, device) != 0:
            raise RuntimeError(f"the CUDA driver gave no attribute {attribute} for device {index}")
        values[key] = value.value
    if libcuda.cuDeviceGetName(name, len(name), device) != 0 or libcuda.cuDeviceTotalMem_v2(ctypes.byref(memory),
                                                                                           device) != 0:
        raise RuntimeError(f"the CUDA driver gave no name or memory size for device {index}")
    return CudaProperties(name.value.decode(), (values["major"], values["minor"]), values["sm_count"], memory.value,
                          values["smem_optin"])


_PROPERTIES: dict[int, CudaProperties] = {}


def gpu_index(device: Any) -> int | None:
    """The CUDA device a tensor's torch device stands for: a CUDA tensor's own (the current one where it names
    none); in a COMPILE_ONLY process a meta tensor's META_DEVICE (what the process compiles for); None otherwise
    (the CPU: the interpreter)."""
    if device.type == "cuda" and device.index is not None:
        return int(device.index)
    if device.type == "meta" and COMPILE_ONLY and META_DEVICE is not None:
        return META_DEVICE
    if device.type == "cuda" or (device.type == "meta" and COMPILE_ONLY):
        return int(sys.modules["torch"].cuda.current_device())
    return None


def gpu_properties(device: Any) -> CudaProperties | None:
    """`cuda_properties` of a tensor's torch device (`gpu_index`), asked of the driver once per device; None for
    the CPU."""
    index = gpu_index(device)
    return None if index is None else _properties(index)


def _properties(index: int) -> CudaProperties:
    if index not in _PROPERTIES:
        _PROPERTIES[index] = cuda_properties(index)
    return _PROPERTIES[index]


_SMS: dict[int | None, int] = {}


def sm_count(device: Any) -> int:
    """SMs of a tensor's torch device (a persistent kernel's grid), asked of the driver once per device; a CPU
    tensor's (the interpreter's) are the CPU's cores, as autotuner.base.device counts them."""
    index = gpu_index(device)
    if index not in _SMS:
        _SMS[index] = (os.cpu_count() or 1) if index is None else _properties(index).sm_count
    return _SMS[index]


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
