"""Input validation shared by the launchers: every failure names what was wrong and what is accepted."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kernels._environment import env_flag
from kernels._torch import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)


def check_tensor(name: str, t: Any, dtypes: Iterable[str], ndim: int | tuple[int, ...] | None = None) -> None:
    """Raise a clear TypeError/ValueError when `t` is not a tensor of an accepted dtype (by name: "float16") and
    rank."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    dtypes = tuple(dtypes)
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in dtypes:
        raise TypeError(f"{name} has dtype {dtype}; accepted: {', '.join(dtypes)}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if t.dim() not in allowed:
            raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} dimensions, got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); every dimension must be at least 1")


def check_same_device(**tensors: torch.Tensor | None) -> torch.device:
    """All given tensors live on one device; on a GPU build that device must be CUDA."""
    present = {k: v for k, v in tensors.items() if v is not None}
    devices = {k: v.device for k, v in present.items()}
    first = next(iter(devices.values()))
    for _k, d in devices.items():
        if d != first:
            listing = ", ".join(f"{n} on {dv}" for n, dv in devices.items())
            raise ValueError(f"all tensors must be on one device; got {listing}")
    from kernels import _backend
    from kernels._backend import interpreting

    if not interpreting() and first.type != "cuda" and not (first.type == "meta" and _backend.COMPILE_ONLY):
        raise ValueError(f"tensors are on {first}; Triton kernels need CUDA tensors (or TRITON_INTERPRET=1 for CPU)")
    if interpreting() and first.type != "cpu":
        raise ValueError(f"tensors are on {first}; in Triton's interpreter (TRITON_INTERPRET=1) they must be on the CPU")
    return first


def check_last_dim_contiguous(name: str, t: torch.Tensor) -> None:
    if t.stride(-1) != 1 and t.shape[-1] != 1:
        raise ValueError(
            f"{name} must be contiguous in its last dimension (stride 1), got strides {tuple(t.stride())}; "
            "call .contiguous() first"
        )


def check_config(config: Mapping[str, Any], required: Iterable[str], kernel: str,
                 optional: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The launcher takes an explicit config: every tunable name must be there and be a positive int; the
    `optional` ones take their given value when left out; a name the kernel does not take is refused."""
    if not isinstance(config, Mapping):
        raise TypeError(f"{kernel}: config must be a mapping of parameter names to ints, got {type(config).__name__}")
    optional = optional or {}
    known = {*required, *optional, "num_warps", "num_stages"}
    unknown = sorted(str(k) for k in config if k not in known)
    if unknown:  # a misspelt or another kernel's parameter would otherwise be ignored
        raise ValueError(f"{kernel}: unknown config parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    cfg = {**optional, **config}
    missing = [k for k in required if k not in cfg]
    if missing:
        raise ValueError(f"{kernel}: config is missing {', '.join(missing)}; required: {', '.join(required)}")
    for k in [*required, *optional, "num_warps", "num_stages"]:
        v = cfg.get(k)
        if v is None and k in ("num_warps", "num_stages"):
            continue
        least = 0 if k in optional else 1  # an optional one may be a 0/1 switch
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            kind = "a non-negative" if least == 0 else "a positive"
            raise ValueError(f"{kernel}: config[{k!r}] must be {kind} int, got {v!r}")
    cfg.setdefault("num_warps", 4)
    cfg.setdefault("num_stages", 2)
    return cfg


def is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def check_pow2(kernel: str, cfg: Mapping[str, Any], names: Iterable[str]) -> None:
    for n in names:
        if not is_pow2(cfg[n]):
            raise ValueError(f"{kernel}: config[{n!r}] must be a power of two, got {cfg[n]}")


_POISON = env_flag("AUTOTUNER_POISON_OUTPUTS")


def poison_outputs(enabled: bool) -> bool:
    """Fill new outputs with NaN (for correctness checks) or not (for launches and timing); returns the old value."""
    global _POISON
    old, _POISON = _POISON, enabled
    return old


def new_output(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An output buffer. While poisoning is on (tests, the tuner's correctness check) it starts as NaN, so an
    element the kernel never writes fails the comparison; otherwise it is uninitialised, costing no fill."""
    if _POISON:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)
