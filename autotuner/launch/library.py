"""The library calls: torch-like functions that launch the built-in kernels with their tuned config. More:
docs/design/launch.md."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import torch

from autotuner.launch import binary_cache, same_call
from search_spaces.contract import TunableOp

MAX_ENTRIES = 4096  # input signatures kept per process; past that the cache starts over


class _Hit(same_call.Followed):
    """A kept launch; `same`: whether a call's arguments are like those it was kept for."""

    __slots__ = ("launch", "pending", "config")

    def __init__(self, launch: Callable[..., torch.Tensor], pending: Any, config: dict[str, Any],
                 same: same_call.Check) -> None:
        super().__init__(same)
        self.launch, self.pending, self.config = launch, pending, config  # pending: None for an exact result


# per call: (signature, alignment) -> its kept launch, and the signature alone -> the config and whether torch's op
# serves it (for traced calls, whose tensors have no data pointers); tables of their own, so no key names the call
_HITS: dict[str, dict[tuple[Any, ...], _Hit]] = {}
_CONFIGS: dict[str, dict[tuple[Any, ...], tuple[dict[str, Any], bool]]] = {}
_CALLS: dict[str, Callable[..., Any]] = {}
# per call: [the hit tried before the key is built, the hit of the call before]
_LAST: dict[str, list[_Hit | None]] = {}
_LOCK = threading.Lock()


def _resolve(op: TunableOp[Any], inputs: dict[str, Any], device: torch.device) -> tuple[dict[str, Any], Any, bool]:
    """The config for these inputs; None for an exact result, else its Pending (when to ask again, and the meets that
    raise its job); and whether torch's op serves them (`Resolution.launches_torch`)."""
    from autotuner.base.device import current_device
    from autotuner.launch.lookup import pending, resolver

    info = current_device(device.index if device.type == "cuda" else None)
    problem = op.problem_from_inputs(inputs)
    resolving = resolver()
    res = resolving.resolve(op, problem, info)
    return (res.config, None if res.final else pending(op, problem, info),
            res.launches_torch and resolving.settings.torch_op)


def _keep(hits: dict[tuple[Any, ...], _Hit], configs: dict[tuple[Any, ...], tuple[dict[str, Any], bool]],
          key: tuple[Any, ...], launch: Callable[..., torch.Tensor], config: dict[str, Any], pending: Any,
          use_torch: bool, a: tuple[Any, ...]) -> None:
    """A resolved call (its face's arguments `a`) kept in its call's tables: the launch by signature and alignment,
    the config by signature."""
    if len(hits) >= MAX_ENTRIES:
        hits.clear()
        configs.clear()
    hits[key] = _Hit(launch, pending, config, same_call.check(a))
    configs[key[0]] = (config, use_torch)


def _torch_launch(torch_op: Callable[..., Any], a: tuple[Any, ...], positions: tuple[int, ...]) -> Callable[..., Any]:
    """A launch taking the arguments at `positions` (every tensor of the call) that gives torch's op them and the
    call's other arguments, kept from `a` without its tensors."""
    kept = list(a)
    for i in positions:
        kept[i] = None

    def launch(*args: Any) -> Any:
        call = kept.copy()
        for i, value in zip(positions, args, strict=True):
            call[i] = value
        return torch_op(*call)

    return launch


def _traced_config(name: str, signature: tuple[Any, ...]) -> tuple[dict[str, Any], bool]:
    """Inside torch.compile's tracing: the config an eager call resolved, and whether torch's op serves it
    (tensors there have no data pointers)."""
    found = _CONFIGS[name].get(signature)
    if found is None:
        raise RuntimeError(f"autotuner.{name}: no config resolved for these inputs yet; call it once outside "
                           "torch.compile (eagerly) before compiling, so the lookup runs outside the graph")
    return found


def clear_cache() -> None:
    """Forget every resolved config and prepared launcher in this process."""
    for hits in _HITS.values():
        hits.clear()
    for configs in _CONFIGS.values():
        configs.clear()
    for state in _LAST.values():
        state[:] = [None, None]


def _keep_binaries(op: TunableOp[Any]) -> None:
    """Every JITFunction of the op's kernel modules: its first launch in a process loads the kept binary instead
    of computing Triton's cache key."""
    for source in op.sources:
        for value in vars(source).values() if isinstance(source, ModuleType) else (source,):
            binary_cache.install(value)


def build(op: TunableOp[Any]) -> Callable[..., Any]:
    """`autotuner.<name>(...)` for an op that declares a library call."""
    lib = op.library
    if lib is None:
        raise ValueError(f"{op.name} declares no library call")
    _keep_binaries(op)
    face, signature, prepare, run, inputs, torch_op = lib.face, lib.signature, lib.prepare, lib.run, lib.inputs, \
        lib.torch_op
    if torch_op is not None and set(lib.tensors) - set(lib.launch_args):
        raise ValueError(f"{op.name}: a library call with a torch_op launches with every tensor (launch_args)")
    name = lib.name
    tensors, aligned = same_call.picker(lib.tensors), same_call.aligner(lib.tensors)
    launch_args = same_call.picker(lib.launch_args)
    params = list(inspect.signature(face).parameters.values())
    tensor_names = [params[i].name for i in lib.tensors]
    every = lib.launch_args == tuple(range(len(params)))  # the launch takes the call's arguments as they are
    hits = _HITS[name] = {}
    configs = _CONFIGS[name] = {}
    state = _LAST[name] = [None, None]
    compiling = torch.compiler.is_compiling

    def keyed(a: tuple[Any, ...]) -> tuple[Any, ...]:
        try:
            return signature(*a), aligned(a)
        except AttributeError:
            for arg_name, t in zip(tensor_names, tensors(a), strict=True):  # a clear TypeError naming the argument
                if t is not None and not isinstance(t, torch.Tensor):
                    raise TypeError(f"{arg_name} must be a torch.Tensor, got {type(t).__name__}") from None
            raise

    # A hit is the face, the check of a hit that repeats (else the key, signature and alignment, and one lookup) and
    # the kept launch: this runs on every call.
    def call(*args: Any, config: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        a = face(*args, **kwargs)
        if config is not None:
            return run(*a, config)
        if compiling():
            traced_config, use_torch = _traced_config(name, signature(*a))
            return torch_op(*a) if use_torch and torch_op is not None else run(*a, traced_config)
        tried = state[0]
        if tried is not None and tried.same(a):
            hit: _Hit | None = tried
            if state[1] is not tried:  # (a hit found again after itself: the state is as it was)
                same_call.passed(state, tried)
        else:
            hit = hits.get(keyed(a))
            same_call.follow(state, hit, tried)
        if hit is not None:
            pending = hit.pending
            if pending is None or not pending.met():
                return hit.launch(*a) if every else hit.launch(*launch_args(a))
        key = keyed(a)
        cfg, waiting, use_torch = _resolve(op, inputs(*a), tensors(a)[0].device)
        launch = prepare(*a, cfg)  # the inputs checked in full, whichever launches them
        if use_torch and torch_op is not None:
            launch = _torch_launch(torch_op, a, lib.launch_args)
        else:
            use_torch = False
        _keep(hits, configs, key, launch, cfg, waiting, use_torch, a)
        state[:] = [None, None]  # (a hit tried first may be the one this key's new answer replaced)
        return launch(*launch_args(a))

    functools.update_wrapper(call, face)
    call.__module__ = "autotuner"
    config_param = inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None,
                                     annotation="Mapping[str, Any] | None")
    call.__signature__ = inspect.signature(face).replace(  # type: ignore[attr-defined]
        parameters=[*params, config_param], return_annotation="torch.Tensor")
    return call


def names() -> list[str]:
    """The library calls the registered ops declare: `autotuner.<name>` for each."""
    from autotuner.base.registry import ops

    return [op.library.name for op in ops() if op.library is not None]


def call(name: str) -> Callable[..., Any]:
    """The library call named (built on first use); LookupError when no registered op declares it."""
    found = _CALLS.get(name)
    if found is not None:
        return found
    from autotuner.base.registry import ops

    op = next((o for o in ops() if o.library is not None and o.library.name == name), None)
    if op is None:
        raise LookupError(name)
    with _LOCK:
        if name not in _CALLS:
            _CALLS[name] = build(op)
        return _CALLS[name]


def forget(name: str) -> None:
    """Drop a built call (its op was unregistered); the next `call(name)` builds it again."""
    with _LOCK:
        _CALLS.pop(name, None)
