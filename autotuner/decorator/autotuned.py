"""`autotuner.autotune`: a drop-in for `@triton.autotune` whose results persist in the database, are shared
through the service, and can be tuned offline by the workers.

    @autotuner.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4), ...], key=["n"])
    @triton.jit
    def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr): ...

    kernel[grid](x, y, n)          # launched exactly as before

It takes every argument `triton.autotune` takes, with the same meaning, and more: `space=` (a declared
search_spaces.space.Space instead of a list), `name=` (the kernel's name in the database, default
`module:qualname`), `reference=` (what each config's output is checked against; default the default config's
output), `make_inputs=` (makes a worker's rebuilt arguments valid), `on_miss=` and `trials=`.

A launch with a key not seen in this process goes to the miss policy's module (autotuner.decorator.miss): the
database, the service, then `tune` (autotuner.decorator.in_process), `default` or `error`. Later launches of
the key find its config in `cache` and launch through one direct launcher per argument signature
(kernels._direct.Launcher), skipping Triton's argument binding.

The rest of the package: `spec` (the kernel, its configs or space, hooks and pruning), `keys` (keys, problems
and the launch that met a key), `engine_view` (the kernel as a TunableOp for the engine), `configs` (what is
read of Triton's objects).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch
import triton

from autotuner.base.registry import register_op
from autotuner.decorator.configs import (
    LAUNCH_OPTIONS,
    base_fn,
    check_names,
    config_dict,
    constexprs,
    module_name,
    to_config,
)
from autotuner.decorator.engine_view import EngineView
from autotuner.decorator.kernel_problem import KernelProblem
from autotuner.decorator.keys import Bucket, Keys, bucket_functions
from autotuner.decorator.miss import Answer, KernelNotTuned, resolve_miss
from autotuner.decorator.spec import ON_MISS, Hooks, KernelSpec
from autotuner.launch import binary_cache, specializations
from autotuner.launch.lookup import RECHECK_S, prepare
from kernels._direct import Launcher
from search_spaces.space import Space, config_key

__all__ = ["Autotuned", "KernelNotTuned", "autotune"]
_now = time.monotonic


KEEP_SPECIALIZATIONS = 4  # launches with an unhashable argument whose specialization is kept, per kernel


class Mirror(Protocol):
    """A Triton Autotuner whose tuning a decorated kernel does (autotuner.decorator.install): its own cache is
    asked first, and told every config resolved."""

    def prior(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None: ...

    def resolved(self, kernel: Autotuned, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any],
                 config: triton.Config) -> None: ...


def _spec(fn: Any, configs: list[triton.Config] | None, key: list[str], *, space: Space[Any] | None,
          name: str | None, prune_configs_by: dict[str, Any] | None, hooks: Hooks,
          buckets: Mapping[str, Bucket] | None, **rest: Any) -> KernelSpec:
    """The decorator's arguments, checked: every name they give must be the kernel's."""
    base = base_fn(fn)
    arg_names = list(fn.arg_names)
    name = name or f"{module_name(base)}:{base.__qualname__}"
    for what, names in (("key names", key), ("reset_to_zero names", hooks.reset_to_zero),
                        ("restore_value names", hooks.restore_value)):
        check_names(name, what, names, arg_names, "an argument")
    if configs and space is not None:
        raise ValueError(f"{name}: give configs or space, not both")
    if space is not None and prune_configs_by:
        raise ValueError(f"{name}: prune_configs_by works on a config list; a space states its own constraints")
    if rest["on_miss"] is not None and rest["on_miss"] not in ON_MISS:
        raise ValueError(f"{name}: on_miss={rest['on_miss']!r}; accepted: {', '.join(ON_MISS)}")
    params = constexprs(fn, base)
    listed = list(configs) if configs else ([] if space is not None else [triton.Config({}, num_warps=4,
                                                                                          num_stages=3, num_ctas=1)])
    for i, c in enumerate(listed):
        check_names(name, f"config {i} sets", c.kwargs, params, "a tl.constexpr parameter")
    if space is not None:
        check_names(name, "the space's parameters", space.names, [*params, *LAUNCH_OPTIONS],
                    "a tl.constexpr parameter or launch option")
    return KernelSpec(
        fn=fn, base_fn=base, name=name, keys=Keys(list(key), arg_names, bucket_functions(name, buckets, list(key))),
        configs=listed,
        triton_configs={config_key(config_dict(c)): c for c in listed},
        space=space if space is not None else Space.from_configs([config_dict(c) for c in listed]), hooks=hooks,
        prune_configs_by=dict(prune_configs_by or {}), **rest)


class Autotuned:
    """The decorated kernel: `kernel[grid](*args, **kwargs)` and `kernel.run(*args, grid=..., **kwargs)`, with
    triton.autotune's attributes (`fn`, `configs`, `keys`, `cache`, `best_config`, hooks, `prune_configs`)."""

    def __init__(self, fn: Any, configs: list[triton.Config] | None, key: list[str], *,
                 prune_configs_by: dict[str, Any] | None = None, reset_to_zero: list[str] | None = None,
                 restore_value: list[str] | None = None, pre_hook: Callable[..., Any] | None = None,
                 post_hook: Callable[..., Any] | None = None, warmup: float | None = None, rep: float | None = None,
                 do_bench: Callable[..., Any] | None = None, space: Space[Any] | None = None, name: str | None = None,
                 reference: Callable[..., Any] | None = None, make_inputs: Callable[..., Any] | None = None,
                 on_miss: str | None = None, trials: int | None = None,
                 buckets: Mapping[str, Bucket] | None = None, mirror: Mirror | None = None,
                 pre_hook_takes_reset_only: bool = False) -> None:
        hooks = Hooks(reset_to_zero=list(reset_to_zero or []), restore_value=list(restore_value or []),
                      user_pre_hook=pre_hook, user_post_hook=post_hook,
                      hooks_take_reset_only=pre_hook_takes_reset_only)
        self.spec = spec = _spec(fn, configs, key, space=space, name=name, prune_configs_by=prune_configs_by,
                                 hooks=hooks, buckets=buckets, warmup_ms=warmup, rep_ms=rep, do_bench=do_bench, reference=reference,
                                 make_inputs=make_inputs, on_miss=on_miss, trials=trials)
        self.fn, self.base_fn, self.name, self.arg_names = fn, spec.base_fn, spec.name, spec.keys.arg_names
        self.keys, self.configs, self.space = spec.keys.keys, spec.configs, spec.space
        self.reset_to_zero, self.restore_value = hooks.reset_to_zero, hooks.restore_value
        self.do_bench, self.warmup_ms, self.rep_ms = do_bench, warmup, rep
        self.cache: dict[tuple[Any, ...], tuple[dict[str, Any], Callable[..., Any] | None]] = {}
        self.best_config: triton.Config | None = None
        self.sources: dict[tuple[Any, ...], str] = {}  # key -> where its config came from: exact, stale, tuned...
        self.resolve_s: dict[tuple[Any, ...], float] = {}  # key -> seconds its first launch spent finding its config
        self.mirror = mirror  # the triton.runtime.autotuner.Autotuner this kernel tunes for (autotuner.install)
        self._launchers: dict[tuple[Any, ...], Launcher] = {}
        self._recheck: dict[tuple[Any, ...], float] = {}  # key -> when an unsettled answer is asked again
        self._jit = fn if hasattr(fn, "device_caches") else None  # a JITFunction (not the interpreter's, not wrapped)
        self._kept_specializations = 0  # launches with unhashable arguments whose specialization was kept
        inner = fn
        while not hasattr(inner, "device_caches") and hasattr(inner, "fn"):
            inner = inner.fn  # a JITFunction under triton.heuristics: its launches go through Triton's run, and
        binary_cache.install(inner)  # still load the kept binaries and specializations
        # a covered Triton Autotuner's op is found, in a trial process, by the finder autotuner.decorator.install adds
        self.view = EngineView(spec, ("autotuner.decorator.install",) if mirror is not None else ())
        self.op = self.view.op
        register_op(self.op, replace=True)
        prepare(self.op)  # the settings, the database and the source hash, before the first launch needs them

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        key = self.spec.keys.key(args, kwargs)
        hit = self.cache.get(key)
        if hit is None or (self._recheck and key in self._recheck and self._recheck[key] < _now()):
            hit = self._resolve(key, args, kwargs, grid)
        config, config_pre_hook = hit
        if config_pre_hook is not None:
            config_pre_hook({**dict(zip(self.arg_names, args, strict=False)), **kwargs, **config})
        if warmup or self._jit is None:
            return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs, **config)
        # A launcher per exact argument signature (each tensor's dtype and 16-byte alignment, every other value
        # as given): Triton's specialization is a function of it, so its binding is skipped after the first.
        try:
            # each value with its type: 1, 1.0 and True are equal keys, and Triton compiles each of them apart
            sig = (key, *[(a.dtype, a.data_ptr() % 16) if isinstance(a, torch.Tensor) else (type(a), a) for a in args],
                   *kwargs.items())
            launcher = self._launchers.get(sig)
        except TypeError:  # an unhashable argument (a host TensorDescriptor, say): Triton's own launch
            out = self.fn.run(*args, grid=grid, warmup=warmup, **kwargs, **config)
            if self._kept_specializations < KEEP_SPECIALIZATIONS:  # for a later process's first launch
                self._kept_specializations += 1
                try:
                    binder = self._jit.device_caches[torch.cuda.current_device()][-1]
                    specializations.remember(binder, args, {**kwargs, **config})
                except Exception:  # noqa: S110 - keeping is never worth a failed launch
                    pass
            return out
        if launcher is None:
            if len(self._launchers) >= 1024:
                self._launchers.clear()
            launcher = self._launchers[sig] = Launcher(self.fn, (), {**kwargs, **config})
        if callable(grid):
            grid = grid({**dict(zip(self.arg_names, args, strict=False)), **kwargs, **config})
        return launcher.launch(tuple(grid), args)

    def _resolve(self, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any],
                 grid: Any) -> tuple[dict[str, Any], Callable[..., Any] | None]:
        """The first launch of a key in this process: the miss policy's config, kept in `cache` (an answer that is
        not settled, until RECHECK_S from now)."""
        t0 = _now()
        prior = self.mirror.prior(args, kwargs) if self.mirror is not None else None
        if prior is not None:
            answer = Answer(prior, "Triton's own cache (tuned before autotuner.install)", True)
        else:
            answer = resolve_miss(self.view, self.spec.keys.miss(args, kwargs, grid))
        config, self.sources[key] = answer.config, answer.source
        self.resolve_s[key] = _now() - t0
        if answer.settled:
            self._recheck.pop(key, None)
        else:
            self._recheck[key] = _now() + RECHECK_S
        original = self.spec.hooked_config(config)
        self.best_config = original or to_config(config)
        entry = self.cache[key] = dict(config), (original.pre_hook if original is not None else None)
        self._launchers.clear()  # launchers hold their config: a key resolved again starts afresh
        if self.mirror is not None:
            self.mirror.resolved(self, key, args, kwargs, self.best_config)
        return entry

    def warmup(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def pre_hook(self, nargs: dict[str, Any], reset_only: bool = False) -> None:
        self.spec.hooks.pre_hook(nargs, reset_only)

    def post_hook(self, nargs: dict[str, Any], exception: BaseException | None) -> None:
        self.spec.hooks.post_hook(nargs, exception)

    def prune_configs(self, nargs: dict[str, Any], kwargs: dict[str, Any]) -> list[triton.Config]:
        """triton.autotune's pruning: `early_config_prune`, then the `perf_model`'s `top_k`."""
        return self.spec.prune(nargs, kwargs)

    def named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The kernel's arguments by name."""
        return self.spec.keys.named(args, kwargs)

    def problem(self, named: Mapping[str, Any], call: dict[str, Any] | None = None) -> KernelProblem:
        """The problem (database key) these arguments name."""
        return self.spec.keys.problem(named, call)


def autotune(configs: list[triton.Config] | None = None, key: list[str] | None = None,
             prune_configs_by: dict[str, Any] | None = None, reset_to_zero: list[str] | None = None,
             restore_value: list[str] | None = None, pre_hook: Callable[..., Any] | None = None,
             post_hook: Callable[..., Any] | None = None, warmup: float | None = None, rep: float | None = None,
             use_cuda_graph: bool = False, do_bench: Callable[..., Any] | None = None, cache_results: bool = False, *,
             space: Space[Any] | None = None, name: str | None = None, reference: Callable[..., Any] | None = None,
             make_inputs: Callable[..., Any] | None = None, on_miss: str | None = None,
             trials: int | None = None, buckets: Mapping[str, Bucket] | None = None) -> Callable[[Any], Autotuned]:
    """Decorate a `@triton.jit` kernel, as `triton.autotune(configs, key, ...)` does; see the module's text.
    `buckets` maps key arguments to how their values group ("pow2", or a function from a value to its bucket's
    representative): results are resolved, stored and served per bucket. `use_cuda_graph` and `cache_results` are
    accepted for compatibility: results always persist, in the database."""

    def decorator(fn: Any) -> Autotuned:
        return Autotuned(fn, configs, list(key or []), prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook, warmup=warmup, rep=rep,
                         do_bench=do_bench, space=space, name=name, reference=reference, make_inputs=make_inputs,
                         on_miss=on_miss, trials=trials, buckets=buckets)

    return decorator
