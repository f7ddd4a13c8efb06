"""Compile candidates ahead of timing in a process pool (compile is CPU work, timing is GPU work). More:
docs/design/engine.md."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from autotuner.engine.measure import compile_lock, processes, torch_free
from autotuner.engine.measure.outcome import Outcome, classify, short_error
from autotuner.engine.measure.processes import adopt
from autotuner.engine.measure.trial_process import WorkerSpec, die_with_parent, warm_up

_STATE: dict[str, Any] = {}
# Compiling is background work: the trial worker's timing loop and the search must never wait for a core.
NICE = 10
META = "meta"  # the torch device of a pool process's inputs until an op needs real ones


def background(pid: int) -> None:
    """Process `pid` at the pool's lower priority (NICE), where it is not lower already."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, max(NICE, os.getpriority(os.PRIO_PROCESS, pid)))
    except OSError:  # pragma: no cover - not allowed here, or the process is gone
        pass


def compile_only() -> None:
    """From now on every Triton launch in this process compiles and does not run: `prepare` (no CUDA context), or a load
    into the context where there is one, so a config over the device's limits fails as at a launch. Running kernels here
    would share the GPU with the trial worker's timings."""
    from triton.runtime.jit import JITFunction

    from kernels import _backend, _direct

    _backend.COMPILE_ONLY = True  # kernels take meta tensors as a GPU's
    _direct.DIRECT = False  # its first call reads the compiled kernel's loaded function: every call through Triton
    launch = JITFunction.run
    if getattr(launch, "compile_only", False):
        return
    from triton.runtime.driver import driver

    # Triton's launch asks torch for the current stream first thing, which makes the device's CUDA context (slow
    # alone, slower with fifteen processes at once); a launch that never runs needs none. (A process compiling without
    # torch has a driver that asks nothing of it: torch_free.)
    driver.active.get_current_stream = _no_stream

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        kernel = launch(self, *args, grid=grid, warmup=True, **kwargs)
        if kernel is not None:
            if _STATE.get("device") == META:
                prepare(kernel)
            else:
                kernel.run  # noqa: B018  (loads it: Triton's checks of the device's limits happen here)
        return kernel

    run.compile_only = True  # type: ignore[attr-defined]
    JITFunction.run = run  # type: ignore[method-assign]


def _no_stream(device: Any = None) -> int:
    return 0


def prepare(kernel: Any) -> None:
    """What a compiled kernel's first launch does before loading it into a CUDA context (Triton's
    `CompiledKernel._init_handles`): its launcher is built (a C module Triton keeps in its cache, which the trial
    worker then loads instead of building) and its shared memory checked against the device's (as the driver gives
    it: Triton's own query needs an initialised driver, which this process need not have)."""
    from triton.runtime.driver import driver
    from triton.runtime.errors import OutOfResources

    from kernels._backend import properties

    device = driver.active.get_current_device()
    driver.active.launcher_cls(kernel.src, kernel.metadata)
    max_shared = properties(device).smem_per_block
    if kernel.metadata.shared > max_shared:
        raise OutOfResources(kernel.metadata.shared, max_shared, "shared memory")


def _init(spec: WorkerSpec | None, env: dict[str, str] | None = None, device_index: int | None = None) -> None:
    if env is not None:  # a new process: the parent's environment first
        adopt(env)
        die_with_parent(any_thread=True)
        background(os.getpid())
        index = device_index if device_index is not None else (spec.device_index if spec is not None else None)
        if index is not None:
            _STATE["device"] = META
            if torch_free.possible():  # (a process of the pool: spawned, torch never imported)
                torch_free.start(index)
            compile_only()
        compile_lock.install()  # another worker's pool compiling the same binary is waited for, not repeated
    try:
        _set_up(spec, device_index)
    except Exception:
        if not torch_free.active():
            raise
        torch_free.leave()  # something there needs torch itself (a plugin's or a decorated kernel's module): with it
        _set_up(spec, device_index)


def _set_up(spec: WorkerSpec | None, device_index: int | None) -> None:
    """The process's imports, and its problem's inputs (meta tensors, until an op needs real ones)."""
    if spec is None:  # started ahead of its first problem (CompilePool.prestart)
        warm_up(device_index, timing=False, context=False)
        return
    from autotuner.base.registry import import_op, load_plugins

    load_plugins(list(spec.plugins))
    op = import_op(spec.op, trusted=True)  # the parent holds this op: it imported or allowed it
    problem = op.problem_from_dict(spec.problem)
    index = spec.device_index
    if index is None:  # the interpreter's
        from autotuner.base.device import current_device

        device = current_device(None).torch_device
    elif _STATE.get("device", META) != META or not _same_target(index):
        device = _with_context(index)
    else:
        device = META
        from kernels import _backend

        _backend.META_DEVICE = index  # the SM count and limits the kernels read are this device's
    try:
        inputs = op.make_inputs(problem, device)
    except Exception:
        if device != META or index is None or torch_free.active():
            raise  # (without torch: `_init` sets up again with it)
        device = _with_context(index)  # inputs that need real memory to be made
        inputs = op.make_inputs(problem, device)
    _STATE.update(op=op, inputs=inputs, spec=spec)


def _same_target(index: int) -> bool:
    """Whether Triton, compiling for this process's current CUDA device (its target: the compute capability),
    compiles for device `index` (a host's GPUs are alike as a rule: then no context is made to switch to it)."""
    from kernels._backend import cuda_properties

    if torch_free.active():
        current = torch_free.device()
    else:
        import torch

        current = int(torch.cuda.current_device())
    return current == index or cuda_properties(current).capability == cuda_properties(index).capability


def _with_context(index: int) -> str:
    """This process makes its CUDA context on device `index`, and makes real inputs and loads what it compiles from
    now on (importing torch, where it compiled without); returns the torch device they live on."""
    torch_free.leave()
    import torch

    torch.cuda.set_device(index)
    _STATE["device"] = f"cuda:{index}"
    return _STATE["device"]


def _compile(spec: WorkerSpec, config: dict[str, Any]) -> Outcome | float:
    """Seconds the first launch took (its compile and load), or the Outcome of a config that cannot run."""
    if _STATE.get("spec") != spec:  # set up by the initializer; a pool given another problem sets up again
        _init(spec)
    t0 = time.perf_counter()
    try:
        _STATE["op"].run(_STATE["inputs"], config)
        if spec.device_index is not None and _STATE["device"] != META:  # (the interpreter runs it without compiling)
            sys.modules["torch"].cuda.synchronize()
    except Exception as exc:
        status = classify(exc)
        if _STATE.get("device") == META and spec.device_index is not None and not _from_triton(exc):
            if torch_free.active():
                torch_free.leave()  # the shape-only tensors lack what this launch reads: torch's meta tensors then
            else:
                _with_context(spec.device_index)  # the op needs real memory: from now on, it has it
            _set_up(spec, spec.device_index)
            return _compile(spec, config)
        if status in ("compile_error", "out_of_resources", "invalid"):
            return Outcome(status, error=short_error(exc))
        raise  # a crash here is left to the isolated trial worker to reproduce and record
    return time.perf_counter() - t0


def _from_triton(exc: BaseException) -> bool:
    """A compile error or an out-of-resources verdict of Triton's: the config's, whatever memory the inputs are in."""
    return classify(exc) in ("compile_error", "out_of_resources") and type(exc).__module__.startswith("triton")


def _started() -> None:
    """A no-op task: submitting one per worker makes the pool start them all."""


def _compile_flush(index: int) -> None:
    """The trial worker's first builds, into Triton's cache, so that its start on the device finds them there: its L2
    flush (autotuner.engine.measure.l2_flush), and Triton's C module over the CUDA driver, which Triton's driver
    builds when first made and a process compiling without torch never needs (torch_free); a failure leaves the
    build to the trial worker, which reports it."""
    from triton.runtime.driver import driver

    from autotuner.engine.measure.l2_flush import compile_ahead

    try:
        compile_ahead(index)
    except Exception:  # noqa: S110 - see above
        pass
    try:
        driver.active.utils  # noqa: B018  (made at first use: torch_free)
    except Exception:  # noqa: S110 - see above
        pass


class CompilePool:
    def __init__(self, spec: WorkerSpec | None, workers: int, device_index: int | None = None, *,
                 shared: bool = False) -> None:
        self.spec = spec  # None until the first problem (`prestart`); each task names its problem anyway
        self.workers = workers
        self.device_index = device_index
        self.shared = shared  # compiling for the jobs of several GPUs of one type at once, on `device_index`'s
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()  # (prestarted on a thread while the tuner submits its first configs)
        self._lowered: set[int] = set()  # the processes lowered to the pool's priority (`_submit`)

    def _ensure(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.workers, mp_context=processes.fresh_context(), initializer=_init,
                                                 initargs=(self.spec, processes.environment(), self.device_index))
            return self._pool

    def prestart(self, count: int | None = None) -> list[Future[None]]:
        """Start `count` of the pool's processes now (default: all), before the first config to compile, and have
        one build the trial worker's first needs (`_compile_flush`); the tasks doing it. The others start as configs
        come. Each process is lowered to the pool's priority as it starts, not once its imports are done: a
        command's processes start beside the fork server's import of torch, which the trial worker waits for."""
        tasks = [self._submit(_started) for _ in range(min(self.workers, count or self.workers))]
        if self.device_index is not None:
            tasks.append(self._submit(_compile_flush, self.device_index))
        return tasks

    def _submit(self, fn: Any, *args: Any) -> Future[Any]:
        """`fn(*args)` in a process of the pool. A pool broken by a process that died (killed, out of memory) is
        replaced first; the processes a submit starts are lowered to the pool's priority at once."""
        try:
            pool = self._ensure()
            task = pool.submit(fn, *args)
        except BrokenProcessPool:
            self.reset()
            pool = self._ensure()
            task = pool.submit(fn, *args)
        for proc in list(getattr(pool, "_processes", {}).values()):  # (a submit may start one)
            if proc.pid not in self._lowered:
                self._lowered.add(proc.pid)
                background(proc.pid)
        return task

    def submit(self, config: dict[str, Any], spec: WorkerSpec | None = None) -> Future[Outcome | float]:
        """Compile a config of `spec`'s problem (default: the pool's). A shared pool compiles on its own device
        whichever GPU (of the same type) will time the config: its processes make their CUDA contexts on one."""
        spec = spec or self.spec
        assert spec is not None, "no problem to compile for yet"
        if self.shared and spec.device_index is not None and spec.device_index != self.device_index:
            spec = dataclasses.replace(spec, device_index=self.device_index)
        return self._submit(_compile, spec, config)

    def result(self, fut: Future[Outcome | float], timeout: float) -> Outcome | float | None:
        """The compile result, or None when the pool failed or ran out of time (the trial worker decides)."""
        try:
            return fut.result(timeout=timeout)
        except Exception:
            self.reset()
            return None

    def reset(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            self._lowered.clear()  # (a new process may take a dead one's pid)
        if pool is not None:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.kill()
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
