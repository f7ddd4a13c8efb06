"""A decorated kernel's keys (the `key` arguments' values and tensor dtypes), the problem a key names, and the launch
that first met it. With buckets (`buckets={"M": "pow2"}` or a function to a bucket's representative), the representative
replaces the value: one resolution and one stored result per bucket."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from autotuner.base.device import DeviceInfo, current_device
from autotuner.decorator.kernel_problem import KernelProblem, dtype_name
from search_spaces.problem import pow2_bucket

BUCKETS: dict[str, Callable[[Any], Any]] = {"pow2": lambda v: pow2_bucket(v) if isinstance(v, int) and v > 0 else v}
Bucket = str | Callable[[Any], Any]


def bucket_functions(kernel: str, buckets: Mapping[str, Bucket] | None, keys: list[str]) -> dict[str, Callable[[Any], Any]]:
    """The decorator's `buckets`, checked: key argument -> the function from its value to its bucket's
    representative."""
    out: dict[str, Callable[[Any], Any]] = {}
    for name, how in (buckets or {}).items():
        if name not in keys:
            raise ValueError(f"{kernel}: buckets names {name!r}, which is not a key argument; key: {', '.join(keys)}")
        if callable(how):
            out[name] = how
        elif how in BUCKETS:
            out[name] = BUCKETS[how]
        else:
            raise ValueError(f"{kernel}: bucket {how!r} for {name!r} is not known; give one of {', '.join(BUCKETS)} "
                             "or a function from a value to its bucket's representative")
    return out


class Keys:
    """Keys and problems of one kernel: `keys` are its key arguments' names, `arg_names` all its arguments',
    `buckets` the key arguments whose values are bucketed (name -> value -> representative)."""

    def __init__(self, keys: list[str], arg_names: list[str],
                 buckets: Mapping[str, Callable[[Any], Any]] | None = None) -> None:
        self.keys, self.arg_names = keys, arg_names
        self.buckets = dict(buckets or {})
        self._positions = [arg_names.index(k) for k in keys]
        self._bucketed = [(i, self.buckets[k]) for i, k in enumerate(keys) if k in self.buckets]

    def key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The cache key of a launch: each key argument's value (its bucket's representative, where bucketed),
        then every tensor argument's dtype."""
        n = len(args)
        key = [args[p] if p < n else kwargs.get(name) for name, p in zip(self.keys, self._positions, strict=True)]
        for i, bucket in self._bucketed:
            key[i] = bucket(key[i])
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
            if k in self.buckets:
                v = self.buckets[k](v)
            values.append((k, v if isinstance(v, (int, float, bool, str)) or v is None else str(v)))
        tensors = [named[n] for n in self.arg_names if hasattr(named.get(n), "dtype")]
        return KernelProblem(tuple(values), tuple(dtype_name(t.dtype) for t in tensors), call)

    def miss(self, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any, warmup: bool = False) -> Miss:
        named = self.named(args, kwargs)
        tensor = next((v for v in named.values() if isinstance(v, torch.Tensor)), None)
        device = current_device(tensor.device.index if tensor is not None and tensor.device.type == "cuda" else None)
        bucketed = any(self.buckets[k](named.get(k)) != named.get(k) for k in self.buckets)
        return Miss(args=args, kwargs=kwargs, grid=grid, warmup=warmup, named=named, problem=self.problem(named),
                    device=device, extra={k: v for k, v in kwargs.items() if k not in self.arg_names},
                    bucketed=bucketed)


@dataclass(frozen=True, kw_only=True)
class Miss:
    """A launch whose key this process has not resolved yet: what the miss policy and an in-process tuning
    work from."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    grid: Any
    warmup: bool
    named: dict[str, Any]  # the kernel's arguments by name
    extra: dict[str, Any]  # keyword arguments that are not the kernel's (launch options such as num_warps)
    problem: KernelProblem  # its key values bucketed, where the kernel declares buckets
    device: DeviceInfo
    bucketed: bool = False  # a key value differs from its bucket's representative
    pruned: list[Any] | None = field(default=None, compare=False)  # the list as pruned for it, once (KernelSpec)

    @property
    def nargs(self) -> dict[str, Any]:
        """The positional arguments by name: what Triton's Autotuner hands its pruning as `nargs`."""
        return dict(zip(self.named, self.args, strict=False))

    @property
    def prune_kwargs(self) -> dict[str, Any]:
        """The keyword arguments Triton's Autotuner hands its pruning: `grid` and `warmup`, then the launch's."""
        return {"grid": self.grid, "warmup": self.warmup, **self.kwargs}
