"""Triton kernels, one file per op (`kernels/<op>.py`: the `@triton.jit` kernel, a launcher taking an explicit
config and validating its inputs, a torch reference). This is the ground floor: nothing here imports the
engine (`autotuner/`). The calls that launch with a tuned config are `autotuner.softmax(x)` and its siblings.

Importing this package first picks the backend: with no CUDA device, TRITON_INTERPRET=1 is set so the
kernels run on the CPU through Triton's interpreter.
"""

from kernels import _backend  # noqa: F401  (must run before any @triton.jit)
