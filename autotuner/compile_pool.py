"""Compile candidates ahead of timing in a process pool (compile is CPU work, timing is GPU work).

Each pool process builds the problem's inputs once and launches each config it is handed once; Triton
writes the compiled kernel to its on-disk cache, so the trial worker's first launch only loads it. A
compile error or an out-of-resources config is reported from here and never reaches the trial worker.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing as mp
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from autotuner.runner import Outcome, WorkerSpec, _short, classify, die_with_parent

_STATE: dict[str, Any] = {}


def _init(spec: WorkerSpec) -> None:
    die_with_parent()
    import torch

    from autotuner.device import current_device
    from autotuner.registry import import_op, load_plugins

    load_plugins(list(spec.plugins))
    if spec.device_index is not None:
        torch.cuda.set_device(spec.device_index)
    op = import_op(spec.op)
    problem = op.problem_from_dict(spec.problem)
    _STATE.update(op=op, inputs=op.make_inputs(problem, current_device(spec.device_index).torch_device), torch=torch,
                  spec=spec)


def _lock_path(spec: WorkerSpec, config: dict[str, Any]) -> Path:
    """One lock file per kernel a config compiles to, as near as the problem tells: op, dtype, options, config
    (not the shape, which Triton does not compile into the kernel)."""
    cache = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    problem = {k: v for k, v in spec.problem.items() if isinstance(v, str)}  # dtype and options, not dimensions
    key = json.dumps([spec.op, problem, config], sort_keys=True)
    return cache / "autotuner-locks" / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock")


def _compile(spec: WorkerSpec, config: dict[str, Any]) -> Outcome | float:
    """Seconds the first launch took (compile included), or the Outcome of a config that cannot run.

    Workers on one host share Triton's cache, and tuning nearby problems at the same moment they compile the
    same kernels: under a per-kernel file lock, one compiles and the others then load it from the cache."""
    if _STATE.get("spec") != spec:  # set up by the initializer; a pool given another problem sets up again
        _init(spec)
    t0 = time.perf_counter()
    lock = _lock_path(spec, config)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = lock.open("a")
    except OSError:  # a read-only cache: compile without coordinating
        handle = None
    try:
        if handle is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        _STATE["op"].run(_STATE["inputs"], config)
        _STATE["torch"].cuda.synchronize()
    except Exception as exc:
        status = classify(exc)
        if status in ("compile_error", "out_of_resources", "invalid"):
            return Outcome(status, error=_short(exc))
        raise  # a crash here is left to the isolated trial worker to reproduce and record
    finally:
        if handle is not None:
            handle.close()  # releases the lock
    return time.perf_counter() - t0


class CompilePool:
    def __init__(self, spec: WorkerSpec, workers: int) -> None:
        self.spec = spec
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def _ensure(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                             initializer=_init, initargs=(self.spec,))
        return self._pool

    def submit(self, config: dict[str, Any]) -> Future[Outcome | float]:
        return self._ensure().submit(_compile, self.spec, config)

    def result(self, fut: Future[Outcome | float], timeout: float) -> Outcome | float | None:
        """The compile result, or None when the pool failed or ran out of time (the trial worker decides)."""
        try:
            return fut.result(timeout=timeout)
        except Exception:
            self.reset()
            return None

    def reset(self) -> None:
        if self._pool is not None:
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.kill()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
