"""A decorated kernel's problem: its `key` arguments' values and tensor dtypes (as `@triton.autotune` keys its cache),
plus, when recorded, what a worker needs to replay the launch. More: docs/design/launch.md."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from kernels._shapes import Form
from search_spaces.problem import ProblemBase, ProblemError

_TEXT_CHARS = "A-Za-z0-9_.+-"  # a text value's characters (quoted in a key: `"text"`)
KEY_VALUE = rf'[A-Za-z_][A-Za-z0-9_]*=["{_TEXT_CHARS}]{{1,40}}'  # the same in Python and ECMA regexes
_TEXT = re.compile(f"[{_TEXT_CHARS}]{{0,38}}")  # a text that fits a key value once quoted
SHAPE_PATTERN = f"^{KEY_VALUE}(,{KEY_VALUE})*$|^$"
_SHAPE = re.compile(SHAPE_PATTERN)  # compiled at import: a launch's first miss parses shapes
SCALARS = (int, float, bool, str, type(None))


def key_text(value: str) -> str:
    """A text as a problem key's value takes it: the text itself where it fits (KEY_VALUE), else a digest of it."""
    return value if _TEXT.fullmatch(value) else "h" + hashlib.sha256(value.encode()).hexdigest()[:12]


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _value_text(v: Any) -> str:
    return json.dumps(v) if isinstance(v, str) else str(v)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class KernelProblem(ProblemBase):
    values: tuple[tuple[str, Any], ...]  # the key arguments: (name, value), in key order
    dtypes: tuple[str, ...]  # the dtypes of the tensor arguments, in argument order
    call: dict[str, Any] | None = field(default=None, compare=False, hash=False)  # a recorded launch (see module)
    layout: ClassVar[str] = "NAME=VALUE,... of the key arguments, e.g. M=4096,N=4096,K=4096"
    shape_pattern: ClassVar[str] = SHAPE_PATTERN

    def __post_init__(self) -> None:  # from JSON: lists back to tuples
        object.__setattr__(self, "values", tuple((str(k), v) for k, v in self.values))
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        # What lookups ask of a key again and again (a launching process ranks every tuned key against a new
        # one), worked out once: the problem is frozen.
        shape = ",".join(f"{k}={_value_text(v)}" for k, v in self.values)
        dtype = self.dtypes[0] if len(set(self.dtypes)) == 1 else ",".join(self.dtypes)
        object.__setattr__(self, "_shape", shape)
        object.__setattr__(self, "_dtype", dtype)
        object.__setattr__(self, "_key", f"{shape}:{dtype}")
        object.__setattr__(self, "_dims", tuple(v for _, v in self.values if _positive(v)))
        object.__setattr__(self, "_match", {"dtype": dtype, **{k: v for k, v in self.values if not _positive(v)}})

    @classmethod
    def parse(cls, shape: object, dtype: object = "", call: dict[str, Any] | None = None) -> KernelProblem:
        text = str(shape).strip()
        if text and not _SHAPE.match(text):
            raise ProblemError(f"bad key {shape!r}; expected {cls.layout}")
        values = tuple((k, _parse_value(v)) for k, v in (part.split("=", 1) for part in text.split(",") if part))
        dtypes = tuple(d for d in str(dtype).split(",") if d) if dtype else ()
        return cls(values, dtypes, call)

    def value_fault(self) -> str | None:
        """Why a key value is not one a launch makes (each a finite number within 64 bits, a string, a bool or
        None), the first found; None when all are."""
        for name, value in self.values:
            if isinstance(value, float) and not math.isfinite(value):
                return f"{name}={value}: a key value is a finite number"
            if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) >= 2**63:
                return f"{name}={value}: a key value fits in 64 bits"
            if not isinstance(value, int | float | str | bool) and value is not None:
                return f"{name}: {type(value).__name__} is not a key value (a number, a string, a bool)"
        return None

    @property
    def shape(self) -> str:
        return self._shape  # type: ignore[no-any-return, attr-defined]

    @property
    def dtype(self) -> str:
        return self._dtype  # type: ignore[no-any-return, attr-defined]

    @property
    def key(self) -> str:
        return self._key  # type: ignore[no-any-return, attr-defined]

    def dims(self) -> tuple[float, ...]:
        """The positive numbers among the key values: what the nearest tuned key is measured by."""
        return self._dims  # type: ignore[no-any-return, attr-defined]

    def match_fields(self) -> dict[str, Any]:
        """What a nearest tuned key must share: the dtypes (as the key writes them) and every key value that is not a
        positive number."""
        return self._match  # type: ignore[no-any-return, attr-defined]

    def __getitem__(self, name: str) -> Any:
        """A key argument's value (for a space's constraints and default)."""
        return dict(self.values)[name]

    def get(self, name: str, default: Any = None) -> Any:
        return dict(self.values).get(name, default)


class TensorForm(Form):
    """A tensor argument's form without its data (shape, strides, dtype, device): what recording a launch reads,
    so that a recording still waiting on another thread holds no tensor of the launch."""

    __slots__ = ()

    def __init__(self, t: torch.Tensor) -> None:
        super().__init__(t.shape, t.stride(), t.dtype, t.device)


def forms(named: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments with each tensor replaced by its form (TensorForm)."""
    return {k: TensorForm(v) if isinstance(v, torch.Tensor) else v for k, v in named.items()}


def record_call(arg_names: list[str], named: Mapping[str, Any], grids: Mapping[str, tuple[int, ...]],
                pruned: list[str] | None = None) -> dict[str, Any]:
    """What a worker needs to replay a launch: each argument's form, the grid of each candidate config, and
    (`pruned`) the keys of the configs the kernel's pruning left for it, which are all a worker measures."""
    args: dict[str, Any] = {}
    for name in arg_names:
        if name not in named:
            continue
        v = named[name]
        if isinstance(v, torch.Tensor | TensorForm):
            args[name] = {"tensor": {"shape": list(v.shape), "stride": list(v.stride()), "dtype": dtype_name(v.dtype)}}
        elif isinstance(v, SCALARS):
            args[name] = {"value": v}
        else:
            raise TypeError(f"argument {name} is a {type(v).__name__}, which a recorded call cannot hold (tensors, "
                            "numbers, booleans, strings and None can be recorded)")
    call: dict[str, Any] = {"args": args, "grids": {k: list(g) for k, g in grids.items()}}
    if pruned is not None:
        call["pruned"] = list(pruned)
    return call


def pruned_keys(call: Mapping[str, Any] | None) -> list[str] | None:
    """The config keys a recorded call's pruning left (None: it records none, or not as a list of keys)."""
    pruned = call.get("pruned") if call else None
    if not isinstance(pruned, list) or not all(isinstance(k, str) for k in pruned):
        return None
    return pruned


def rebuild_args(call: Mapping[str, Any], device: str, seed: int = 0) -> dict[str, Any]:
    """Arguments of the recorded form: tensors of the same shape, strides and dtype (random normal floats, integer
    zeros; none on meta), other values as recorded."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    out: dict[str, Any] = {}
    for name, spec in call["args"].items():
        if "tensor" not in spec:
            out[name] = spec["value"]
            continue
        t = spec["tensor"]
        dtype = getattr(torch, t["dtype"], None)
        if not isinstance(dtype, torch.dtype):
            raise ProblemError(f"argument {name}: unknown dtype {t['dtype']!r}")
        size = 1 + sum((s - 1) * st for s, st in zip(t["shape"], t["stride"], strict=True)) if all(t["shape"]) else 0
        if str(device) == "meta":
            flat = torch.empty(size, dtype=dtype, device="meta")
        elif dtype.is_floating_point:
            flat = torch.randn(size, generator=g).to(dtype)
        else:
            flat = torch.zeros(size, dtype=dtype)
        out[name] = torch.as_strided(flat.to(device), t["shape"], t["stride"])
    return out
