"""Library calls used like torch functions; with no `config` they launch with their tuned config.

    y = kernels.softmax(x)                     # resolves a config once per problem, then a dict lookup
    y = kernels.softmax(x, config={...})       # an explicit config wins

Resolution (autotuner.lookup): in-process cache, local database, remote service, nearest tuned problem,
space default. The first launch of a problem pays for the resolution; later ones pay a dict lookup.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from typing import Any

import torch

_attention = importlib.import_module("kernels.attention")
_gelu = importlib.import_module("kernels.gelu")
_layernorm = importlib.import_module("kernels.layernorm")
_matmul = importlib.import_module("kernels.matmul")
_softmax = importlib.import_module("kernels.softmax")

# (op, problem-identifying values, device) -> (config, expiry or None for an exact result)
_FAST: dict[tuple[Any, ...], tuple[dict[str, Any], float | None]] = {}
ACTIVATIONS = {None: "", "relu": "relu", "gelu": "gelu"}


def _resolve(op: str, inputs: dict[str, Any], key: tuple[Any, ...], device: torch.device) -> dict[str, Any]:
    from autotuner.device import current_device
    from autotuner.lookup import RECHECK_S, resolve
    from autotuner.registry import get_op

    entry = get_op(op)
    info = current_device(None if device.type != "cuda" else device.index)
    res = resolve(entry, entry.problem_from_inputs(inputs), info)
    _FAST[key] = (res.config, None if res.source == "exact" else time.monotonic() + RECHECK_S)
    return res.config


def _cached(key: tuple[Any, ...]) -> dict[str, Any] | None:
    hit = _FAST.get(key)
    if hit is not None and (hit[1] is None or hit[1] > time.monotonic()):
        return hit[0]
    return None


def clear_cache() -> None:
    """Forget resolved configs in this process (the resolver's own cache too)."""
    _FAST.clear()
    from autotuner.lookup import resolver

    resolver().clear()


def softmax(x: torch.Tensor, config: Mapping[str, Any] | None = None) -> torch.Tensor:
    """softmax(x, dim=-1), like torch.softmax."""
    if config is None:
        key = ("softmax", x.numel(), x.shape[-1] if x.dim() else 0, x.dtype, x.device)
        config = _cached(key) or _resolve("softmax", {"x": x}, key, x.device)
    return _softmax.softmax(x, config)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5, config: Mapping[str, Any] | None = None) -> torch.Tensor:
    """Layer normalisation over the last dimension, like torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)."""
    if config is None:
        key = ("layernorm", x.numel(), x.shape[-1] if x.dim() else 0, x.dtype, x.device)
        config = _cached(key) or _resolve("layernorm", {"x": x}, key, x.device)
    return _layernorm.layer_norm(x, weight, bias, eps, config)


def gelu(x: torch.Tensor, approximate: str = "tanh", config: Mapping[str, Any] | None = None) -> torch.Tensor:
    """GELU, like torch.nn.functional.gelu(x, approximate=...); 'tanh' or 'none' (exact)."""
    if config is None:
        key = ("gelu", x.numel(), x.dtype, x.device, approximate)
        config = _cached(key) or _resolve("gelu", {"x": x, "approximate": approximate}, key, x.device)
    return _gelu.gelu(x, config, approximate)


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None,
           config: Mapping[str, Any] | None = None) -> torch.Tensor:
    """a @ b (+ bias) (then relu or gelu), for 2-D a (M, K) and b (K, N); the output has a's dtype."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r} is not supported; accepted: None, 'relu', 'gelu'")
    act = ACTIVATIONS[activation]
    epilogue = ("bias_" + act if act else "bias") if bias is not None else (act or "none")
    if config is None:
        key = ("matmul", tuple(a.shape), tuple(b.shape), a.dtype, a.device, epilogue)
        config = _cached(key) or _resolve("matmul", {"a": a, "b": b, "bias": bias, "epilogue": epilogue}, key,
                                          a.device)
    return _matmul.matmul(a, b, config, bias=bias, epilogue=epilogue)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None, config: Mapping[str, Any] | None = None) -> torch.Tensor:
    """Flash attention over (batch, heads, seq, head_dim), like F.scaled_dot_product_attention(q, k, v, is_causal=...)."""
    if config is None:
        key = ("attention", tuple(q.shape), q.dtype, q.device, bool(causal))
        config = _cached(key) or _resolve("attention", {"q": q, "k": k, "v": v, "causal": causal}, key, q.device)
    return _attention.attention(q, k, v, config, causal=causal, sm_scale=sm_scale)
