"""Helion kernels through the store: Helion's autotune cache (its `AutotuneCacheBase`: `get`, then `put` after a
search) answered from the project's database, so a kernel tuned in one process runs tuned, without a search, in
every process and host on that database. Under `autotuner.install()` it stands in for Helion's local caches (the
names `LocalAutotuneCache` and `StrictLocalAutotuneCache` in `helion.autotuner.cache_classes`, which Helion's
default `autotuner_fn` reads at each search); Helion's own file is still written and read where Helion can key it,
so nothing is lost while the database is down. More: docs/helion.md."""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import math
import sys
import textwrap
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from autotuner.base.registry import register_op
from autotuner.decorator import helion_miss, helion_search
from autotuner.decorator.after_import import forget, when_imported
from autotuner.decorator.configs import module_name
from autotuner.decorator.kernel_problem import KernelProblem, dtype_name, key_text
from kernels._backend import interpreting
from search_spaces.contract import Option, TunableOp
from search_spaces.space import Space, config_key

log = logging.getLogger(__name__)
REPLACED = ("LocalAutotuneCache", "StrictLocalAutotuneCache")  # the cache names Helion's settings default to
_originals: dict[str, Any] = {}  # Helion's own classes under REPLACED, while installed
_timer: list[Any] = []  # Helion's own timer, while the interpreter's replaces it
_ops: weakref.WeakKeyDictionary[Any, TunableOp[KernelProblem]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def versions() -> str:
    """What besides the kernel's source decides its binaries: Helion's and torch's versions (Triton's is a column
    of every result)."""
    return f"helion {importlib.metadata.version('helion')}; torch {torch.__version__}"


def _not_run(*_: Any) -> Any:
    raise NotImplementedError("a Helion kernel is tuned by Helion's own search, in the process that launches it")


def helion_op(kernel: Any) -> TunableOp[KernelProblem]:
    """The op a Helion kernel's results are kept under (made once per kernel, registered by name): named
    module:qualname as a decorated kernel is; its kernel hash the kernel's source, its backend and the versions."""
    with _lock:
        op = _ops.get(kernel)
        if op is not None:
            return op
        fn = kernel.fn
        source = textwrap.dedent(inspect.getsource(fn))
        identity = f"helion kernel; backend {kernel.settings.backend}; {versions()}; source {source}"
        op = TunableOp(name=f"{module_name(fn)}:{fn.__qualname__}", kind="kernel", problem_type=KernelProblem,
                       space=Space(params=(), constraints=(), default_fn=lambda p, d: {}), dtypes=(),
                       launch=_not_run, make_inputs=_not_run, problem_from_inputs=_not_run, reference=None,
                       identity=identity, description=(fn.__doc__ or "").strip().split("\n")[0],
                       call=f"{fn.__name__}(...) (a Helion kernel)",
                       search=functools.partial(helion_miss.search, kernel, _patch),
                       options=(Option("call", data=True, help="a recorded launch, for workers"),))
        register_op(op, replace=True)
        _ops[kernel] = op
        return op


def _kernels(module: Any) -> list[Any]:
    """The module's Helion kernels (none where Helion is not imported: then it defines none)."""
    if "helion" not in sys.modules:
        return []
    from helion.runtime.kernel import Kernel

    return [value for value in list(vars(module).values()) if isinstance(value, Kernel)]


def module_ops(module: Any) -> list[TunableOp[KernelProblem]]:
    """The ops of a module's Helion kernels (a plugin's: the service and workers serve them)."""
    return [helion_op(kernel) for kernel in _kernels(module)]


def find_op(module: Any, qualname: str) -> TunableOp[KernelProblem] | None:
    """The op of the module's Helion kernel over the function `qualname` (`autotuner show` names it)."""
    return next((helion_op(k) for k in _kernels(module) if getattr(k.fn, "__qualname__", None) == qualname), None)


def helion_problem(kernel: Any, args: Sequence[Any]) -> KernelProblem:
    """The problem a launch is: each tensor's sizes (`x_0`, `x_1`, ...; what nearest ranks by), its strides where
    it is not contiguous, each plain argument's value, and a digest of Helion's key for any other argument; and the
    tensors' dtypes. Helion keys a specialization by these (static shapes) or by fewer (size buckets)."""
    names = helion_miss.parameter_names(kernel)
    values: list[tuple[str, Any]] = []
    dtypes: list[str] = []
    for name, arg in zip(names, args, strict=False):
        if isinstance(arg, torch.Tensor):
            values += [(f"{name}_{i}", int(d)) for i, d in enumerate(arg.shape)]
            if not arg.is_contiguous():
                values.append((f"{name}_strides", key_text("x".join(map(str, arg.stride())))))
            dtypes.append(dtype_name(arg.dtype))
        elif isinstance(arg, bool) or arg is None:
            values.append((name, arg))
        elif isinstance(arg, int | float) and math.isfinite(arg) and abs(arg) < 2**63:
            values.append((name, arg))
        elif isinstance(arg, str):
            values.append((name, key_text(arg)))
        else:
            values.append((name, key_text(repr(kernel._specialization_key(arg)))))
    return KernelProblem(tuple(values), tuple(dtypes))


def _device(args: Sequence[Any]) -> Any:
    from autotuner.base.device import current_device

    tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
    index = tensor.device.index if tensor is not None and tensor.device.type == "cuda" else None
    return current_device(index)


def _autotuner_resolver() -> Any:
    from autotuner.launch.lookup import resolver

    return resolver()


def _cache_base() -> type:
    from helion.autotuner.base_cache import AutotuneCacheBase, CacheKeyBase

    @dataclasses.dataclass(frozen=True)
    class StoreKey(CacheKeyBase):
        """Where a result is kept: op, problem key, device key and kernel hash."""

        op: str
        problem: str
        device: str
        kernel_hash: str

    class StoreCache(AutotuneCacheBase):  # type: ignore[misc,valid-type]
        """Helion's cache answered from the database first, then from Helion's own file (`local`: the cache class
        it stands in for, where that can key this kernel; it cannot under Triton's interpreter)."""

        local_class: Any = None

        def __init__(self, autotuner: Any, **factory: Any) -> None:  # (Helion 1.5 passes `autotuner_factory`)
            super().__init__(autotuner, **factory)
            try:
                self.local = self.local_class(autotuner, **factory)
            except Exception:  # noqa: BLE001 - Helion's key needs a GPU's name: the database alone keeps it
                self.local = None
            self.op: TunableOp[KernelProblem] | None = None
            try:
                self.op = helion_op(self.kernel.kernel)
                self.problem = helion_problem(self.kernel.kernel, self.args)
                self.device = _device(self.args)
            except Exception as exc:  # noqa: BLE001 - a device or argument autotuner cannot name: Helion's own
                # cache alone, as without autotuner
                log.warning("autotuner: %s is left to Helion's own cache: %s: %s", self.kernel.kernel.name,
                            type(exc).__name__, exc)
                if self.local is None:
                    raise
                self.key = self.local._get_cache_key()
                return
            self.key = StoreKey(self.op.name, self.problem.key, self.device.key, self.op.kernel_hash)
            self.label = f"{self.op.name} {self.problem.key}"  # (what the messages name)

        def get(self) -> Any:
            stored = self._stored() if self.op is not None else None
            if stored is None and self.local is not None:
                stored = self.local.get()
            if stored is None and self.op is not None:
                stored = self._missed()
            return stored

        def _missed(self) -> Any:
            return helion_miss.missed(self, _autotuner_resolver())

        def _stored(self) -> Any:
            """The stored current config for this problem, checked by Helion against this kernel's config spec;
            where the best row is one it rejects (a writer's), the fastest measured config it accepts. None when
            there is none, or no database."""
            store, _ = _autotuner_resolver().store.peek()
            if store is None:
                return None
            try:
                best = store.best(op=self.op, problem=self.problem, device=self.device)
                if best is None or best.stale:
                    return None
                config = self._accepted(best.config)
                if config is not None:
                    return config
                measured = store.trial_times(op=self.op, problem=self.problem, device=self.device).values()
            except Exception as exc:  # noqa: BLE001 - a database gone since: Helion searches, as without one
                log.warning("autotuner: %s: the database could not be read (%s); Helion searches", self.label, exc)
                return None
            for cfg, _ in sorted((m for m in measured if m[1] is not None), key=lambda m: m[1]):
                config = self._accepted(cfg)
                if config is not None:
                    return config
            return None

        def _accepted(self, stored: dict[str, Any]) -> Any:
            """The stored config as Helion's Config, or None (said) where this kernel's config spec rejects it."""
            from helion.runtime.config import Config

            try:
                config = Config.from_json(json.dumps(stored))
                self.kernel.config_spec.normalize(dict(config.config))  # (a copy: checked, not changed)
            except Exception as exc:  # noqa: BLE001 - a row no longer (or never) valid for this kernel
                log.warning("autotuner: %s: a stored config is not one this kernel takes (%s): %s", self.label,
                            type(exc).__name__, str(exc)[:200])
                return None
            return config

        def put(self, config: Any) -> None:
            if self.local is not None:
                self.local.put(config)
            if self.op is None:
                return
            median_ms = getattr(self.autotuner, "best_perf_so_far", None)
            if not isinstance(median_ms, int | float) or not math.isfinite(median_ms) or median_ms <= 0:
                log.warning("autotuner: %s: Helion's search gave no time for its pick; not stored", self.label)
                return
            try:
                record(self.op, self.problem, self.device, json.loads(config.to_json()), float(median_ms),
                       strategy=getattr(self.autotuner, "label", None) or f"helion:{type(self.autotuner).__name__}",
                       trials=self.autotuner.trials() if hasattr(self.autotuner, "trials") else ())
            except Exception as exc:  # noqa: BLE001 - kept in Helion's own file where it can be, as without autotuner
                log.warning("autotuner: %s: Helion's pick could not be stored (%s)", self.label, exc)

        def _get_cache_key(self) -> Any:
            return self.key

        def _list_cache_entries(self) -> list[Any]:
            return []

        def _get_cache_info_message(self) -> str:
            if self.op is None:
                return self.local._get_cache_info_message()  # type: ignore[no-any-return]
            return f"Kept in autotuner's database as {self.label}; `autotuner show` lists it."

    return StoreCache


def record(op: TunableOp[KernelProblem], problem: KernelProblem, device: Any, config: dict[str, Any],
           median_ms: float, *, strategy: str, trials: Sequence[tuple[dict[str, Any], str, float | None]] = ()) -> None:
    """A search's pick as a run and the problem's best (kept unless a faster one is), through the job's store while
    a worker searches (helion_miss.SINK), else this process's database. The run's trials: `trials` (config, status,
    ms) where the search kept them (ours does), else the pick alone (Helion's searches keep theirs to themselves)."""
    from autotuner.engine.measure.timing import CUDA_EVENTS, WALL_CLOCK

    sink = helion_miss.SINK.get()
    store = sink.store if sink is not None else _autotuner_resolver().store.writer()
    clock = WALL_CLOCK if device.is_interpreter else CUDA_EVENTS
    run_id = store.start_run(op=op, problem=problem, device=device, strategy=strategy, budget_trials=None,
                             budget_seconds=None, clock=clock, job_id=getattr(store, "job_id", None))
    for cfg, status, ms in trials or [(config, "ok", median_ms)]:
        store.record_trial(run_id=run_id, config=cfg, config_key=config_key(cfg), status=status, median_ms=ms)
    store.save_best(op=op, problem=problem, device=device, config=config, median_ms=median_ms, default_ms=None,
                    torch_ms=None, run_id=run_id)
    store.finish_run(run_id=run_id, status="done")
    if sink is not None:
        sink.result = (config, median_ms, run_id)


def _patch() -> None:
    """Helion's local cache names answered by the store (Helion imported)."""
    from helion.autotuner import cache_classes

    with _lock:
        if _originals:
            return
        base = _cache_base()
        if interpreting():  # Helion times a config with CUDA events, which Triton's interpreter has not: with its
            # wall-clock timer there instead (its hook for tests), so its search runs on the CPU too
            try:
                from helion.autotuner import benchmark_provider
                from helion.autotuner.benchmarking import do_bench_generic
            except ImportError:  # a Helion without that hook (1.0): its search needs a GPU
                pass
            else:
                _timer.append(benchmark_provider.do_bench)
                benchmark_provider.do_bench = do_bench_generic
        helion_search.register()
        for name in REPLACED:
            original = cache_classes.get(name)
            if original is None:
                continue
            _originals[name] = original
            cache_classes[name] = type(f"Store{name}", (base,), {"local_class": original})


def install() -> None:
    """Helion kernels' autotuning kept in the database: now if Helion is imported, else when it is."""
    if importlib.util.find_spec("helion") is not None:
        when_imported("helion.autotuner", _patch)


def uninstall() -> None:
    """Helion's own caches back."""
    forget(_patch)
    with _lock:
        if not _originals:
            return
        from helion.autotuner import cache_classes

        cache_classes.update(_originals)
        _originals.clear()
        helion_search.unregister()
        if _timer:
            from helion.autotuner import benchmark_provider

            benchmark_provider.do_bench = _timer.pop()
