"""TMA descriptors: scratch memory for those kernels make on the device (`ensure_allocator()` installs a torch allocator
through `triton.set_allocator` unless the caller set their own; the interpreter needs none), and host descriptors made
on every launch of a kept launch without checking again what its `prepare` checked (`Prechecked`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton
from triton.runtime import _allocation
from triton.tools.tensor_descriptor import TensorDescriptor

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


class Prechecked(TensorDescriptor):
    """`TensorDescriptor(base, shape, strides, block_shape)`, made as Triton's dataclass makes it but without its
    checks (rank, 16-byte alignment of the base and the strides, the block shape, padding): most of the cost of making
    a kernel's host descriptors on every launch, though the launch's `prepare` checked all of it for every tensor
    the launch takes. What is made is Triton's own class (Triton's launcher and specialization see no difference):
    the class is changed back once the fields are set."""

    def __post_init__(self) -> None:
        self.__class__ = TensorDescriptor  # type: ignore[assignment]
