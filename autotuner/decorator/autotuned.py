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

A launch with a key not seen in this process: the in-process cache, then the database, then the service
(AUTOTUNER_URL), then the miss policy (`on_miss=` or AUTOTUNER_ON_MISS):

    tune     search now in this process, as triton.autotune does (the engine's search when the space is larger
             than the budget), storing every trial and the winner; when several processes miss one key at once,
             one tunes and the others wait for its winner (or launch the default, never a config of their own)
    default  launch the default config at once, and queue a tuning job carrying the recorded call
    error    raise, naming the kernel, the key and how to tune it

A result stored for another kernel source or Triton version is launched (and said to be stale) while a job to
re-tune it is queued. Under `default`, or with AUTOTUNER_RECORD=1, the first launch of a key queues a job that
holds what a worker needs to replay it (autotuner.decorator.kernel_problem.record_call).
"""

from __future__ import annotations

import inspect
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import triton

from autotuner.base.registry import register_op
from autotuner.decorator.kernel_problem import KernelProblem, dtype_name, rebuild_args, record_call
from autotuner.engine.measure import InOrderMeasurer
from autotuner.engine.runner import Outcome, _short, classify
from autotuner.engine.timing import Timing, time_fn
from autotuner.launch import binary_cache
from autotuner.launch.lookup import NotFound, resolver  # at import: a first launch pays for no imports
from kernels._backend import interpreting
from kernels._direct import Launcher
from search_spaces.contract import DOT_TOLERANCE, Option, TunableOp
from search_spaces.space import Space, config_key

log = logging.getLogger(__name__)
ON_MISS = ("tune", "default", "error")
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


class KernelNotTuned(LookupError):
    """A launch under `on_miss="error"` of a key with no stored result."""


def _base_fn(fn: Any) -> Any:
    """The Python function under `fn` (a JITFunction, the interpreter's, or one wrapped by triton.heuristics)."""
    inner = fn
    while not inspect.isfunction(inner):
        if not hasattr(inner, "fn") or not hasattr(fn, "arg_names"):
            raise TypeError(f"autotuner.autotune wraps a @triton.jit kernel, got {type(fn).__name__}")
        inner = inner.fn
    return inner


def _constexprs(fn: Any, base: Any) -> list[str]:
    """The kernel's tl.constexpr parameters (from the JITFunction, or the annotations under the interpreter)."""
    inner = fn
    while not hasattr(inner, "params") and hasattr(inner, "fn") and not inspect.isfunction(inner):
        inner = inner.fn
    if hasattr(inner, "params"):
        return [p.name for p in inner.params if p.is_constexpr]
    return [n for n, p in inspect.signature(base).parameters.items()
            if p.annotation is triton.language.constexpr or "constexpr" in str(p.annotation)]


def _module_name(fn: Any) -> str:
    """The importable name of fn's module: a script run as `python -m pkg.mod` is `pkg.mod`, not `__main__`, so
    the name a worker imports is the one another process records."""
    module = fn.__module__
    if module == "__main__":
        import sys

        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is not None and spec.name:
            return str(spec.name)
        path = getattr(sys.modules["__main__"], "__file__", None)
        if path:
            return os.path.splitext(os.path.basename(path))[0]
    return str(module)


def config_dict(c: triton.Config) -> dict[str, Any]:
    """A triton.Config as the database keeps it: its meta-parameters and launch options, by name."""
    out: dict[str, Any] = {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
    if getattr(c, "num_ctas", 1) not in (None, 1):
        out["num_ctas"] = c.num_ctas
    if getattr(c, "maxnreg", None) is not None:
        out["maxnreg"] = c.maxnreg
    return out


def to_config(d: Mapping[str, Any]) -> triton.Config:
    kwargs = {k: v for k, v in d.items() if k not in LAUNCH_OPTIONS}
    return triton.Config(kwargs, **{k: d[k] for k in LAUNCH_OPTIONS if k in d})


def _check_names(kernel: str, what: str, names: Iterable[str], accepted: Iterable[str], noun: str) -> None:
    accepted = list(accepted)
    unknown = [n for n in names if n not in accepted]
    if unknown:
        raise ValueError(f"{kernel}: {what} {', '.join(map(repr, unknown))}, which "
                         f"{'is' if len(unknown) == 1 else 'are'} not {noun} of the kernel; accepted: "
                         f"{', '.join(accepted) or 'none'}")


class Autotuned:
    """The decorated kernel: `kernel[grid](*args, **kwargs)` and `kernel.run(*args, grid=..., **kwargs)`."""

    def __init__(self, fn: Any, configs: list[triton.Config] | None, key: list[str], *,
                 prune_configs_by: dict[str, Any] | None = None, reset_to_zero: list[str] | None = None,
                 restore_value: list[str] | None = None, pre_hook: Callable[..., Any] | None = None,
                 post_hook: Callable[..., Any] | None = None, warmup: float | None = None, rep: float | None = None,
                 do_bench: Callable[..., Any] | None = None, space: Space[Any] | None = None, name: str | None = None,
                 reference: Callable[..., Any] | None = None, make_inputs: Callable[..., Any] | None = None,
                 on_miss: str | None = None, trials: int | None = None) -> None:
        self.fn = fn
        self.base_fn = _base_fn(fn)
        self.arg_names: list[str] = list(fn.arg_names)
        self.name = name or f"{_module_name(self.base_fn)}:{self.base_fn.__qualname__}"
        self.keys = list(key)
        for what, names in (("key names", self.keys), ("reset_to_zero names", reset_to_zero or []),
                            ("restore_value names", restore_value or [])):
            _check_names(self.name, what, names, self.arg_names, "an argument")
        if configs and space is not None:
            raise ValueError(f"{self.name}: give configs or space, not both")
        if space is not None and prune_configs_by:
            raise ValueError(f"{self.name}: prune_configs_by works on a config list; a space states its own "
                             "constraints")
        if on_miss is not None and on_miss not in ON_MISS:
            raise ValueError(f"{self.name}: on_miss={on_miss!r}; accepted: {', '.join(ON_MISS)}")
        constexprs = _constexprs(fn, self.base_fn)
        self.configs: list[triton.Config] = list(configs) if configs else (
            [] if space is not None else [triton.Config({}, num_warps=4, num_stages=3, num_ctas=1)])
        for i, c in enumerate(self.configs):
            _check_names(self.name, f"config {i} sets", c.kwargs, constexprs, "a tl.constexpr parameter")
        if space is not None:
            _check_names(self.name, "the space's parameters", space.names, [*constexprs, *LAUNCH_OPTIONS],
                         "a tl.constexpr parameter or launch option")
        self._triton_configs = {config_key(config_dict(c)): c for c in self.configs}
        self.space = space if space is not None else Space.from_configs([config_dict(c) for c in self.configs])
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        self.user_pre_hook, self.user_post_hook = pre_hook, post_hook
        self.restore_copies: dict[str, Any] = {}
        self.perf_model = (prune_configs_by or {}).get("perf_model")
        self.top_k = (prune_configs_by or {}).get("top_k", 1.0)
        self.early_config_prune = (prune_configs_by or {}).get("early_config_prune")
        self.warmup_ms, self.rep_ms, self.do_bench = warmup, rep, do_bench
        self.reference, self.make_inputs_hook = reference, make_inputs
        self.on_miss, self.trials = on_miss, trials
        self.cache: dict[tuple[Any, ...], tuple[dict[str, Any], Callable[..., Any] | None]] = {}
        self.best_config: triton.Config | None = None
        self.sources: dict[tuple[Any, ...], str] = {}  # key -> where its config came from: exact, stale, tuned...
        self._positions = [self.arg_names.index(k) for k in self.keys]
        self._launchers: dict[tuple[Any, ...], Launcher] = {}
        self._jit = fn if hasattr(fn, "device_caches") else None  # a JITFunction (not the interpreter's, not wrapped)
        if self._jit is not None:
            binary_cache.install(self._jit)
        self.op: TunableOp[KernelProblem] = TunableOp(
            name=self.name, kind="kernel", problem_type=KernelProblem, space=self.space, dtypes=(),
            description=(self.base_fn.__doc__ or "").strip().split("\n")[0],
            call=f"{self.base_fn.__name__}[grid](...)",
            options=(Option("call", data=True, help="a recorded launch, for workers"),),
            launch=self._engine_launch, checked=self._engine_checked, make_inputs=self._engine_inputs,
            problem_from_inputs=lambda inputs: self.problem(inputs["args"]),
            reference=self._engine_reference if reference is not None else None,
            tolerance=DOT_TOLERANCE, sources=(self.base_fn,))
        register_op(self.op, replace=True)

    # -- triton.autotune's surface -------------------------------------------------------------------------
    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        key = self._key(args, kwargs)
        hit = self.cache.get(key)
        if hit is None:
            hit = self._miss(key, args, kwargs, grid)
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
        except TypeError:  # an unhashable argument: Triton's own launch
            return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs, **config)
        if launcher is None:
            if len(self._launchers) >= 1024:
                self._launchers.clear()
            launcher = self._launchers[sig] = Launcher(self.fn, (), {**kwargs, **config})
        if callable(grid):
            grid = grid({**dict(zip(self.arg_names, args, strict=False)), **kwargs, **config})
        return launcher.launch(tuple(grid), args)

    def warmup(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def pre_hook(self, nargs: dict[str, Any], reset_only: bool = False) -> None:
        if self.user_pre_hook is not None:
            self.user_pre_hook(nargs)
            return
        for name in self.reset_to_zero:
            if nargs.get(name) is not None:
                nargs[name].zero_()
        if not reset_only:
            self.restore_copies = {n: nargs[n].clone() for n in self.restore_value if nargs.get(n) is not None}

    def post_hook(self, nargs: dict[str, Any], exception: BaseException | None) -> None:
        if self.user_post_hook is not None:
            self.user_post_hook(nargs, exception=exception)
            return
        for name, value in self.restore_copies.items():
            nargs[name].copy_(value)
        self.restore_copies = {}

    def prune_configs(self, nargs: dict[str, Any], kwargs: dict[str, Any]) -> list[triton.Config]:
        """triton.autotune's pruning: `early_config_prune`, then the `perf_model`'s `top_k`."""
        pruned = list(self.configs)
        if self.early_config_prune:
            pruned = self.early_config_prune(pruned, nargs, **kwargs)
            if not pruned:
                raise ValueError(f"{self.name}: early_config_prune returned no config; it must return at least one")
        if self.perf_model:
            top_k = self.top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(pruned) * top_k))
            elif not isinstance(top_k, int):
                raise TypeError("top_k must be either 1) a float <= 1.0 or 2) an int")
            if len(pruned) > top_k:
                est = {c: self.perf_model(**nargs, **kwargs, **c.all_kwargs()) for c in pruned}
                pruned = sorted(est, key=est.__getitem__)[:top_k]
        return pruned

    # -- keys and problems -----------------------------------------------------------------------------------
    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        n = len(args)
        key = [args[p] if p < n else kwargs.get(name) for name, p in zip(self.keys, self._positions, strict=True)]
        for a in args:
            if hasattr(a, "dtype"):
                key.append(str(a.dtype))
        for name, a in kwargs.items():
            if hasattr(a, "dtype") and name in self.arg_names:
                key.append(str(a.dtype))
        return tuple(key)

    def _named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**dict(zip(self.arg_names, args, strict=False)), **{k: v for k, v in kwargs.items() if k in self.arg_names}}

    def problem(self, named: Mapping[str, Any], call: dict[str, Any] | None = None) -> KernelProblem:
        values = []
        for k in self.keys:
            v = named.get(k)
            values.append((k, v if isinstance(v, (int, float, bool, str)) or v is None else str(v)))
        tensors = [named[n] for n in self.arg_names if hasattr(named.get(n), "dtype")]
        dtypes = tuple(dtype_name(t.dtype) for t in tensors)
        return KernelProblem(tuple(values), dtypes, call)

    def _device(self, named: Mapping[str, Any]) -> Any:
        from autotuner.base.device import current_device

        t = next((v for v in named.values() if isinstance(v, torch.Tensor)), None)
        return current_device(t.device.index if t is not None and t.device.type == "cuda" else None)

    # -- the first launch of a key -------------------------------------------------------------------------
    def _entry(self, config: Mapping[str, Any]) -> tuple[dict[str, Any], Callable[..., Any] | None]:
        config = dict(config)
        original = self._triton_configs.get(config_key(config))
        self.best_config = original or to_config(config)
        return config, (original.pre_hook if original is not None else None)

    def _miss(self, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any],
              grid: Any) -> tuple[dict[str, Any], Callable[..., Any] | None]:

        named = self._named(args, kwargs)
        problem = self.problem(named)
        device = self._device(named)
        r = resolver()
        policy = self.on_miss or r.settings.on_miss
        store = r.store.peek()[0]
        config: dict[str, Any] | None = None
        try:
            res = r.resolve(self.op, problem, device, fallback="none")
            config, source = res.config, f"exact ({res.step})"
            if policy == "tune" and store is not None and self._untried(store, named, kwargs, problem, device):
                config = None  # the list grew since the result was stored: time the new configs
        except NotFound as exc:
            if exc.stale is not None and not self.space.violations(exc.stale.config, problem, device):
                config, source = exc.stale.config, f"stale ({exc.stale.stale_reason}); a re-tune is queued"
                self._record(named, problem, grid, device, kwargs)
            elif policy == "error":
                raise KernelNotTuned(
                    f"{self.name} has no tuned config for key {problem.key} on {device.key} (and AUTOTUNER_ON_MISS="
                    f"error): tune it in a process with AUTOTUNER_ON_MISS=tune, or record it with AUTOTUNER_RECORD=1 "
                    "and run `autotuner worker`") from None
        if config is None:
            if policy == "default" or r.settings.record:
                self._record(named, problem, grid, device, kwargs)
            if policy == "tune":
                config, source = self._tune_here(named, args, kwargs, grid, problem, device)
            else:
                config, source = self._default(named, kwargs, problem, device), "default (a tuning job is queued)"
        self.sources[key] = source
        log.info("autotuner: %s %s on %s: %s %s", self.name, problem.key, device.key, source, config)
        entry = self._entry(config)
        self.cache[key] = entry
        self._launchers.clear()  # launchers hold their config: a key resolved again starts afresh
        return entry

    def _default(self, named: dict[str, Any], kwargs: dict[str, Any], problem: KernelProblem, device: Any) -> dict[str, Any]:
        if self.configs:
            return config_dict(self.prune_configs(named, kwargs)[0])
        return self.space.default(problem, device)

    def _grids(self, grid: Any, named: dict[str, Any], kwargs: dict[str, Any],
               candidates: list[dict[str, Any]]) -> dict[str, tuple[int, ...]]:
        out = {}
        for c in candidates:
            g = grid({**named, **kwargs, **c}) if callable(grid) else grid
            out[config_key(c)] = tuple(int(x) for x in g)
        return out

    def _record(self, named: dict[str, Any], problem: KernelProblem, grid: Any, device: Any,
                kwargs: dict[str, Any]) -> None:
        """Queue a tuning job holding what a worker needs to replay this launch."""

        try:
            candidates = self.space.candidates(problem, device)
            call = record_call(self.arg_names, named, self._grids(grid, named, kwargs, candidates))
            recorded = self.problem(named, call)
            resolver().queue(self.op, recorded, device)
        except Exception as exc:  # recording must never stop a launch
            log.warning("autotuner: could not record %s %s: %s", self.name, problem.key, exc)

    def _tune_here(self, named: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any,
                   problem: KernelProblem, device: Any) -> tuple[dict[str, Any], str]:
        """Tune in this process on the launch's own arguments, storing every trial and the winner; when another
        process is tuning this key, wait for its winner."""
        from autotuner.engine.tuner import tune

        settings = resolver().settings
        pruned = [config_dict(c) for c in self.prune_configs(named, kwargs)] if self.configs else None
        if pruned is not None and len(pruned) == 1:
            return pruned[0], "the only config left after pruning"
        try:
            store = resolver().store.writer()  # tuning is a write: it may create the database
        except Exception as exc:
            log.warning("autotuner: no database for %s (%s): tuning in memory, nothing is stored", self.name, exc)
            return self._tune_in_memory(named, args, kwargs, grid, problem, device, pruned), "tuned (not stored)"
        owner = f"{socket.gethostname()}:{os.getpid()}"
        lease = max(60.0, settings.tune_wait_s)
        if not store.claim_tuning(op=self.name, problem_key=problem.key, device_key=device.key, owner=owner,
                                  lease_s=lease):
            return self._wait_for_winner(store, named, kwargs, problem, device)
        measurer = CallMeasurer(self, args, kwargs, grid, problem, device)
        try:
            best = store.best(op=self.op, problem=problem, device=device)  # tuned meanwhile, by the claim's last holder
            if best is not None and not best.stale and not self._untried(store, named, kwargs, problem, device):
                return best.config, "tuned by another process (stored before this one took the claim)"
            result = tune(self.op, problem, store=store, settings=settings,
                          strategy="exhaustive" if pruned is not None else "tpe",
                          trials=self.trials or (len(pruned) if pruned is not None else None), device=device,
                          measurer=measurer, reuse=True, candidates=pruned)
        finally:
            store.release_tuning(op=self.name, problem_key=problem.key, device_key=device.key, owner=owner)
        if result.best_config is None:
            raise RuntimeError(f"{self.name} {problem.key}: every config failed; see run {result.run_id}: "
                               f"{result.trials[0].error if result.trials else ''}")
        winner = dict(result.best_config)
        self.pre_hook({**named, **kwargs, **winner}, reset_only=True)  # as triton.autotune does after timing
        return winner, f"tuned here (run {result.run_id}, {len(result.trials)} configs measured)"

    def _untried(self, store: Any, named: dict[str, Any], kwargs: dict[str, Any], problem: KernelProblem,
                 device: Any) -> bool:
        """Whether a config of the (pruned) list has never been measured for this problem: one added since."""
        if not self.configs:
            return False
        known = store.trial_times(op=self.op, problem=problem, device=device)
        return any(config_key(config_dict(c)) not in known for c in self.prune_configs(named, kwargs))

    def _tune_in_memory(self, named: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any,
                        problem: KernelProblem, device: Any, pruned: list[dict[str, Any]] | None) -> dict[str, Any]:
        measurer = CallMeasurer(self, args, kwargs, grid, problem, device)
        measurer.start()
        times = {}
        for c in pruned if pruned is not None else self.space.candidates(problem, device):
            o = measurer.measure(c)
            if o.status == "ok" and o.timing is not None:
                times[config_key(c)] = (o.timing.median_ms, c)
        if not times:
            raise RuntimeError(f"{self.name} {problem.key}: every config failed")
        winner = min(times.values(), key=lambda t: t[0])[1]
        self.pre_hook({**named, **kwargs, **winner}, reset_only=True)
        return winner

    def _wait_for_winner(self, store: Any, named: dict[str, Any], kwargs: dict[str, Any], problem: KernelProblem,
                         device: Any) -> tuple[dict[str, Any], str]:

        deadline = time.monotonic() + resolver().settings.tune_wait_s
        while time.monotonic() < deadline:
            best = store.best(op=self.op, problem=problem, device=device)
            if best is not None and not best.stale:
                return best.config, "tuned by another process (waited for its winner)"
            time.sleep(0.2)
        return self._default(named, kwargs, problem, device), "default (another process was still tuning)"

    # -- the engine's view (trial workers, in this process or a worker's) -------------------------------------
    def _call(self, named: dict[str, Any], grid: Any, config: Mapping[str, Any], capture: bool) -> Any:
        """One launch as triton.autotune times it: hooks around the kernel; with `capture`, a copy of every tensor
        argument taken after the kernel, before the post-hook restores any."""
        full = {**named, **config}
        original = self._triton_configs.get(config_key(config))
        if original is not None and original.pre_hook:
            original.pre_hook(full)
        self.pre_hook(full)
        g = grid(full) if callable(grid) else grid
        try:
            self.fn.run(grid=g, warmup=False, **named, **config)
        except Exception as exc:
            try:
                self.post_hook(full, exception=exc)
            finally:
                raise
        out = {n: v.clone() for n, v in named.items() if isinstance(v, torch.Tensor)} if capture else None
        self.post_hook(full, exception=None)
        return out

    def _grid_for(self, inputs: Mapping[str, Any], config: Mapping[str, Any]) -> Any:
        grids = inputs["grids"]
        if not isinstance(grids, dict):
            return grids
        g = grids.get(config_key(config))
        if g is None:
            raise ValueError(f"{self.name}: the recorded call has no grid for config {config_key(config)} (the space "
                             "changed since it was recorded)")
        return tuple(g)

    def _engine_launch(self, inputs: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        self._call(dict(inputs["args"]), self._grid_for(inputs, config), config, capture=False)

    def _engine_checked(self, inputs: Mapping[str, Any], config: Mapping[str, Any]) -> Any:
        return self._call(dict(inputs["args"]), self._grid_for(inputs, config), config, capture=True)

    def _engine_reference(self, inputs: Mapping[str, Any]) -> Any:
        assert self.reference is not None
        copies = {n: v.clone() if isinstance(v, torch.Tensor) else v for n, v in inputs["args"].items()}
        out = self.reference(**copies)
        if out is None:  # the reference wrote its results into the (copied) arguments, as the kernel does
            return {n: v for n, v in copies.items() if isinstance(v, torch.Tensor)}
        if not isinstance(out, Mapping):
            raise TypeError(f"{self.name}: reference must return a dict of argument name -> expected tensor, or None "
                            "after writing into its arguments")
        return dict(out)

    def _engine_inputs(self, problem: KernelProblem, device: str) -> dict[str, Any]:
        if not problem.call:
            raise ValueError(f"{self.name} {problem.key}: no recorded call to rebuild its arguments from (record one "
                             "with AUTOTUNER_RECORD=1 or AUTOTUNER_ON_MISS=default)")
        named = rebuild_args(problem.call, device)
        if self.make_inputs_hook is not None:
            named = dict(self.make_inputs_hook(named))
        return {"args": named, "grids": problem.call["grids"]}


class CallMeasurer(InOrderMeasurer):
    """Measures configs in this process on a launch's own arguments, as triton.autotune does: hooks around each
    launch, `do_bench` (or the engine's timing), and a check of the outputs against the reference."""

    def __init__(self, tuned: Autotuned, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any,
                 problem: KernelProblem, device: Any) -> None:
        self.tuned, self.grid, self.problem, self.device = tuned, grid, problem, device
        self.named = tuned._named(args, kwargs)
        self.extra = {k: v for k, v in kwargs.items() if k not in tuned.arg_names}
        self.ref: Any = None

    def start(self) -> Outcome:
        t = self.tuned
        inputs = {"args": self.named, "grids": self.grid}
        if t.reference is not None:
            self.ref = t._engine_reference(inputs)
        else:
            default = t._default(self.named, self.extra, self.problem, self.device)
            self.ref = t._call(self.named, self.grid, {**default, **self.extra}, capture=True)
        return Outcome("invalid", error="a decorated kernel has no torch baseline")

    def measure(self, config: dict[str, Any]) -> Outcome:
        t = self.tuned
        cfg = {**config, **self.extra}
        t0 = time.perf_counter()
        try:
            out = t._call(self.named, self.grid, cfg, capture=True)
            if self.device.torch_device.startswith("cuda"):
                torch.cuda.synchronize()
        except Exception as exc:
            return Outcome(classify(exc), error=_short(exc))
        compile_s = time.perf_counter() - t0
        verdict = t.op.check(out, self.ref, self.problem)
        if not verdict.ok:
            return Outcome("wrong_result", compile_s=compile_s, error=verdict.message)
        try:
            timing = self._time(lambda: t._call(self.named, self.grid, cfg, capture=False))
        except Exception as exc:
            return Outcome(classify(exc), compile_s=compile_s, error=_short(exc))
        return Outcome("ok", timing, compile_s)

    def time(self, config: dict[str, Any]) -> Outcome:
        t = self.tuned
        cfg = {**config, **self.extra}
        try:
            return Outcome("ok", self._time(lambda: t._call(self.named, self.grid, cfg, capture=False)))
        except Exception as exc:
            return Outcome(classify(exc), error=_short(exc))

    def _time(self, fn: Callable[[], Any]) -> Timing:
        t = self.tuned
        if t.do_bench is not None:
            r = t.do_bench(fn, quantiles=(0.5, 0.2, 0.8))
            ms = list(r) if isinstance(r, (list, tuple)) else [float(r)] * 3
            return Timing(float(ms[0]), float(ms[1]), float(ms[2]), 0, "do_bench (the decorator's)")
        return time_fn(fn, interpreting(), t.warmup_ms or 25.0, t.rep_ms or 100.0)


def autotune(configs: list[triton.Config] | None = None, key: list[str] | None = None, prune_configs_by: dict[str, Any] | None = None,
             reset_to_zero: list[str] | None = None, restore_value: list[str] | None = None,
             pre_hook: Callable[..., Any] | None = None, post_hook: Callable[..., Any] | None = None,
             warmup: float | None = None, rep: float | None = None, use_cuda_graph: bool = False,
             do_bench: Callable[..., Any] | None = None, cache_results: bool = False, *,
             space: Space[Any] | None = None, name: str | None = None, reference: Callable[..., Any] | None = None,
             make_inputs: Callable[..., Any] | None = None, on_miss: str | None = None,
             trials: int | None = None) -> Callable[[Any], Autotuned]:
    """Decorate a `@triton.jit` kernel, as `triton.autotune(configs, key, ...)` does; see the module's text.
    `use_cuda_graph` and `cache_results` are accepted for compatibility: results always persist, in the database."""

    def decorator(fn: Any) -> Autotuned:
        return Autotuned(fn, configs, list(key or []), prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook, warmup=warmup, rep=rep,
                         do_bench=do_bench, space=space, name=name, reference=reference, make_inputs=make_inputs,
                         on_miss=on_miss, trials=trials)

    return decorator
