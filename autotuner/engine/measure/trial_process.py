"""The trial process's side: it builds the op, the problem's inputs and the reference once (`Bench`), then
answers the parent's requests (autotuner.engine.measure.runner.TrialRunner): check and time a config, time it again,
time torch's baseline. A CUDA error leaves its context unusable, so after a `crash` it exits and the parent
starts a fresh one.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from autotuner.engine.measure import compile_lock
from autotuner.engine.measure.outcome import Outcome, classify, short_error
from autotuner.engine.measure.timing import Timing

# The search's timing of a config (its first look) warms up and repeats for this share of the full timing's
# milliseconds: enough to rank it (ten or more repetitions, each after an L2 flush, fifteen of a kernel under a third
# of a millisecond); the configs close to the best are then timed again, interleaved, before one is chosen
# (autotuner.engine.tuner's re-time). Where compiles are loaded, the timing is most of a search, and a shorter
# first look chose the same winners; benchmarks/tune_time.py checks both the time and the winner against cuBLAS.
QUICK_SCALE = 0.05
# Torch's baseline (a tune's "torch" column) is timed once, in the set-up, for as many repetitions as a finalist
# gets over the re-time's three rounds of an eighth, not a full timing, which sat in the trial worker's set-up
# (the op's Python launch and the L2 flush, three times over; benchmarks/tune_time.py's setup phase).
BASELINE_SCALE = 0.375


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs to rebuild the op, the problem and the inputs."""

    op: str
    problem: dict[str, Any]
    plugins: tuple[str, ...] = ()
    device_index: int | None = None
    warmup_ms: float = 25.0
    rep_ms: float = 100.0


def _snapshot(out: Any) -> Any:
    """A copy of an output (a tensor or a tuple of them) that later launches cannot overwrite."""
    import torch

    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_snapshot(o) for o in out)
    if isinstance(out, dict):
        return {k: _snapshot(v) for k, v in out.items()}
    return out


class Bench:
    """Lives in the worker process: the op, inputs, reference, and how to measure one config."""

    def __init__(self, spec: WorkerSpec) -> None:
        import torch

        from autotuner.base.device import current_device
        from autotuner.base.registry import import_op, load_plugins

        load_plugins(list(spec.plugins))
        if spec.device_index is not None and torch.cuda.is_available():
            torch.cuda.set_device(spec.device_index)
        self.spec = spec
        t0 = time.perf_counter()
        self.device = current_device(spec.device_index)
        self.op = import_op(spec.op, trusted=True)  # the parent holds this op: it imported or allowed it
        self.problem = self.op.problem_from_dict(spec.problem)
        self.inputs = self.op.make_inputs(self.problem, self.device.torch_device)
        self.torch = torch
        self._sync()
        t1 = time.perf_counter()
        if self.op.reference is not None:
            self.ref = self.op.reference(self.inputs)
        else:  # no reference declared: every config is checked against the default config's output
            from kernels._checks import poison_outputs

            default = self.op.space.default(self.problem, self.device)
            poison_outputs(True)
            try:
                self.ref = _snapshot(self.op.run_checked(self.inputs, default))
            finally:
                poison_outputs(False)
        self._sync()
        # where the set-up went (the tuner's phases: setup_inputs_s, setup_reference_s)
        self.setup_s = {"inputs_s": t1 - t0, "reference_s": time.perf_counter() - t1}

    def _sync(self) -> None:
        if not self.device.is_interpreter:
            self.torch.cuda.synchronize()

    def _time(self, fn: Any, scale: float = 1.0, give_up_ms: float | None = None) -> Timing:
        from autotuner.engine.measure.timing import time_fn

        return time_fn(fn, self.device.is_interpreter, self.spec.warmup_ms, self.spec.rep_ms, give_up_ms,
                       scale=scale)

    def time_only(self, config: dict[str, Any], scale: float = 1.0) -> Outcome:
        """A timing of a config measured (and checked) before: `scale` of the full warm-up and repetitions."""
        try:
            return Outcome("ok", timing=self._time(lambda: self.op.run(self.inputs, config), scale))
        except Exception as exc:
            return Outcome(classify(exc), error=short_error(exc))

    def measure(self, config: dict[str, Any], scale: float = 1.0, give_up_ms: float | None = None) -> Outcome:
        from kernels._checks import poison_outputs

        t0 = time.perf_counter()
        poison_outputs(True)  # the checked run starts from NaN outputs: an unwritten element fails
        try:
            out = self.op.run_checked(self.inputs, config)  # compiles on first use (or loads the compile cache)
            self._sync()
        except Exception as exc:
            return Outcome(classify(exc), error=short_error(exc))
        finally:
            poison_outputs(False)  # timed runs allocate without a fill
        compile_s = time.perf_counter() - t0
        verdict = self.op.check(out, self.ref, self.problem)
        if not verdict.ok:
            return Outcome("wrong_result", compile_s=compile_s, error=verdict.message)
        try:
            timing = self._time(lambda: self.op.run(self.inputs, config), scale, give_up_ms)
        except Exception as exc:
            return Outcome(classify(exc), compile_s=compile_s, error=short_error(exc))
        return Outcome("ok", timing=timing, compile_s=compile_s)

    def baseline(self) -> Outcome:
        baseline = self.op.baseline
        if baseline is None:
            return Outcome("invalid", error=f"{self.op.name} declares no torch baseline")
        try:
            return Outcome("ok", timing=self._time(lambda: baseline(self.inputs), BASELINE_SCALE))
        except Exception as exc:
            return Outcome("crash", error=short_error(exc))


def die_with_parent(any_thread: bool = False) -> None:
    """Linux: SIGKILL this process when its parent dies (a worker stuck in a hanging kernel would outlive its run);
    Ctrl-C is the parent's to handle, so a child prints no traceback of its own. Linux takes the thread that started
    a process for its parent: a process started from any thread of its parent (`any_thread`: a pool's, started by
    whichever thread submits first) waits on its parent process instead, on a thread, and ends when it ends."""
    import ctypes
    import multiprocessing
    import signal
    import sys

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if any_thread and parent is not None:

        def watch() -> None:
            parent.join()  # (its sentinel: closed when the parent process ends, whichever thread started this one)
            os._exit(1)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    elif sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:  # pragma: no cover - no glibc
            pass


def warm_up(device_index: int | None, timing: bool = True, context: bool = True) -> dict[str, float]:
    """In a new process with no problem yet: make the CUDA context (a compile process, `context=False`, loads Triton's
    driver module instead), import the ops and hash Triton's installation; in a process that will time, also start
    cuBLAS and launch the L2 flush once, so the first problem only builds its inputs. Returns the seconds each part took
    (ops_s, context_s or driver_s, cublas_s, flush_s, key_s)."""
    marks = [("start", time.perf_counter())]
    flushes = device_index is not None and timing and context  # it times here: its L2 flush is launched below
    # (on a thread, while the CUDA context is made)
    hashing = _before_first_compile(device_index if flushes else None) if device_index is not None else None
    from autotuner.base.registry import load_plugins  # noqa: F401  (imports the registry and the built-in ops)

    marks.append(("ops_s", time.perf_counter()))
    if device_index is None:
        return _parts(marks)
    if not context:
        from triton.runtime.driver import driver

        driver.active.get_current_target()  # (its C module: built into Triton's cache by the first process)
        marks.append(("driver_s", time.perf_counter()))
    else:
        import torch

        torch.cuda.set_device(device_index)
        xs = [torch.ones(16, 16, device=f"cuda:{device_index}", dtype=dtype) for dtype in (torch.float16, torch.float32)]
        torch.cuda.synchronize()
        marks.append(("context_s", time.perf_counter()))
        if timing:
            for x in xs:
                x @ x
            torch.cuda.synchronize()
            marks.append(("cublas_s", time.perf_counter()))
    if hashing is not None:
        hashing.join()  # before the first compile or cache lookup, which would do it again
    marks.append(("key_s", time.perf_counter()))
    if flushes:
        from autotuner.engine.measure.l2_flush import l2_flusher

        l2_flusher(torch.device("cuda", device_index))()
        torch.cuda.synchronize()
        marks.append(("flush_s", time.perf_counter()))
    return _parts(marks)


def _parts(marks: list[tuple[str, float]]) -> dict[str, float]:
    """The seconds between consecutive marks, by the later mark's name."""
    return {name: t - marks[i][1] for i, (name, t) in enumerate(marks[1:])}


def _before_first_compile(flush_device: int | None) -> threading.Thread:
    """On a thread, beside the CUDA context's making: Triton's installation hash where the parent handed none, the
    compile-sharing backend's imports and engine where compiles are shared, then, in a process that will time on
    `flush_device`, the L2 flush's kernel compiled and its launcher built."""

    def run() -> None:
        try:
            from triton.runtime.cache import triton_key

            triton_key()
        except Exception:  # noqa: S110 - a Triton that keeps it elsewhere computes it at first use, as before
            pass
        from autotuner.engine.measure.compile_share import BACKEND

        if os.environ.get("TRITON_REMOTE_CACHE_BACKEND") == BACKEND:
            from autotuner.engine.measure.compile_share_backend import prepare

            prepare()
        if flush_device is not None:
            from autotuner.engine.measure.l2_flush import compile_ahead

            try:
                compile_ahead(flush_device)
            except Exception:  # noqa: S110 - the first flush compiles it, as before, and reports what fails
                pass

    thread = threading.Thread(target=run, name="before-first-compile", daemon=True)
    thread.start()
    return thread


def worker_main(conn: Connection, spec: WorkerSpec | None, env: dict[str, str],
                 device_index: int | None = None) -> None:
    from autotuner.engine.measure.processes import adopt

    entered_at = time.time()  # wall clock: the parent compares it with when it asked for this process
    adopt(env)
    die_with_parent()
    compile_lock.install()  # a binary another process is compiling into the same cache is waited for
    try:
        _serve(conn, spec, device_index, entered_at)
    except (BrokenPipeError, ConnectionResetError):
        return  # the command that started it is gone (one that failed on its arguments): nobody to answer


def _serve(conn: Connection, spec: WorkerSpec | None, device_index: int | None, entered_at: float) -> None:
    if spec is None:  # started ahead of its first problem
        parts = warm_up(device_index)
        conn.send(("warm", {"entered_at": entered_at, "warm_at": time.time(), **parts}))
    bench: Bench | None = None
    while True:
        if spec is not None:  # set up a problem: at start, and for each new problem a long-lived worker gets
            bench = None  # the last problem's inputs go first
            try:
                bench = Bench(spec)
            except Exception as exc:
                conn.send(("setup_failed", short_error(exc)))
                return
            conn.send(("ready", bench.setup_s))
            spec = None
        try:
            kind, payload = conn.recv()
        except EOFError:
            return
        if kind == "stop":
            return
        if kind == "setup":
            spec = payload
            continue
        assert bench is not None
        t0 = time.perf_counter()
        if kind == "measure":
            outcome = bench.measure(*payload)
        elif kind == "time":
            outcome = bench.time_only(*payload)
        else:
            outcome = bench.baseline()
        conn.send(("outcome", dataclasses.replace(outcome, worker_s=time.perf_counter() - t0)))
        if outcome.status == "crash":
            return  # a CUDA error leaves the context unusable: start fresh
