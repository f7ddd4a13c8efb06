"""Triton kernels, one file per op: the `@triton.jit` kernel, a launcher taking an explicit config, a torch reference.
The ground floor: nothing here imports `autotuner/`. Importing it picks the backend first (kernels._backend)."""

from kernels import _backend  # noqa: F401  (must run before any @triton.jit)
