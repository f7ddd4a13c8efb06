"""`autotuner.autotune`: a drop-in for `@triton.autotune` whose results persist. More: docs/design/launch.md."""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch
import triton
from triton.runtime.autotuner import Autotuner

from autotuner.base.registry import register_op
from autotuner.decorator.configs import constexprs, to_config
from autotuner.decorator.engine_view import EngineView
from autotuner.decorator.kernel_problem import KernelProblem
from autotuner.decorator.keys import Bucket
from autotuner.decorator.miss import Answer, KernelNotTuned, resolve_miss
from autotuner.decorator.spec import Hooks, make_spec
from autotuner.decorator.triton_views import NotifyingDict, print_autotuning, tell_listener, timings
from autotuner.launch import binary_cache, same_call, specializations
from autotuner.launch.lookup import Pending, pending, warm_up
from kernels._direct import Launcher, call_signature
from search_spaces.space import Space

__all__ = ["Autotuned", "KernelNotTuned", "autotune"]
_now = time.monotonic
log = logging.getLogger(__name__)


NO_GPU = ("no CUDA device here, and this kernel was made by Triton's compiler, not its interpreter: to run it on "
          "the CPU, set TRITON_INTERPRET=1 before Triton is first imported (`TRITON_INTERPRET=1 python ...`, or "
          "import autotuner before triton: it selects the interpreter where there is no GPU)")
KEEP_SPECIALIZATIONS = 4  # launches with an unhashable argument whose specialization is kept, per kernel
MAX_LAUNCHERS = 256  # launchers kept per kernel (one per call signature); all dropped when one more is needed


class Hit(same_call.Followed):
    """What a call signature launched before needs for its next launch; `same`: whether a call's arguments are like
    its first call's."""

    __slots__ = ("key", "config", "meta", "launcher", "placed", "named", "tensors_at")

    def __init__(self, key: tuple[Any, ...], config: triton.Config, meta: dict[str, Any], launcher: Launcher,
                 placed: tuple[str, ...], same: same_call.Check, named: dict[str, Any] | None,
                 tensors_at: tuple[tuple[str, int], ...]) -> None:
        super().__init__(same)
        self.key, self.config, self.launcher = key, config, launcher
        self.meta = meta  # the config's meta-parameters and launch options
        self.placed = placed  # keyword arguments launched as positional ones, in order
        # what its first call gave a grid function, its tensors left out, and where that call's tensors were (name,
        # position among the positional then keyword arguments): a call `same` passed differs from it in its tensors
        # alone (None and (): `same` never passes)
        self.named, self.tensors_at = named, tensors_at


class Mirror(Protocol):
    """A Triton Autotuner whose tuning a decorated kernel does (autotuner.decorator.install): its own cache is
    asked first, told every config resolved, and its `best_config` set at every launch."""

    def prior(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None: ...

    def resolved(self, kernel: Autotuned, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any],
                 config: triton.Config) -> None: ...

    def launched(self, config: triton.Config) -> None: ...


class Autotuned(Autotuner):
    """The decorated kernel: `kernel[grid](...)` and `kernel.run(..., grid=...)`. It is a
    `triton.runtime.autotuner.Autotuner` to whatever asks (`wrap_triton`, `torch.compile`), with the attributes Triton's
    `run` leaves (`cache`, `best_config`, `bench_time`, `configs_timings`, `fn`, `configs`, `keys`, hooks); Triton's
    `__init__` is not run."""

    def __init__(self, fn: Any, configs: list[triton.Config] | None, key: list[str], *,
                 prune_configs_by: dict[str, Any] | None = None, reset_to_zero: list[str] | None = None,
                 restore_value: list[str] | None = None, pre_hook: Callable[..., Any] | None = None,
                 post_hook: Callable[..., Any] | None = None, warmup: float | None = None, rep: float | None = None,
                 do_bench: Callable[..., Any] | None = None, space: Space[Any] | None = None, name: str | None = None,
                 reference: Callable[..., Any] | None = None, make_inputs: Callable[..., Any] | None = None,
                 on_miss: str | None = None, trials: int | None = None,
                 buckets: Mapping[str, Bucket] | None = None, mirror: Mirror | None = None,
                 pre_hook_takes_reset_only: bool = False, use_cuda_graph: bool = False) -> None:
        hooks = Hooks(reset_to_zero=list(reset_to_zero or []), restore_value=list(restore_value or []),
                      user_pre_hook=pre_hook, user_post_hook=post_hook,
                      hooks_take_reset_only=pre_hook_takes_reset_only)
        self.spec = spec = make_spec(fn, configs, key, space=space, name=name, prune_configs_by=prune_configs_by,
                                 hooks=hooks, buckets=buckets, warmup_ms=warmup, rep_ms=rep, do_bench=do_bench,
                                 reference=reference, make_inputs=make_inputs, on_miss=on_miss, trials=trials)
        # what Triton's Autotuner.__init__ sets, read by torch (wrap_triton, Inductor) and by libraries
        self.fn, self.base_fn, self.name, self.arg_names = fn, spec.base_fn, spec.name, spec.keys.arg_names
        self.keys, self.configs, self.space = spec.keys.keys, spec.configs, spec.space
        self.reset_to_zero, self.restore_value = hooks.reset_to_zero, hooks.restore_value
        self.restore_copies: dict[str, Any] = {}
        self.user_defined_pre_hook, self.user_defined_post_hook = pre_hook is not None, post_hook is not None
        self.perf_model = spec.prune_configs_by.get("perf_model")
        self.configs_top_k = spec.prune_configs_by.get("top_k", 1.0)
        self.early_config_prune = spec.prune_configs_by.get("early_config_prune")
        self._do_bench, self.num_warmups, self.num_reps = do_bench, warmup, rep
        self.use_cuda_graph, self.cache_results = use_cuda_graph, False
        self.nargs: dict[str, Any] | None = None
        self._hits: dict[tuple[Any, ...], Hit] = {}  # call signature -> what its launch needs
        self._tries: list[Hit | None] = [None, None]  # the hit tried before the call signature, the last hit
        self.cache = {}  # (a NotifyingDict: see the property)
        self.best_config: triton.Config | None = None
        # autotuner's own
        self.sources: dict[tuple[Any, ...], str] = {}  # key -> where its config came from: exact, stale, tuned...
        self.resolve_s: dict[tuple[Any, ...], float] = {}  # key -> seconds its first launch spent finding its config
        self.mirror = mirror  # the triton.runtime.autotuner.Autotuner this kernel tunes for (autotuner.install)
        self._recheck: dict[tuple[Any, ...], Pending] = {}  # key -> an unsettled answer: its meets, when asked again
        self._jit = fn if hasattr(fn, "device_caches") else None  # a JITFunction (not the interpreter's, not wrapped)
        fixed = constexprs(fn, spec.base_fn)
        self._fixed_names = frozenset(fixed)
        self._fixed = frozenset(i for i, n in enumerate(self.arg_names) if n in fixed)
        self._keyed = frozenset(i for i, n in enumerate(self.arg_names) if n in self.keys and n not in fixed)
        # parameters a call's value is swapped into (not constexprs, not keys): keyed by their specialization
        self._swapped_names = frozenset(n for n in self.arg_names if n not in fixed and n not in self.keys)
        # each parameter's part of a call signature, by position: a constexpr's value, a key argument's plain value,
        # any other argument's specialization
        self._signers = tuple(_typed if i in self._fixed else _value if i in self._keyed else call_signature
                              for i in range(len(self.arg_names)))
        self._kept_specializations = 0  # launches with unhashable arguments whose specialization was kept
        inner = fn
        while not hasattr(inner, "device_caches") and hasattr(inner, "fn"):
            inner = inner.fn  # a JITFunction under triton.heuristics: its launches go through Triton's run, and
        binary_cache.install(inner)  # still load the kept binaries and specializations
        # a covered Triton Autotuner's op is found, in a trial process, by the finder autotuner.decorator.install adds
        self.view = EngineView(spec, ("autotuner.decorator.install",) if mirror is not None else ())
        self.op = self.view.op
        register_op(self.op, replace=True)
        warm_up(self.op)  # the settings, the database and the source hash, before the first launch needs them

    @property  # type: ignore[override]
    def cache(self) -> dict[tuple[Any, ...], triton.Config]:
        """Triton's `cache` (key -> triton.Config). Code outside may change it, or set a new one: either drops the
        launchers remembered with their configs, so the next launch of every key reads it again."""
        return self._cache

    @cache.setter
    def cache(self, value: dict[tuple[Any, ...], triton.Config]) -> None:
        self._cache = NotifyingDict(self._forget_launchers)
        self._cache.update(value)

    def _forget_launchers(self) -> None:
        self._hits.clear()
        self._tries[:] = [None, None]

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return functools.partial(self._launch_at, grid)

    def run(self, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        return self._run(None, args, kwargs, grid, True) if warmup else self._launch_at(grid, *args, **kwargs)

    def _launch_at(self, grid: Any, *args: Any, **kwargs: Any) -> Any:
        """`kernel[grid](...)`: a call like the last one, or of a call signature launched before, launches with its
        config and launcher at once."""
        tries = self._tries
        hit = tries[0]
        checked = hit is not None and hit.same(args, kwargs)
        if hit is None or not checked:
            try:
                sig = self._call_signature(args, kwargs)
            except TypeError:  # an unhashable argument (or a tensor as a key value): the full path
                return self._run(None, args, kwargs, grid, False)
            found = self._hits.get(sig)
            same_call.follow(tries, found, hit)
            if found is None:
                return self._run(sig, args, kwargs, grid, False)
            hit = found
        elif tries[1] is not hit:  # (a hit found again after itself: the state is as it was)
            same_call.passed(tries, hit)
        if self._recheck and hit.key in self._recheck and self._recheck[hit.key].met():
            return self._run(self._call_signature(args, kwargs), args, kwargs, grid, False)
        return self._launch_hit(hit, args, kwargs, grid, checked)

    def _run(self, sig: tuple[Any, ...] | None, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any,
             warmup: bool) -> Any:  # a launch whose call signature (`sig`; None: none, or a warmup) keeps no launcher
        key = self.spec.keys.key(args, kwargs)
        config = self.cache.get(key)
        if config is None or (self._recheck and key in self._recheck and self._recheck[key].met()):
            config = self._resolve(key, args, kwargs, grid, warmup)
        self.best_config = config
        if self.mirror is not None:
            self.mirror.launched(config)
        meta = config.all_kwargs()
        if config.pre_hook is not None:  # as Triton's Autotuner.run calls it
            config.pre_hook({**dict(zip(self.arg_names, args, strict=False)), **kwargs, "grid": grid,
                             "warmup": warmup, **meta})
        if warmup:
            return self.fn.run(*args, grid=grid, warmup=True, **kwargs, **meta)
        return self._launch(sig, key, config, args, kwargs, meta, grid)

    def _call_signature(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """What a call's key, config and launch depend on, never a tensor's identity: constexprs' and key arguments'
        values, every other argument's specialization, keywords by name. TypeError where a value has no hash, or
        for more arguments than parameters (Triton's launch says what is wrong)."""
        signers = self._signers
        if len(args) > len(signers):
            raise TypeError("more arguments than parameters")
        sig = [sign(a) for sign, a in zip(signers, args, strict=False)]
        if kwargs:
            swapped = self._swapped_names
            types = tuple(map(type, kwargs.values()))
            if swapped.isdisjoint(kwargs) and same_call.PLAIN.issuperset(types):  # constexprs, keys, options: by value
                sig += (tuple(kwargs), tuple(kwargs.values()), types)
            else:
                names = self._fixed_names
                sig.append(tuple(kwargs))
                sig.extend([call_signature(v) if k in swapped else (type(v), v) if k in names else _value(v)
                            for k, v in kwargs.items()])
        return tuple(sig)

    def _launch_hit(self, hit: Hit, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any, checked: bool) -> Any:
        config, meta, launcher, placed = hit.config, hit.meta, hit.launcher, hit.placed
        self.best_config = config
        if self.mirror is not None:
            self.mirror.launched(config)
        if config.pre_hook is not None:
            config.pre_hook({**dict(zip(self.arg_names, args, strict=False)), **kwargs, "grid": grid,
                             "warmup": False, **meta})
        if callable(grid):
            if checked and hit.named is not None:  # (a fresh dictionary each call: a grid function may change it)
                named = hit.named.copy()
                flat = (*args, *kwargs.values()) if kwargs else args
                for name, i in hit.tensors_at:
                    named[name] = flat[i]
            else:
                named = self._grid_args(args, kwargs, meta)
            grid = grid(named)
        if placed:
            args = (*args, *map(kwargs.__getitem__, placed))
        return launcher.launch(grid if type(grid) is tuple else tuple(grid), args)

    def _grid_args(self, args: tuple[Any, ...], kwargs: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
        """What a grid function is given, as Triton gives it: every argument by name, then the config."""
        named = dict(zip(self.arg_names, args, strict=False))  # (updated in place: no dictionary made twice)
        named.update(kwargs)
        named.update(meta)
        return named

    def _launch(self, sig: tuple[Any, ...] | None, key: tuple[Any, ...], config: triton.Config,
                args: tuple[Any, ...], kwargs: dict[str, Any], meta: dict[str, Any], grid: Any) -> Any:
        """One launcher per call signature (`sig`; None: it has none) and config, launched directly after its first
        call; keyword arguments are placed by the kernel's parameters and no launcher keeps a tensor. A signature whose
        every argument was placed or kept by value is remembered (`_hits`), so its next calls skip the key and the
        lookups."""
        made = args, kwargs  # the call as made, which a later call's check compares with
        rest: dict[str, Any] = {}
        placed: tuple[str, ...] = ()
        if kwargs:
            n = len(args)
            args, rest = self._positional(args, kwargs)
            placed = tuple(self.arg_names[n:len(args)])
        if sig is None or any(k in self._swapped_names for k in rest):  # a tensor after a parameter left to its
            return self._through_triton(args, rest, meta, grid)  # default, or an unhashable argument
        if len(self._hits) >= MAX_LAUNCHERS:
            self._forget_launchers()
        launcher = Launcher(self.fn, (), {**rest, **meta})
        same = same_call.check(*made)
        named: dict[str, Any] | None = None
        tensors_at: tuple[tuple[str, int], ...] = ()
        if same is not same_call.never:  # every argument but the tensors a plain value: kept, the tensors not
            names, flat = (*self.arg_names[:len(made[0])], *made[1]), (*made[0], *made[1].values())
            tensors_at = tuple((k, i) for i, (k, v) in enumerate(zip(names, flat, strict=True))
                               if isinstance(v, torch.Tensor) and k not in meta)
            named = self._grid_args(*made, meta)
            named.update((k, None) for k, _ in tensors_at)
        self._hits[sig] = Hit(key, config, meta, launcher, placed, same, named, tensors_at)
        if callable(grid):
            grid = grid(self._grid_args(args, rest, meta))
        return launcher.launch(tuple(grid), args)

    def _positional(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments placed by parameter (keyword arguments that continue the positional ones), and the keyword
        arguments left (launch options; a parameter after one left to its default)."""
        full, rest = list(args), dict(kwargs)
        for name in self.arg_names[len(args):]:
            if name not in rest:
                break
            full.append(rest.pop(name))
        return tuple(full), rest

    def _through_triton(self, args: tuple[Any, ...], rest: dict[str, Any], meta: dict[str, Any], grid: Any) -> Any:
        out = self.fn.run(*args, grid=grid, warmup=False, **rest, **meta)
        if self._jit is not None and self._kept_specializations < KEEP_SPECIALIZATIONS:
            self._kept_specializations += 1  # for a later process's first launch
            try:
                binder = self._jit.device_caches[torch.cuda.current_device()][-1]
                specializations.remember(binder, args, {**rest, **meta})
            except Exception:  # noqa: S110 - keeping is never worth a failed launch
                pass
        return out

    def _resolve(self, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any,
                 warmup: bool) -> triton.Config:
        """The first launch of a key in this process: the miss policy's config, kept in `cache` (an answer that is
        not settled, until Settings.recheck_s from now, its meets counted: autotuner.launch.lookup.Pending)."""
        if self._jit is not None and not torch.cuda.is_available():
            raise RuntimeError(NO_GPU)
        t0 = _now()
        miss = self.spec.keys.miss(args, kwargs, grid, warmup)
        prior = self.mirror.prior(args, kwargs) if self.mirror is not None else None
        if prior is not None:
            answer = Answer(prior, "Triton's own cache (tuned before autotuner.install)", True)
        else:
            answer = resolve_miss(self.view, miss)
        self.sources[key] = answer.source
        self.resolve_s[key] = _now() - t0
        if answer.settled:
            self._recheck.pop(key, None)
        else:
            self._recheck[key] = pending(self.op, miss.problem, miss.device)
        # (setting it drops the launchers, which hold their configs)
        config = self.cache[key] = self.spec.hooked_config(answer.config) or to_config(answer.config)
        tuned = answer.source.startswith("tuned here")
        if tuned:  # as Triton's run leaves them after tuning: its time and each config's timings
            self.bench_time = self.resolve_s[key]
            self.configs_timings = timings(self.view, miss, self.configs)
            if print_autotuning():
                print(f"Triton autotuning for function {self.base_fn.__name__},\nwith key as {key},\n"
                      f"finished after {self.bench_time:.2f}s,\nbest config selected: {config}; "
                      f"(autotuner: {answer.source})")
        if prior is None and (not self.configs or len(self.spec.pruned(miss) or ()) > 1):
            tell_listener(self, key, config, tuned)
        if self.mirror is not None:
            self.mirror.resolved(self, key, args, kwargs, config)
        return config

    def warmup(self, *args: Any, **kwargs: Any) -> Any:
        """Compile without launching, as Triton's Autotuner does: every config left after pruning (a space's
        kernel: the config this key resolves to)."""
        if not self.configs:
            return [self.run(*args, warmup=True, **kwargs)]
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        try:
            return [self.fn.run(*args, warmup=True, **kwargs, **c.all_kwargs()) for c in self.prune_configs(kwargs)]
        finally:
            self.nargs = None

    def pre_hook(self, nargs: dict[str, Any], reset_only: bool = False) -> None:
        self.spec.hooks.pre_hook(nargs, reset_only)

    def post_hook(self, nargs: dict[str, Any], exception: BaseException | None) -> None:
        self.spec.hooks.post_hook(nargs, exception)

    def prune_configs(self, kwargs: dict[str, Any]) -> list[triton.Config]:
        """Triton's pruning of the list, as Triton's Autotuner does it: on `self.nargs` (the positional arguments
        by name) and the launch's keyword arguments."""
        return self.spec.prune(self.nargs or {}, kwargs)

    def named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The kernel's arguments by name."""
        return self.spec.keys.named(args, kwargs)

    def problem(self, named: Mapping[str, Any], call: dict[str, Any] | None = None) -> KernelProblem:
        """The problem (database key) these arguments name."""
        return self.spec.keys.problem(named, call)


def _typed(value: Any) -> tuple[type, Any]:
    """A constexpr's value as a launcher's key keeps it: with its type, as Triton tells 1, 1.0 and True apart."""
    return type(value), value


def _value(value: Any) -> tuple[type, Any]:
    """A key argument's or launch option's value as a launcher's key keeps it: a plain value only, never a tensor
    or descriptor, which would key a launcher per tensor and keep each one (TypeError: the full path)."""
    t = type(value)
    if t not in same_call.PLAIN:
        raise TypeError("only a plain value is part of a launcher's key")
    return t, value


def autotune(configs: list[triton.Config] | None = None, key: list[str] | None = None,
             prune_configs_by: dict[str, Any] | None = None, reset_to_zero: list[str] | None = None,
             restore_value: list[str] | None = None, pre_hook: Callable[..., Any] | None = None,
             post_hook: Callable[..., Any] | None = None, warmup: float | None = None, rep: float | None = None,
             use_cuda_graph: bool = False, do_bench: Callable[..., Any] | None = None, cache_results: bool = False, *,
             space: Space[Any] | None = None, name: str | None = None, reference: Callable[..., Any] | None = None,
             make_inputs: Callable[..., Any] | None = None, on_miss: str | None = None,
             trials: int | None = None, buckets: Mapping[str, Bucket] | None = None) -> Callable[[Any], Autotuned]:
    """Decorate a `@triton.jit` kernel as `triton.autotune(configs, key, ...)` does. `buckets` maps key arguments to how
    their values group ("pow2", or a function to a representative): one stored result per bucket. `use_cuda_graph` and
    `cache_results` are accepted for compatibility."""
    if warmup is not None or rep is not None or use_cuda_graph:  # Triton's own warning, from the user's line
        warnings.warn("warmup, rep, and use_cuda_graph parameters are deprecated. See "
                      "https://github.com/triton-lang/triton/pull/4496 for details.", DeprecationWarning, stacklevel=2)

    def decorator(fn: Any) -> Autotuned:
        return Autotuned(fn, configs, list(key or []), prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook, warmup=warmup, rep=rep,
                         do_bench=do_bench, space=space, name=name, reference=reference, make_inputs=make_inputs,
                         on_miss=on_miss, trials=trials, buckets=buckets, use_cuda_graph=use_cuda_graph)

    return decorator
