"""The library calls: torch-like functions that launch the built-in kernels with their tuned config.

    import autotuner
    y = autotuner.softmax(x)                     # the tuned config, resolved once per input signature
    y = autotuner.softmax(x, config={...})       # an explicit config wins (checked on every call)

The first call with a new input signature (dtypes, shapes, strides, devices, 16-byte alignment, and the call's
own options) checks the inputs in full, resolves the config (autotuner.launch.lookup: local database, service, nearest
tuned problem, default) and keeps the kernel module's prepared launcher (`prepare`) for that signature. Later
calls with the same signature look the launcher up and launch: no checks again, and on a GPU no argument
binding by Triton either (kernels/_direct.py). A config that is not an exact tuned result is looked up again
after `RECHECK_S`, so results tuned meanwhile arrive. Under torch.compile the calls trace through the checked
launchers with the config an eager call resolved; CUDA graphs capture them as they are.

These live in the engine, not in `kernels/`: resolving a config needs the database, the service and the search
spaces, and the ground floor (`kernels/`) imports nothing from above it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from autotuner.launch import binary_cache
from kernels import attention as k_attention
from kernels import gelu as k_gelu
from kernels import layernorm as k_layernorm
from kernels import matmul as k_matmul
from kernels import softmax as k_softmax

for _module in (k_attention, k_gelu, k_layernorm, k_matmul, k_softmax):  # their first launch in a process loads
    for _value in vars(_module).values():  # the kept binary instead of computing Triton's cache key
        binary_cache.install(_value)

MAX_ENTRIES = 4096  # input signatures kept per process; past that the cache starts over
ACTIVATIONS = {None: "", "relu": "relu", "gelu": "gelu"}


class _Hit:
    __slots__ = ("launch", "expires", "config")

    def __init__(self, launch: Callable[..., torch.Tensor], expires: float, config: dict[str, Any]) -> None:
        self.launch, self.expires, self.config = launch, expires, config


_HITS: dict[tuple[Any, ...], _Hit] = {}
_CONFIGS: dict[tuple[Any, ...], dict[str, Any]] = {}  # signature without pointers -> config, for traced calls
_now = time.monotonic


def _resolve(op_name: str, inputs: dict[str, Any], device: torch.device) -> tuple[dict[str, Any], float]:
    """The config for these inputs, and until when it holds (forever for an exact result)."""
    from autotuner.base.device import current_device
    from autotuner.base.registry import get_op
    from autotuner.launch.lookup import RECHECK_S, resolver

    op = get_op(op_name)
    info = current_device(device.index if device.type == "cuda" else None)
    res = resolver().resolve(op, op.problem_from_inputs(inputs), info)
    return res.config, (float("inf") if res.source == "exact" else _now() + RECHECK_S)


def _keep(key: tuple[Any, ...], traced: tuple[Any, ...], launch: Callable[..., torch.Tensor], config: dict[str, Any],
          expires: float) -> None:
    if len(_HITS) >= MAX_ENTRIES:
        _HITS.clear()
        _CONFIGS.clear()
    _HITS[key] = _Hit(launch, expires, config)
    _CONFIGS[traced] = config


def _traced_config(op_name: str, traced: tuple[Any, ...]) -> dict[str, Any]:
    """Inside torch.compile's tracing: the config an eager call resolved (tensors there have no data pointers)."""
    config = _CONFIGS.get(traced)
    if config is None:
        raise RuntimeError(f"autotuner.{op_name}: no config resolved for these inputs yet; call it once outside "
                           "torch.compile (eagerly) before compiling, so the lookup runs outside the graph")
    return config


def clear_cache() -> None:
    """Forget every resolved config and prepared launcher in this process."""
    _HITS.clear()
    _CONFIGS.clear()


def _sig(t: torch.Tensor | None) -> tuple[Any, ...] | None:
    if t is None:
        return None
    return (t.shape, t.stride(), t.dtype, t.device)


def _tensors(**given: Any) -> None:
    """A clear TypeError for an argument that is not a tensor (before a key is built from it)."""
    for name, t in given.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def softmax(x: torch.Tensor, config: Mapping[str, Any] | None = None) -> torch.Tensor:
    """softmax(x, dim=-1), like torch.softmax."""
    if config is not None:
        return k_softmax.softmax(x, config)
    if torch.compiler.is_compiling():
        traced = ("softmax", x.shape, x.stride(), x.dtype, x.device)
        return k_softmax.softmax(x, _traced_config("softmax", traced))
    try:
        key = ("softmax", x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16)
    except AttributeError:
        _tensors(x=x)
        raise
    hit = _HITS.get(key)
    if hit is not None and hit.expires > _now():
        return hit.launch(x)
    cfg, expires = _resolve("softmax", {"x": x}, x.device)
    launch = k_softmax.prepare(x, cfg)
    _keep(key, key[:-1], launch, cfg, expires)
    return launch(x)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5, config: Mapping[str, Any] | None = None) -> torch.Tensor:
    """Layer normalisation over the last dimension, like torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)."""
    if config is not None:
        return k_layernorm.layer_norm(x, weight, bias, eps, config)
    if torch.compiler.is_compiling():
        traced = ("layernorm", x.shape, x.stride(), x.dtype, x.device, _sig(weight), _sig(bias), eps)
        cfg = _traced_config("layernorm", traced)
        return k_layernorm.layer_norm(x, weight, bias, eps, cfg)
    try:
        key = ("layernorm", x.shape, x.stride(), x.dtype, x.device, _sig(weight), _sig(bias), eps,
               x.data_ptr() % 16, weight.data_ptr() % 16 if weight is not None else 0,
               bias.data_ptr() % 16 if bias is not None else 0)
    except AttributeError:
        _tensors(x=x, **{n: t for n, t in (("weight", weight), ("bias", bias)) if t is not None})
        raise
    hit = _HITS.get(key)
    if hit is not None and hit.expires > _now():
        return hit.launch(x, weight, bias)
    cfg, expires = _resolve("layernorm", {"x": x}, x.device)
    launch = k_layernorm.prepare(x, weight, bias, eps, cfg)
    _keep(key, key[:-3], launch, cfg, expires)
    return launch(x, weight, bias)


def gelu(x: torch.Tensor, approximate: str = "tanh", config: Mapping[str, Any] | None = None) -> torch.Tensor:
    """GELU, like torch.nn.functional.gelu(x, approximate=...); 'tanh' or 'none' (exact)."""
    if config is not None:
        return k_gelu.gelu(x, config, approximate)
    if torch.compiler.is_compiling():
        traced = ("gelu", x.shape, x.stride(), x.dtype, x.device, approximate)
        return k_gelu.gelu(x, _traced_config("gelu", traced), approximate)
    try:
        key = ("gelu", x.shape, x.stride(), x.dtype, x.device, approximate, x.data_ptr() % 16)
    except AttributeError:
        _tensors(x=x)
        raise
    hit = _HITS.get(key)
    if hit is not None and hit.expires > _now():
        return hit.launch(x)
    if approximate not in ("tanh", "none"):  # before the lookup, which would name the problem's field instead
        raise ValueError(f"approximate={approximate!r} is not supported; accepted: tanh, none")
    cfg, expires = _resolve("gelu", {"x": x, "approximate": approximate}, x.device)
    launch = k_gelu.prepare(x, cfg, approximate)
    _keep(key, key[:-1], launch, cfg, expires)
    return launch(x)


def _epilogue(bias: torch.Tensor | None, activation: str | None) -> str:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r} is not supported; accepted: None, 'relu', 'gelu'")
    act = ACTIVATIONS[activation]
    return ("bias_" + act if act else "bias") if bias is not None else (act or "none")


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None,
           config: Mapping[str, Any] | None = None) -> torch.Tensor:
    """a @ b (+ bias) (then relu or gelu), for 2-D a (M, K) and b (K, N); the output has a's dtype."""
    if config is not None:
        return k_matmul.matmul(a, b, config, bias=bias, epilogue=_epilogue(bias, activation))
    if torch.compiler.is_compiling():
        epilogue = _epilogue(bias, activation)
        traced = ("matmul", _sig(a), _sig(b), _sig(bias), epilogue)
        cfg = _traced_config("matmul", traced)
        return k_matmul.matmul(a, b, cfg, bias=bias, epilogue=epilogue)
    try:
        key = ("matmul", _sig(a), _sig(b), _sig(bias), activation, a.data_ptr() % 16, b.data_ptr() % 16,
               bias.data_ptr() % 16 if bias is not None else 0)
    except AttributeError:
        _tensors(a=a, b=b, **({"bias": bias} if bias is not None else {}))
        raise
    hit = _HITS.get(key)
    if hit is not None and hit.expires > _now():
        return hit.launch(a, b, bias)
    epilogue = _epilogue(bias, activation)
    cfg, expires = _resolve("matmul", {"a": a, "b": b, "bias": bias, "epilogue": epilogue}, a.device)
    launch = k_matmul.prepare(a, b, cfg, bias, epilogue)
    _keep(key, ("matmul", _sig(a), _sig(b), _sig(bias), epilogue), launch, cfg, expires)
    return launch(a, b, bias)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None, config: Mapping[str, Any] | None = None) -> torch.Tensor:
    """Flash attention over (batch, heads, seq, head_dim), like F.scaled_dot_product_attention(q, k, v, is_causal=...)."""
    if config is not None:
        return k_attention.attention(q, k, v, config, causal=causal, sm_scale=sm_scale)
    if torch.compiler.is_compiling():
        traced = ("attention", _sig(q), _sig(k), _sig(v), bool(causal), sm_scale)
        cfg = _traced_config("attention", traced)
        return k_attention.attention(q, k, v, cfg, causal=causal, sm_scale=sm_scale)
    try:
        key = ("attention", _sig(q), _sig(k), _sig(v), bool(causal), sm_scale, q.data_ptr() % 16,
               k.data_ptr() % 16, v.data_ptr() % 16)
    except AttributeError:
        _tensors(q=q, k=k, v=v)
        raise
    hit = _HITS.get(key)
    if hit is not None and hit.expires > _now():
        return hit.launch(q, k, v)
    cfg, expires = _resolve("attention", {"q": q, "k": k, "v": v, "causal": causal}, q.device)
    launch = k_attention.prepare(q, k, v, cfg, causal, sm_scale)
    _keep(key, key[:-3], launch, cfg, expires)
    return launch(q, k, v)
