"""Where trial workers and compile-pool processes come from: a fork server that imported torch and Triton once. More:
docs/design/engine.md."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from multiprocessing.context import ForkServerContext
from typing import Any, cast

# Only these, torch first (and server_exit, last: Python's Ctrl-C handler back; the server ends at once when its
# command has ended): the server must leave CUDA as it found it. Computing Triton's cache-key hash here as well (so
# that each child would inherit it instead of hashing libtriton itself), in a thread during torch's import or
# after it, made every child's CUDA initialisation fail on a GPU host with Triton 3.6; so did a module of
# autotuner's imported before torch (see the module's docstring).
PRELOAD = ["torch", "triton", "triton.language", "autotuner.engine.measure.server_exit"]

_started = False
TRITON_KEY = "AUTOTUNER_TRITON_KEY"  # how a child is handed the hash (taken out of its environment by `adopt`)
_triton_key: dict[str, Any] = {}  # "process": computing it, "value": the hash
_key_lock = threading.Lock()  # (children are made from several threads: the first waits, the others find the value)
# what that process runs: Triton found as this process finds it (its sys.path, as the fork server gets it)
_HASH = "import json, sys; sys.path[:] = json.loads(sys.argv[1]); from triton.runtime.cache import triton_key; " \
        "print(triton_key())"


def is_main_process() -> bool:
    return mp.parent_process() is None


def start() -> None:
    """Start the fork server (its imports run in the background); a no-op after the first call, and in a child."""
    global _started
    if _started or not is_main_process():
        return
    _started = True
    mp.set_forkserver_preload(PRELOAD)
    from multiprocessing import forkserver

    with _ctrl_c_ignored():  # (kept by the server through its exec, until server_exit)
        forkserver.ensure_running()
    from kernels._backend import cuda_device_count, interpreting

    if not interpreting() and cuda_device_count():  # (the interpreter, a host without a GPU, compiles nothing)
        hash_triton()


@contextlib.contextmanager
def _ctrl_c_ignored() -> Iterator[None]:
    """SIGINT ignored in this process meanwhile (a Ctrl-C in these few milliseconds is lost); left as it is when
    called off the main thread, which alone may change it."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def hash_triton() -> None:
    """Start the process computing Triton's installation hash (read by `environment`)."""
    try:
        _triton_key["process"] = subprocess.Popen([sys.executable, "-c", _HASH, json.dumps(sys.path)],
                                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:  # each child computes what it needs, as before
        _triton_key["process"] = None


def _hashed() -> str | None:
    """The hash, once its process has answered (waited for: the fork server's imports take longer); None where
    it could not say (a Triton without it: each child computes what it needs, as before)."""
    with _key_lock:
        proc = _triton_key.pop("process", None)
        if proc is not None:
            try:
                out, _ = proc.communicate(timeout=120)
                lines = out.strip().splitlines() if proc.returncode == 0 else []
                _triton_key["value"] = lines[-1] if lines else None
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        return _triton_key.get("value")


def context() -> ForkServerContext:
    """The context new processes come from (the fork server, started on first use if no command started it)."""
    start()
    return cast(ForkServerContext, mp.get_context("forkserver"))


def fresh_context() -> Any:
    """The context of processes that must not come from the fork server, which imports torch: compile-pool processes,
    which compile without it (autotuner.engine.measure.torch_free), new interpreters ready long before torch's import
    ends. (`autotuner tune` and `autotuner worker` name their script as the package's __main__, which they skip.)"""
    return mp.get_context("spawn")


_for_children: dict[str, str] = {}


def child_environment(extra: dict[str, str]) -> None:
    """Variables the children made from now on see besides this process's (autotuner.engine.measure.compile_share)."""
    _for_children.clear()
    _for_children.update(extra)


def environment() -> dict[str, str]:
    """The environment a child should see: this process's, now, and what child_environment added; and Triton's
    installation hash, once this process has it (waited for: the fork server's imports take longer)."""
    env = {**os.environ, **_for_children}
    env.pop(TRITON_KEY, None)  # only ever this process's own
    key = _hashed()
    if key:
        env[TRITON_KEY] = key
    return env


def adopt(env: dict[str, str]) -> None:
    """In a child: take the parent's environment (before importing anything that reads it), and Triton's
    installation hash where the parent handed it."""
    env = dict(env)
    key = env.pop(TRITON_KEY, None)
    if env != os.environ:
        os.environ.clear()
        os.environ.update(env)
    if key:
        use_triton_key(key)


def use_triton_key(key: str) -> None:
    """Triton's `triton_key()` gives `key` in this process from now on, wherever a module bound it by name; a key
    of another Triton version (a parent that found another installation) is not used."""
    import triton
    import triton.runtime.cache as cache

    if not key.startswith(triton.__version__):
        return
    original = cache.triton_key

    def triton_key() -> str:
        return key

    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)  # (not getattr on the module: some compute missing names)
        if isinstance(names, dict) and names.get("triton_key") is original:
            names["triton_key"] = triton_key


def host_share(configured: int, gpus: int) -> int:
    """Processes compiling ahead of timing for one GPU's worker: `configured` if set, else the CPU cores shared
    among the host's `gpus`, less two for each worker's own process and its trial worker: more compiling
    processes than cores slowed every worker's timing (benchmarks/tune_time.py)."""
    if configured:
        return configured
    return max(1, (os.cpu_count() or 2) // max(1, gpus) - 2)
