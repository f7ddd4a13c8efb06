"""`autotuner.install()`: every autotuned Triton kernel of the process persists and shares its tuning, its code
untouched. More: docs/design/launch.md."""

from __future__ import annotations

import atexit
import dataclasses
import gc
import inspect
import json
import logging
import os
import runpy
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import triton
from triton.runtime.autotuner import Autotuner

from autotuner.base.registry import add_op_finder
from autotuner.decorator import helion_cache, inductor_cache
from autotuner.decorator.autotuned import Autotuned, KernelNotTuned
from autotuner.decorator.configs import config_dict, module_name
from autotuner.decorator.kept_timings import KeptTimings
from autotuner.launch.lookup import resolver, warm_up
from kernels._environment import env_text

__all__ = ["KernelReport", "install", "installed", "report", "run_script", "uninstall"]

_ADOPTED = "_autotuner_adopted"  # on each Autotuner met: its Autotuned, or why it is left to Triton
_NAME = "_autotuner_name"  # on each Autotuner seen: its name, taken while its module is what it was (a script's)
_KEPT = "_autotuner_kept"  # on an Autotuner whose own run chooses: its KeptTimings, or False (none can be kept)
_FIRST = "_autotuner_first_s"  # on each Autotuner launched through autotuner: seconds its first launch took
_TRITON_RUN = Autotuner.run
_TRITON_BENCH = Autotuner._bench
_TRITON_INIT = Autotuner.__init__
_OWN_WORK = ("_bench", "check_disk_cache")  # a subclass's own version of these would be bypassed
_seen: weakref.WeakSet[Autotuner] = weakref.WeakSet()  # every Autotuner defined (for the report)
_lock = threading.Lock()
log = logging.getLogger(__name__)


class NotCovered(str):
    """Why an Autotuner is left to Triton."""


def triton_key(tr: Autotuner, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The key Triton's `run` files a launch under in `cache`: the key arguments' values, then the dtype of
    every argument that has one."""
    named = {k: v for k, v in {**dict(zip(tr.arg_names, args, strict=False)), **kwargs}.items() if k in tr.arg_names}
    key = [named[k] for k in tr.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


class TritonStateKeeper:
    """Keeps a covered Autotuner's `cache` and `best_config` as its own `run` would."""

    def __init__(self, tr: Autotuner) -> None:
        self.tr = tr  # (a cycle through the Autotuned it holds: both go together)
        self.written: set[tuple[Any, ...]] = set()  # keys this mirror put in the cache (not the Autotuner's own)

    def prior(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        key = triton_key(self.tr, args, kwargs)
        config = None if key in self.written else self.tr.cache.get(key)  # an unsettled answer is asked again
        return config_dict(config) if config is not None else None

    def resolved(self, kernel: Autotuned, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any],
                 config: triton.Config) -> None:
        tkey = triton_key(self.tr, args, kwargs)
        self.tr.cache[tkey] = config
        self.written.add(tkey)
        if kernel.sources[key].startswith("tuned here"):  # as Triton's run leaves them after tuning
            self.tr.bench_time = kernel.bench_time
            self.tr.configs_timings = kernel.configs_timings

    def launched(self, config: triton.Config) -> None:
        self.tr.best_config = config


def _not_covered(tr: Autotuner) -> NotCovered | None:
    cls = type(tr)
    for name in _OWN_WORK:
        if getattr(cls, name) is not getattr(Autotuner, name):
            return NotCovered(f"{cls.__module__}.{cls.__qualname__} has its own {name}")
    if len(tr.configs) <= 1:
        return NotCovered("one config: nothing to tune")
    return None


def _adopt(tr: Autotuner) -> Autotuned | NotCovered:
    """The Autotuned that tunes for `tr`, made at its first launch (or why it is left to Triton)."""
    with _lock:
        adopted = tr.__dict__.get(_ADOPTED)
        if adopted is not None:
            return adopted  # type: ignore[no-any-return]
        adopted = _not_covered(tr)
        if adopted is None:
            try:
                adopted = _autotuned(tr)
            except Exception as exc:  # a kernel autotuner cannot read stays Triton's, and says why
                adopted = NotCovered(f"not readable by autotuner: {exc}")
        tr.__dict__[_ADOPTED] = adopted
        _register(tr)
        return adopted


def _autotuned(tr: Autotuner) -> Autotuned:
    def prune(configs: list[triton.Config], nargs: dict[str, Any], **kwargs: Any) -> list[triton.Config]:
        saved, tr.nargs = getattr(tr, "nargs", None), nargs  # Triton's prune_configs reads the arguments there
        try:
            return list(tr.prune_configs(kwargs))
        finally:
            tr.nargs = saved

    own_bench = tr._do_bench is not None or type(tr).do_bench is not Autotuner.do_bench
    if type(tr) is Autotuner and getattr(tr, "user_defined_pre_hook", None) is False \
            and getattr(tr, "user_defined_post_hook", None) is False:
        # Triton's default hooks (zero `reset_to_zero`, copy and put back `restore_value`) done by autotuner's: the
        # same work, without the copies kept on the Autotuner, so that the arguments copied to another GPU get
        # hooks of their own (autotuner.decorator.lanes). A subclass's or a user's hooks are called as they are.
        hooks: dict[str, Any] = {"reset_to_zero": list(tr.reset_to_zero), "restore_value": list(tr.restore_value)}
    else:
        # Triton's own pre_hook takes reset_only; a user's takes one argument (Triton's run passes it reset_only
        # after tuning regardless, and fails on it)
        hooks = {"pre_hook": tr.pre_hook, "post_hook": tr.post_hook,
                 "pre_hook_takes_reset_only": not getattr(tr, "user_defined_pre_hook", False)}
    return Autotuned(tr.fn, list(tr.configs), list(tr.keys), prune_configs_by={"early_config_prune": prune},
                     do_bench=(lambda fn, quantiles: tr.do_bench(fn, quantiles=quantiles)) if own_bench else None,
                     mirror=TritonStateKeeper(tr), **hooks)


def _run(self: Autotuner, *args: Any, **kwargs: Any) -> Any:
    adopted = self.__dict__.get(_ADOPTED)
    if adopted is not None and _FIRST in self.__dict__:
        return _launch(self, adopted, args, kwargs)
    t0 = time.perf_counter()  # the kernel's first launch in this process: its cost is reported
    try:
        return _launch(self, adopted or _adopt(self), args, kwargs)
    finally:
        self.__dict__.setdefault(_FIRST, time.perf_counter() - t0)


def _launch(self: Autotuner, adopted: Autotuned | NotCovered, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if isinstance(adopted, NotCovered):
        return _TRITON_RUN(self, *args, **kwargs)
    grid, warmup = kwargs.pop("grid"), kwargs.pop("warmup", False)
    try:
        return adopted.run(*args, grid=grid, warmup=warmup, **kwargs)
    except KernelNotTuned:
        raise  # AUTOTUNER_ON_MISS=error: asked for
    except Exception as exc:
        if adopted.spec.keys.key(args, kwargs) in adopted.cache:
            raise  # the launch itself failed, with a config it had: as it would under Triton
        # autotuner could not find this key a config (every config failed its check, a measurement ran out of
        # memory...): never worse than Triton, which tunes the kernel from here on
        log.warning("autotuner: %s: left to Triton's autotuner (%s: %s)", adopted.name, type(exc).__name__, str(exc))
        self.__dict__[_ADOPTED] = NotCovered(f"autotuner failed to tune it ({type(exc).__name__}: {exc}"[:300] + ")")
        return _TRITON_RUN(self, *args, grid=grid, warmup=warmup, **kwargs)


def _bench(self: Autotuner, *args: Any, config: triton.Config, **meta: Any) -> Any:
    """Triton's `_bench`, its timings kept in the database (reached by subclasses whose own run chooses)."""
    kept = self.__dict__.get(_KEPT)
    if kept is None:
        kept = _keep(self)
    if kept is False:
        return _TRITON_BENCH(self, *args, config=config, **meta)
    try:
        return kept.bench(self, _TRITON_BENCH, args, meta, config)
    except Exception as exc:  # timings not kept must never stop the library's own tuning
        log.warning("autotuner: %s: timings not kept (%s: %s); Triton's _bench from now on",
                    self.__dict__.get(_NAME), type(exc).__name__, exc)
        self.__dict__[_KEPT] = False
        return _TRITON_BENCH(self, *args, config=config, **meta)


def _keep(tr: Autotuner) -> KeptTimings | bool:
    with _lock:
        kept = tr.__dict__.get(_KEPT)
        if kept is not None:
            return kept  # type: ignore[no-any-return]
        adopted = tr.__dict__.get(_ADOPTED)
        try:
            kept = KeptTimings(adopted if isinstance(adopted, Autotuned) else _autotuned(tr))
        except Exception as exc:
            log.info("autotuner: %r: timings not kept: %s", tr, str(exc))
            kept = False
        tr.__dict__[_KEPT] = kept
    _register(tr)
    return kept


def _init(self: Autotuner, *args: Any, **kwargs: Any) -> None:
    _TRITON_INIT(self, *args, **kwargs)
    _register(self)


def _register(tr: Autotuner) -> None:
    if isinstance(tr, Autotuned):
        return  # autotuner's own kernel (an Autotuner to torch): not Triton's to cover
    if installed():
        _time_own_run(type(tr))
    if _NAME not in tr.__dict__:
        base = getattr(tr, "base_fn", None)
        tr.__dict__[_NAME] = f"{module_name(base)}:{base.__qualname__}" if base is not None else repr(tr)
    _seen.add(tr)


_OWN_RUNS: dict[type, Any] = {}  # a subclass that defines its own run -> that run, while install() times it


def _time_own_run(cls: type) -> None:
    """A subclass whose own run chooses: its first launch of each kernel is timed (and the kernel counted as met)
    by a thin wrapper around that run, given back at uninstall()."""
    owner = next(k for k in cls.__mro__ if "run" in k.__dict__)
    if owner is Autotuner or owner in _OWN_RUNS or not inspect.isfunction(owner.__dict__["run"]):
        return  # Triton's own, timed already, or not a plain function (a staticmethod, say): left as it is
    own = _OWN_RUNS[owner] = owner.__dict__["run"]

    def run(self: Autotuner, *args: Any, **kwargs: Any) -> Any:
        if _FIRST in self.__dict__:
            return own(self, *args, **kwargs)
        t0 = time.perf_counter()
        try:
            return own(self, *args, **kwargs)
        finally:
            self.__dict__.setdefault(_FIRST, time.perf_counter() - t0)

    run.__wrapped__ = own  # type: ignore[attr-defined]
    owner.run = run  # type: ignore[attr-defined]


def install() -> None:
    """Tune every Autotuner of the process through autotuner, those defined already included."""
    if installed():
        return
    Autotuner.run = _run  # type: ignore[method-assign]
    Autotuner._bench = _bench  # type: ignore[method-assign]
    Autotuner.__init__ = _init  # type: ignore[method-assign]
    for obj in gc.get_objects():
        if issubclass(type(obj), Autotuner) and not issubclass(type(obj), Autotuned):  # type(): no lazy
            # module attribute is touched
            _register(obj)
    helion_cache.install()
    settings = resolver().settings
    inductor_cache.install(settings.db_url, settings.compile_secret)
    warm_up()  # the settings and the database, before a first launch needs them
    path = env_text("AUTOTUNER_REPORT")
    if path and not _reporting:
        _reporting.append(path)
        atexit.register(write_report, path)


_reporting: list[str] = []


def write_report(path: str) -> None:
    """The report as JSON at `path` ("{pid}" in it becomes the process id): AUTOTUNER_REPORT does this at exit."""
    target = Path(path.replace("{pid}", str(os.getpid())))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps([dataclasses.asdict(r) for r in report()], indent=1))
    except OSError as exc:
        log.warning("autotuner: could not write the report to %s: %s", target, str(exc))


def uninstall() -> None:
    """Give every Autotuner back to Triton. Configs already resolved stay in their `cache`."""
    Autotuner.run = _TRITON_RUN  # type: ignore[method-assign]
    Autotuner._bench = _TRITON_BENCH  # type: ignore[method-assign]
    Autotuner.__init__ = _TRITON_INIT  # type: ignore[method-assign]
    helion_cache.uninstall()
    inductor_cache.uninstall()
    while _OWN_RUNS:
        owner, own = _OWN_RUNS.popitem()
        owner.run = own  # type: ignore[attr-defined]


def installed() -> bool:
    return Autotuner.run is _run


@dataclass(frozen=True)
class KernelReport:
    name: str  # module:qualname, as in the database
    library: str  # the top-level package it comes from
    covered: bool
    how: str  # tuned by autotuner, its timings kept (its own run chooses), or why it is left to Triton
    keys: dict[str, str]  # each key met -> where its config came from
    tuning_s: float  # seconds spent finding configs in this process (tuning, lookups)
    tuned_here: int  # keys tuned in this process
    first_call_s: float | None = None  # its first launch in this process, as the caller waited for it (None: not
    # timed, launched before install())


def _triton_keys(tr: Autotuner) -> dict[str, str]:
    """The keys in a kernel's own cache, where it can list them (a library's cache may be a mapping of its own)."""
    try:
        return {",".join(map(str, k)) if isinstance(k, tuple) else str(k): "Triton" for k in list(tr.cache.keys())}
    except Exception as exc:
        return {f"(its cache cannot list its keys: {type(exc).__name__})": "Triton"}


def report() -> list[KernelReport]:
    """Every Autotuner of the process: covered or not (why), keys seen, tuned here or reused, time spent."""
    out = []
    for tr in list(_seen):
        name = tr.__dict__[_NAME]
        library = name.split(":")[0].split(".")[0]
        adopted = tr.__dict__.get(_ADOPTED)
        kept = tr.__dict__.get(_KEPT)
        if isinstance(kept, KeptTimings):
            keys = {k: "timed here (a config or more)" if k in kept.runs else "reused (every timing from the database)"
                    for k in kept.known}
            how = (f"its own run chooses; timings kept: {kept.measured} measured here, {kept.reused} reused from "
                   "the database")
            out.append(KernelReport(name, library, True, how, keys, 0.0, len(kept.runs), tr.__dict__.get(_FIRST)))
            continue
        if isinstance(adopted, Autotuned):
            keys = {",".join(map(str, k)): s for k, s in adopted.sources.items()}
            out.append(KernelReport(adopted.name, library, True, "tuned by autotuner", keys,
                                    sum(adopted.resolve_s.values()),
                                    sum(s.startswith("tuned here") for s in adopted.sources.values()),
                                    tr.__dict__.get(_FIRST)))
            continue
        if adopted is None and _FIRST in tr.__dict__:  # launched through its own run, which never timed a config
            cls = type(tr)
            adopted = NotCovered(f"{cls.__module__}.{cls.__qualname__}.run replaces Triton's run and times nothing "
                           "through _bench")
        if adopted is None:
            continue  # defined, never launched
        out.append(KernelReport(name, library, False, str(adopted), _triton_keys(tr), 0.0, 0, tr.__dict__.get(_FIRST)))
    return sorted(out, key=lambda r: r.name)


def run_script(argv: list[str]) -> None:
    """Run `script.py args...` (or `-m module args...`) as `python` would, installed: what `python -m autotuner
    run -- ...` does. AUTOTUNER_INSTALL=1 is set for the processes it starts that import autotuner."""
    argv = argv[1:] if argv[:1] == ["--"] else list(argv)
    if not argv or argv[:1] == ["-m"] and len(argv) < 2:
        raise SystemExit("usage: python -m autotuner run [--] script.py [args...] | -m module [args...]")
    os.environ["AUTOTUNER_INSTALL"] = "1"
    install()
    if argv[0] == "-m":
        sys.argv = argv[1:]
        sys.path.insert(0, os.getcwd())  # as `python -m` does
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        path = Path(argv[0])
        if not path.is_file():
            raise SystemExit(f"error: no script at {path}")
        sys.argv = argv
        sys.path.insert(0, str(path.resolve().parent))
        runpy.run_path(str(path), run_name="__main__")


def find_op(name: str) -> Any:
    """The op of a covered kernel named `module:qualname` whose module is imported (a worker tuning a recorded
    key, `autotuner show`): the module's Autotuner over that function, made an Autotuned now; or its Helion kernel's."""
    module, _, qualname = name.partition(":")
    mod = sys.modules.get(module)
    if mod is None:
        return None
    for value in list(vars(mod).values()):
        for _ in range(8):  # through wrappers (triton.heuristics above the autotuner) to the Autotuner
            if isinstance(value, Autotuner) or not hasattr(value, "fn"):
                break
            value = value.fn
        if isinstance(value, Autotuner) and not isinstance(value, Autotuned) and \
                getattr(value.base_fn, "__qualname__", None) == qualname:
            adopted = _adopt(value)
            if isinstance(adopted, Autotuned) and adopted.name == name:
                return adopted.op
    return helion_cache.find_op(mod, qualname)


add_op_finder(find_op)  # a worker, its trial processes and `autotuner show` reach covered kernels by name
