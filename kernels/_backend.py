"""Choose the Triton backend before any kernel is decorated: with no CUDA device, TRITON_INTERPRET=1 is set (unless the
user set it), since Triton reads it when `@triton.jit` runs."""

from __future__ import annotations

import ctypes
import functools
import os
import re
import sys
from typing import Any, NamedTuple

# True in a process whose Triton launches compile and never run (a compile pool's: autotuner.engine.measure.compile_pool):
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
    """The CUDA devices visible to this process, asked of torch where it is imported, else of NVML, so that importing
    `autotuner` neither imports torch nor initialises CUDA (a process that called `cuInit` forks children that cannot).
    Only where NVML cannot say is the driver asked."""
    if "torch" in sys.modules:
        try:
            return int(sys.modules["torch"].cuda.device_count())
        except Exception:  # pragma: no cover - broken driver
            return 0
    host = _nvml_count()
    visible = _visible(host) if host is not None else None
    if visible is not None:
        return visible
    libcuda = _driver()
    count = ctypes.c_int(0)
    if libcuda is None or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


@functools.cache
def _nvml_count() -> int | None:
    """The GPUs NVML finds on the host, whatever CUDA_VISIBLE_DEVICES says (None: NVML cannot say); asked once per
    process (a `tune` counts at import, when it starts its processes and when it sizes its compile pool, and
    NVML's start can take tens of milliseconds on a host of many GPUs), CUDA_VISIBLE_DEVICES read at each count."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    count = ctypes.c_uint(0)
    found = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
    nvml.nvmlShutdown()
    return count.value if found else None


def _visible(host: int) -> int | None:
    """How many of the host's `host` GPUs CUDA_VISIBLE_DEVICES leaves, read as the CUDA runtime reads it (ordinals up to
    the first that is not one; none where one repeats); None for UUIDs."""
    var = os.environ.get("CUDA_VISIBLE_DEVICES")
    if var is None:
        return host
    if var.startswith(("GPU-", "MIG-")):
        return None
    ordinals: list[int] = []
    for part in var.split(","):
        digits = re.match(r"[+-]?\d+", part.strip())
        ordinal = int(digits.group()) if digits else -1
        if ordinal in ordinals:
            return 0
        if ordinal < 0:
            break
        ordinals.append(ordinal)
    return next((i for i, ordinal in enumerate(ordinals) if ordinal >= host), len(ordinals))


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
    return None if index is None else properties(index)


def properties(index: int) -> CudaProperties:
    """`cuda_properties(index)`, asked of the driver once per process (or as `assume_properties` gave them)."""
    if index not in _PROPERTIES:
        _PROPERTIES[index] = cuda_properties(index)
    return _PROPERTIES[index]


def assume_properties(index: int, props: CudaProperties) -> None:
    """Device `index` is taken to be `props` in this process: a compile process told what it compiles for, such as
    a test's on a machine without that GPU."""
    _PROPERTIES[index] = props


_SMS: dict[int | None, int] = {}


def sm_count(device: Any) -> int:
    """SMs of a tensor's torch device (a persistent kernel's grid), asked of the driver once per device; a CPU
    tensor's (the interpreter's) are the CPU's cores, as autotuner.base.device counts them."""
    index = gpu_index(device)
    if index not in _SMS:
        _SMS[index] = (os.cpu_count() or 1) if index is None else properties(index).sm_count
    return _SMS[index]


def _cuda_available() -> bool:
    return cuda_device_count() > 0


# Set where this module turned the interpreter on after Triton was imported: Triton's interpreter patches its
# language when it is imported with TRITON_INTERPRET set, so kernels then fail in ways that name nothing the user
# did (a script that imports triton before autotuner, on a machine without a GPU).
INTERPRETER_TOO_LATE = False


def select_backend() -> None:
    global INTERPRETER_TOO_LATE
    if "TRITON_INTERPRET" not in os.environ and not _cuda_available():
        os.environ["TRITON_INTERPRET"] = "1"
        INTERPRETER_TOO_LATE = "triton" in sys.modules


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def dot_needs_upcast(dtype: object) -> bool:
    """Triton's interpreter multiplies bfloat16 bit patterns in `tl.dot` (triton-lang/triton#11584): kernels take this
    as a constexpr and upcast bfloat16 dot operands under the interpreter only."""
    if not interpreting():  # (a compile process without torch asks too)
        return False
    import torch

    return bool(dtype == torch.bfloat16)


select_backend()
