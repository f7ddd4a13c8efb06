"""Tensors that are only a shape, strides, a dtype and a device: what a compile process hands the kernels in torch's
place before torch is imported (`kernels._torch.use_shapes`). Triton specializes a launch on a tensor's dtype and its
data pointer's alignment alone, so launching a kernel module's `prepare` on these with `warmup=True` compiles the same
binary, under the same key, as its launch on real tensors (tests/integration/test_torch_free_compile.py). Only what
the ops' meta path reads of torch is here; anything else raises AttributeError, and the compile process then imports
torch after all (autotuner.engine.measure.compile_pool)."""

from __future__ import annotations

import math
from typing import Any


class DType:
    """A dtype as torch prints it (Triton reads a tensor's dtype by its name) with its element size."""

    def __init__(self, name: str, itemsize: int, floating: bool) -> None:
        self.name, self.itemsize, self.is_floating_point = name, itemsize, floating

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    __str__ = __repr__


class Device:
    def __init__(self, kind: str, index: int | None = None) -> None:
        self.type, self.index = kind, index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __repr__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    __str__ = __repr__


META = Device("meta")


def contiguous_strides(shape: Any) -> tuple[int, ...]:
    """The strides of a new contiguous tensor of this shape, as torch gives them (a dimension of 0 steps as 1)."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


class Form:
    """A tensor's shape, strides, dtype and device without its memory, read as a tensor's are: the base of a tensor
    recorded without its data (autotuner.decorator.kernel_problem.TensorForm) and of `ShapeTensor`."""

    __slots__ = ("shape", "_strides", "dtype", "device")

    def __init__(self, shape: Any, strides: Any, dtype: Any, device: Any) -> None:
        self.shape, self._strides, self.dtype, self.device = shape, strides, dtype, device

    def stride(self, dim: int | None = None) -> Any:
        return self._strides if dim is None else self._strides[dim]

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)


class ShapeTensor(Form):
    """A tensor's shape, strides, dtype and device (meta), and no memory: its data pointer is 0, 16-byte aligned."""

    __slots__ = ()

    def __init__(self, shape: Any, dtype: DType, strides: Any = None) -> None:
        dims = tuple(int(s) for s in shape)
        super().__init__(dims, tuple(strides) if strides is not None else contiguous_strides(dims), dtype, META)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def data_ptr(self) -> int:
        return 0

    def is_contiguous(self) -> bool:
        return self._strides == contiguous_strides(self.shape)

    def reshape(self, *shape: Any) -> ShapeTensor:
        dims = list(shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)
        if -1 in dims:
            known = 1
            for d in dims:
                if d != -1:
                    known *= d
            dims[dims.index(-1)] = self.numel() // known
        if not self.is_contiguous():
            raise RuntimeError("a shape-only tensor reshapes only when contiguous")
        return ShapeTensor(dims, self.dtype)

    view = reshape


class _Compiler:
    @staticmethod
    def is_compiling() -> bool:
        return False


class ShapesTorch:
    """The names of torch that the ops' `make_inputs(problem, "meta")` and `prepare` read, over shape-only tensors."""

    Tensor = ShapeTensor
    Size = tuple
    float16 = DType("float16", 2, True)
    bfloat16 = DType("bfloat16", 2, True)
    float32 = DType("float32", 4, True)
    float64 = DType("float64", 8, True)
    int8 = DType("int8", 1, False)
    int32 = DType("int32", 4, False)
    int64 = DType("int64", 8, False)
    compiler = _Compiler
    _C = None  # (torch's C allocator: kernels._direct falls back to the plain one)

    @staticmethod
    def device(kind: str | Device, index: int | None = None) -> Device:
        return kind if isinstance(kind, Device) else Device(kind, index)  # (torch.device(a device) is that device)

    @staticmethod
    def empty(*shape: Any, dtype: DType | None = None, device: Any = None) -> ShapeTensor:
        dims = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return ShapeTensor(dims, dtype or ShapesTorch.float32)

    zeros = empty

    @staticmethod
    def full(shape: Any, fill_value: Any, dtype: DType | None = None, device: Any = None) -> ShapeTensor:
        return ShapeTensor(shape, dtype or ShapesTorch.float32)

    @staticmethod
    def empty_strided(shape: Any, strides: Any, dtype: DType | None = None, device: Any = None) -> ShapeTensor:
        return ShapeTensor(shape, dtype or ShapesTorch.float32, strides)


TORCH = ShapesTorch()
