"""Parsing of shape strings and dtype names, shared by every problem type."""

from __future__ import annotations

import re

import torch


class ProblemError(ValueError):
    """A shape string, dtype or option that no problem of this op accepts."""


DTYPE_ALIASES: dict[str, str] = {
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
}
TORCH_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
}
ELEMENT_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4}


def parse_dtype(name: object, accepted: tuple[str, ...]) -> str:
    """Canonical dtype name ('float16', 'bfloat16', 'float32') from a name, alias or torch.dtype."""
    if isinstance(name, torch.dtype):
        name = str(name).removeprefix("torch.")
    canon = DTYPE_ALIASES.get(str(name).strip().lower()) if isinstance(name, str) else None
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
