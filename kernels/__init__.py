"""Triton kernels, one file per op (`kernels/<op>.py`: the kernel, a launcher taking an explicit config, a
torch reference), and the library calls that launch them with their tuned config:

    import kernels
    y = kernels.softmax(x)
    y = kernels.matmul(a, b, bias=bias, activation="gelu")

Importing this package first picks the backend: with no CUDA device, TRITON_INTERPRET=1 is set so the
kernels run on the CPU through Triton's interpreter. The op modules are reached with
`importlib.import_module("kernels.softmax")`, since the package's own names are the library calls.
"""

from kernels import _backend  # noqa: F401  (must run before any @triton.jit)
from kernels.library import attention, clear_cache, gelu, layer_norm, matmul, softmax

__all__ = ["attention", "clear_cache", "gelu", "layer_norm", "matmul", "softmax"]
