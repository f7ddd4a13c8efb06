"""Compile candidates ahead of timing in a process pool (compile is CPU work, timing is GPU work).

Each pool process builds the problem's inputs once and launches each config it is handed once, compiling and
loading it but not running it (`compile_only`: the trial worker times on the same GPU); Triton writes the compiled
kernel to its on-disk cache, so the trial worker's first launch only loads it. A compile error or an
out-of-resources config is reported from here and never reaches the trial worker.
"""

from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from autotuner.engine import compile_lock, processes
from autotuner.engine.outcome import Outcome, classify, short_error
from autotuner.engine.processes import adopt
from autotuner.engine.trial_process import WorkerSpec, die_with_parent, warm_up

_STATE: dict[str, Any] = {}
# Compiling is background work: the trial worker's timing loop and the search must never wait for a core.
NICE = 10


def compile_only() -> None:
    """From now on every Triton launch in this process (a built-in op's, a decorated kernel's) compiles the kernel
    and loads it into the CUDA context, where a config over the device's shared memory or threads fails as at a
    real launch, and does not run it. Running them put this process's kernels on the GPU in the middle of the trial
    worker's timings: the GPU switches between the processes' contexts, and a microsecond config timed many times
    slower while the pool compiled ahead (benchmarks/RESULTS.md)."""
    from triton.runtime.jit import JITFunction

    launch = JITFunction.run
    if getattr(launch, "compile_only", False):
        return

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        kernel = launch(self, *args, grid=grid, warmup=True, **kwargs)
        if kernel is not None:
            kernel.run  # noqa: B018  (loads it: Triton's checks of the device's limits happen here)
        return kernel

    run.compile_only = True  # type: ignore[attr-defined]
    JITFunction.run = run  # type: ignore[method-assign]


def _init(spec: WorkerSpec | None, env: dict[str, str] | None = None, device_index: int | None = None) -> None:
    if env is not None:  # a new process: the parent's environment first
        adopt(env)
        die_with_parent()
        try:
            os.nice(NICE)
        except OSError:  # pragma: no cover - not allowed here
            pass
        if device_index is not None or (spec is not None and spec.device_index is not None):
            compile_only()
        compile_lock.install()  # another worker's pool compiling the same binary is waited for, not repeated
    if spec is None:  # started ahead of its first problem (CompilePool.prestart)
        warm_up(device_index, timing=False)
        return
    import torch

    from autotuner.base.device import current_device
    from autotuner.base.registry import import_op, load_plugins

    load_plugins(list(spec.plugins))
    if spec.device_index is not None:
        torch.cuda.set_device(spec.device_index)
    op = import_op(spec.op, trusted=True)  # the parent holds this op: it imported or allowed it
    problem = op.problem_from_dict(spec.problem)
    _STATE.update(op=op, inputs=op.make_inputs(problem, current_device(spec.device_index).torch_device), torch=torch,
                  spec=spec)


def _compile(spec: WorkerSpec, config: dict[str, Any]) -> Outcome | float:
    """Seconds the first launch took (its compile and load), or the Outcome of a config that cannot run."""
    if _STATE.get("spec") != spec:  # set up by the initializer; a pool given another problem sets up again
        _init(spec)
    t0 = time.perf_counter()
    try:
        _STATE["op"].run(_STATE["inputs"], config)
        if spec.device_index is not None:  # (the interpreter runs a config without compiling it)
            _STATE["torch"].cuda.synchronize()
    except Exception as exc:
        status = classify(exc)
        if status in ("compile_error", "out_of_resources", "invalid"):
            return Outcome(status, error=short_error(exc))
        raise  # a crash here is left to the isolated trial worker to reproduce and record
    return time.perf_counter() - t0


def _started() -> None:
    """A no-op task: submitting one per worker makes the pool start them all."""


class CompilePool:
    def __init__(self, spec: WorkerSpec | None, workers: int, device_index: int | None = None, *,
                 shared: bool = False) -> None:
        self.spec = spec  # None until the first problem (`prestart`); each task names its problem anyway
        self.workers = workers
        self.device_index = device_index
        self.shared = shared  # compiling for the jobs of several GPUs of one type at once, on `device_index`'s
        self._pool: ProcessPoolExecutor | None = None

    def _ensure(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=processes.context(), initializer=_init,
                                             initargs=(self.spec, processes.environment(), self.device_index))
        return self._pool

    def prestart(self) -> None:
        """Start every process now (each makes its CUDA context), before the first config to compile."""
        pool = self._ensure()
        for _ in range(self.workers):
            pool.submit(_started)

    def submit(self, config: dict[str, Any], spec: WorkerSpec | None = None) -> Future[Outcome | float]:
        """Compile a config of `spec`'s problem (default: the pool's). A shared pool compiles on its own device
        whichever GPU (of the same type) will time the config: its processes make their CUDA contexts on one."""
        spec = spec or self.spec
        assert spec is not None, "no problem to compile for yet"
        if self.shared and spec.device_index is not None and spec.device_index != self.device_index:
            spec = dataclasses.replace(spec, device_index=self.device_index)
        return self._ensure().submit(_compile, spec, config)

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
