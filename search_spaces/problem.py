"""Parsing of shape strings and dtype names, shared by every problem type, and `ProblemBase`: what a problem
type gives the engine unless it says otherwise."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any, ClassVar

from kernels._torch import lazy
from search_spaces.errors import AutotunerError

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)


class ProblemError(AutotunerError, ValueError):
    """A shape string, dtype or option that no problem of this op accepts."""


DTYPE_ALIASES: dict[str, str] = {
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
}
ELEMENT_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4}


def torch_dtype_of(name: str) -> torch.dtype:
    """The torch dtype of a canonical dtype name ("float16" -> torch.float16)."""
    dtype = getattr(torch, name) if name in ELEMENT_BYTES else None
    if dtype is None:
        raise ProblemError(f"unsupported dtype {name!r}; accepted: {', '.join(ELEMENT_BYTES)}")
    return dtype


def seeded(device: str, seed: int) -> torch.Generator | None:
    """A generator on the device the inputs live on: a problem's inputs are drawn there (millions of normals on the
    CPU are slow, in the trial process and in every compile process), the same in every process of the host. None
    for meta tensors (a compile pool process's inputs: shapes without values)."""
    if str(device) == "meta":
        return None
    return torch.Generator(device=device).manual_seed(seed)


def normal(shape: tuple[int, ...], g: torch.Generator | None, device: str, dtype: torch.dtype, scale: float = 1.0,
           shift: float = 0.0) -> torch.Tensor:
    """`shift + scale * N(0, 1)` values of `shape` on `device` cast to `dtype`; on meta (a compile process's inputs) an
    empty tensor, since meta arithmetic imports torch's Python meta kernels."""
    if str(device) == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    x = torch.randn(*shape, generator=g, device=device)
    if scale != 1.0:
        x = scale * x
    if shift:
        x = shift + x
    return x.to(dtype)


def parse_dtype(name: object, accepted: tuple[str, ...]) -> str:
    """Canonical dtype name ('float16', 'bfloat16', 'float32') from a name, alias or torch.dtype."""
    if type(name).__module__ == "torch":  # a torch.dtype (checked by name: planning imports no torch)
        name = str(name).removeprefix("torch.")
    canon = DTYPE_ALIASES.get(name.strip().lower()) if isinstance(name, str) else None
    if canon is None or canon not in accepted:
        raise ProblemError(f"unsupported dtype {name!r}; accepted: {', '.join(accepted)}")
    return canon


_DIMS = re.compile(r"^\s*\d+(\s*[xX,*]\s*\d+)*\s*$")


def parse_dims(shape: object, counts: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Split '4096x4096' into positive ints, requiring one of `counts` dimensions (layout names them)."""
    if isinstance(shape, (tuple, list)):
        dims = tuple(shape)
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            raise ProblemError(f"bad shape {shape!r}: dimensions must be integers; expected {layout}")
    elif isinstance(shape, str) and _DIMS.match(shape):
        dims = tuple(int(p) for p in re.split(r"\s*[xX,*]\s*", shape.strip()))
    else:
        raise ProblemError(f"bad shape string {shape!r}; expected {layout} (positive integers joined by 'x')")
    if len(dims) not in counts:
        want = " or ".join(str(c) for c in counts)
        raise ProblemError(f"shape {shape!r} has {len(dims)} dimension(s), expected {want}: {layout}")
    if any(d < 1 for d in dims):
        raise ProblemError(f"shape {shape!r}: every dimension must be at least 1; expected {layout}")
    return dims


DIM = r"[1-9][0-9]{0,8}"  # a dimension as the HTTP schema states it: 1 to 999,999,999 (within int32 indexing)


def dims_pattern(counts: tuple[int, ...], last: str = DIM) -> str:
    """The regular expression of a shape string with one of `counts` dimensions joined by 'x' (the last one
    matching `last`), as the OpenAPI schema states it."""
    most, least = max(counts), min(counts)
    repeat = f"{{{most - 1}}}" if least == most else f"{{{least - 1},{most - 1}}}"
    return f"^({DIM}x){repeat}{last}$"


def dims_str(*dims: int) -> str:
    return "x".join(str(d) for d in dims)


class ProblemBase:
    """The engine's defaults for a frozen-dataclass problem type (search_spaces.contract.ProblemType): a nearest
    problem must share every text and boolean field (the dtype and the options), and no group ranks first. A
    problem type overrides what its op rules otherwise (matmul: the same N and K first)."""

    shape_flags: ClassVar[tuple[str, ...]] = ()  # dimensions a command line may give one by one (matmul: M, N, K)

    def match_fields(self) -> dict[str, Any]:
        """What a nearest tuned problem must share with this one."""
        fields = dataclasses.asdict(self)  # type: ignore[call-overload]
        return {k: v for k, v in fields.items() if isinstance(v, (str, bool))}

    def nearest_group(self) -> tuple[Any, ...]:
        """Problems sharing this with this one rank before all others (every problem shares the empty group)."""
        return ()

    def bucket(self) -> Any:
        """The problem whose tuned result serves this one when it has none of its own (its bucket's
        representative); by default itself: no buckets."""
        return self


def pow2_bucket(value: int) -> int:
    """The bucket of a size: the power of two at or above it (1000 -> 1024, 1024 -> 1024, 1 -> 1)."""
    return 1 << max(0, (int(value) - 1).bit_length())
