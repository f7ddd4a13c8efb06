"""Scratch memory for TMA descriptors that kernels make on the device: `ensure_allocator()` installs a torch allocator
through `triton.set_allocator` unless the caller set their own; the interpreter needs none."""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton
from triton.runtime import _allocation

from kernels._backend import interpreting
from kernels._torch import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_allocator() -> None:
    """Install the scratch allocator for device-side descriptors, unless one other than Triton's null one is set
    or the kernels run in the interpreter."""
    if interpreting():
        return
    holder = getattr(_allocation, "_allocator", None)
    current = holder.get() if holder is not None else None
    if current is None or isinstance(current, getattr(_allocation, "NullAllocator", ())):
        triton.set_allocator(_scratch)
