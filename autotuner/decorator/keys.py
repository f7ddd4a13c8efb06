"""A decorated kernel's keys, as `triton.autotune` keys its cache (the `key` arguments' values and the tensor
arguments' dtypes), the problem a key names in the database, and the launch that first met a key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from autotuner.base.device import DeviceInfo, current_device
from autotuner.decorator.kernel_problem import KernelProblem, dtype_name


class Keys:
    """Keys and problems of one kernel: `keys` are its key arguments' names, `arg_names` all its arguments'."""

    def __init__(self, keys: list[str], arg_names: list[str]) -> None:
        self.keys, self.arg_names = keys, arg_names
        self._positions = [arg_names.index(k) for k in keys]

    def key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The cache key of a launch: each key argument's value, then every tensor argument's dtype."""
        n = len(args)
        key = [args[p] if p < n else kwargs.get(name) for name, p in zip(self.keys, self._positions, strict=True)]
        for a in args:
            if hasattr(a, "dtype"):
                key.append(str(a.dtype))
        for name, a in kwargs.items():
            if hasattr(a, "dtype") and name in self.arg_names:
                key.append(str(a.dtype))
        return tuple(key)

    def named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The kernel's arguments by name (keyword arguments that are not the kernel's are left out)."""
        return {**dict(zip(self.arg_names, args, strict=False)),
                **{k: v for k, v in kwargs.items() if k in self.arg_names}}

    def problem(self, named: Mapping[str, Any], call: dict[str, Any] | None = None) -> KernelProblem:
        """The problem a launch's arguments name (with `call`: carrying the recorded launch)."""
        values = []
        for k in self.keys:
            v = named.get(k)
            values.append((k, v if isinstance(v, (int, float, bool, str)) or v is None else str(v)))
        tensors = [named[n] for n in self.arg_names if hasattr(named.get(n), "dtype")]
        return KernelProblem(tuple(values), tuple(dtype_name(t.dtype) for t in tensors), call)

    def miss(self, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any) -> Miss:
        named = self.named(args, kwargs)
        tensor = next((v for v in named.values() if isinstance(v, torch.Tensor)), None)
        device = current_device(tensor.device.index if tensor is not None and tensor.device.type == "cuda" else None)
        return Miss(args=args, kwargs=kwargs, grid=grid, named=named, problem=self.problem(named), device=device,
                    extra={k: v for k, v in kwargs.items() if k not in self.arg_names})


@dataclass(frozen=True, kw_only=True)
class Miss:
    """A launch whose key this process has not resolved yet: what the miss policy and an in-process tuning
    work from."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    grid: Any
    named: dict[str, Any]  # the kernel's arguments by name
    extra: dict[str, Any]  # keyword arguments that are not the kernel's (launch options such as num_warps)
    problem: KernelProblem
    device: DeviceInfo
