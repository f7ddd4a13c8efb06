"""Trials in a worker subprocess: a crash, an illegal memory access or a hang kills and restarts it.

The parent sends a config; the worker launches it (compiling on first use), checks the output against the
reference, times it, and answers. No answer within the per-trial timeout: the worker is killed and the
trial is a `timeout`. The worker dying: a `crash`. A CUDA error poisons the context, so the worker answers
`crash` and exits, and the next trial gets a fresh one.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import KW_ONLY, dataclass
from multiprocessing.connection import Connection
from typing import Any, Literal

from autotuner.engine import processes
from autotuner.engine.timing import Timing

# A quick timing (the first look at a config) warms up and repeats for this share of the full timing's
# milliseconds; a config close to the best so far is then timed in full (autotuner.engine.measure.LiveMeasurer).
QUICK_SCALE = 0.2



Status = Literal["ok", "invalid", "compile_error", "out_of_resources", "wrong_result", "crash", "timeout"]


@dataclass(frozen=True)
class Outcome:
    """How measuring one config ended: its status, and its timing when ok."""

    status: Status
    _: KW_ONLY
    timing: Timing | None = None
    compile_s: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs to rebuild the op, the problem and the inputs."""

    op: str
    problem: dict[str, Any]
    plugins: tuple[str, ...] = ()
    device_index: int | None = None
    warmup_ms: float = 25.0
    rep_ms: float = 100.0


def classify(exc: BaseException) -> Status:
    name = type(exc).__name__
    text = str(exc).lower()
    if name == "OutOfResources" or "out of resource" in text:
        return "out_of_resources"
    if name in ("CompilationError", "CompileTimeAssertionFailure") or "compilationerror" in text:
        return "compile_error"
    if "cuda error" in text or "illegal memory access" in text or "illegal address" in text or name == "AcceleratorError":
        return "crash"
    if isinstance(exc, (ValueError, TypeError)):
        return "invalid"
    return "crash"


def _short(exc: BaseException) -> str:
    lines = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    return "\n".join(lines[-6:])[:2000]


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


class _Bench:
    """Lives in the worker process: the op, inputs, reference, and how to measure one config."""

    def __init__(self, spec: WorkerSpec) -> None:
        import torch

        from autotuner.base.device import current_device
        from autotuner.base.registry import import_op, load_plugins

        load_plugins(list(spec.plugins))
        if spec.device_index is not None and torch.cuda.is_available():
            torch.cuda.set_device(spec.device_index)
        self.spec = spec
        self.device = current_device(spec.device_index)
        self.op = import_op(spec.op)
        self.problem = self.op.problem_from_dict(spec.problem)
        self.inputs = self.op.make_inputs(self.problem, self.device.torch_device)
        self.torch = torch
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

    def _sync(self) -> None:
        if not self.device.is_interpreter:
            self.torch.cuda.synchronize()

    def _time(self, fn: Any, quick: bool = False) -> Timing:
        from autotuner.engine.timing import time_fn

        scale = QUICK_SCALE if quick else 1.0
        return time_fn(fn, self.device.is_interpreter, self.spec.warmup_ms * scale, self.spec.rep_ms * scale)

    def time_only(self, config: dict[str, Any]) -> Outcome:
        """A full timing of a config measured (and checked) before."""
        try:
            return Outcome("ok", timing=self._time(lambda: self.op.run(self.inputs, config)))
        except Exception as exc:
            return Outcome(classify(exc), error=_short(exc))

    def measure(self, config: dict[str, Any], quick: bool = False) -> Outcome:
        from kernels._checks import poison_outputs

        t0 = time.perf_counter()
        poison_outputs(True)  # the checked run starts from NaN outputs: an unwritten element fails
        try:
            out = self.op.run_checked(self.inputs, config)  # compiles on first use (or loads the compile cache)
            self._sync()
        except Exception as exc:
            return Outcome(classify(exc), error=_short(exc))
        finally:
            poison_outputs(False)  # timed runs allocate without a fill
        compile_s = time.perf_counter() - t0
        verdict = self.op.check(out, self.ref, self.problem)
        if not verdict.ok:
            return Outcome("wrong_result", compile_s=compile_s, error=verdict.message)
        try:
            timing = self._time(lambda: self.op.run(self.inputs, config), quick)
        except Exception as exc:
            return Outcome(classify(exc), compile_s=compile_s, error=_short(exc))
        return Outcome("ok", timing=timing, compile_s=compile_s)

    def baseline(self) -> Outcome:
        baseline = self.op.baseline
        if baseline is None:
            return Outcome("invalid", error=f"{self.op.name} declares no torch baseline")
        try:
            return Outcome("ok", timing=self._time(lambda: baseline(self.inputs)))
        except Exception as exc:
            return Outcome("crash", error=_short(exc))


def die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent dies, however the parent died (a trial worker stuck in a
    hanging kernel would otherwise outlive a killed tuning run)."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:  # pragma: no cover - no glibc
            pass


def warm_up(device_index: int | None) -> None:
    """In a new process with no problem yet: make the CUDA context, import the ops, and compute Triton's
    installation hash (its cache key's first part: 0.3-0.4 s, once per process, which each process's first
    compile or cache lookup would otherwise pay), so that the first problem only builds its inputs."""
    from autotuner.base.registry import load_plugins  # noqa: F401  (imports the registry and the built-in ops)

    if device_index is not None:
        import torch

        torch.cuda.set_device(device_index)
        torch.empty(1, device=f"cuda:{device_index}")
        try:
            from triton.runtime.cache import triton_key

            triton_key()
        except ImportError:  # pragma: no cover - a Triton that keeps it elsewhere: computed at first use
            pass


def _worker_main(conn: Connection, spec: WorkerSpec | None, env: dict[str, str],
                 device_index: int | None = None) -> None:
    from autotuner.engine.processes import adopt

    adopt(env)
    die_with_parent()
    if spec is None:  # started ahead of its first problem
        warm_up(device_index)
        conn.send(("warm", None))
    bench: _Bench | None = None
    while True:
        if spec is not None:  # set up a problem: at start, and for each new problem a long-lived worker gets
            bench = None  # the last problem's inputs go first
            try:
                bench = _Bench(spec)
            except Exception as exc:
                conn.send(("setup_failed", _short(exc)))
                return
            conn.send(("ready", None))
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
        if kind == "measure":
            outcome = bench.measure(*payload)
        elif kind == "time":
            outcome = bench.time_only(payload)
        else:
            outcome = bench.baseline()
        conn.send(("outcome", outcome))
        if outcome.status == "crash":
            return  # a CUDA error leaves the context unusable: start fresh


class WorkerSetupError(RuntimeError):
    pass


class TrialRunner:
    """Parent side: one worker process at a time, restarted after a crash or a timeout. A long-lived runner (an
    `autotuner worker`'s, across jobs) is given each new problem with `use`: its process, with torch imported
    and its CUDA context made, sets the problem up instead of a new process starting."""

    def __init__(self, spec: WorkerSpec | None, trial_timeout_s: float = 60.0, setup_timeout_s: float = 600.0) -> None:
        self.spec = spec  # None: no problem yet (`prestart`, then `use`)
        self._needs_setup = False
        self.trial_timeout_s = trial_timeout_s
        self.setup_timeout_s = setup_timeout_s
        self._proc: Any = None
        self._conn: Connection | None = None
        self._warming = False  # prestarted, its "warm" message not read yet
        self._in_flight = False
        self.restarts = 0

    @property
    def in_flight(self) -> bool:
        """A request sent and not answered (or a setup under way): the process may be stuck."""
        return self._in_flight

    def prestart(self, device_index: int | None, wait: bool = False) -> None:
        """Start the process before its first problem is known: it makes its CUDA context and imports the ops
        meanwhile (`wait`: until it has), and `use` then sets the problem up in it."""
        if self._proc is None:
            self._proc, self._conn = self._spawn(None, device_index)
            self._warming = True
            self._needs_setup = self.spec is not None
        if wait and self._warming and self._conn is not None and self._conn.poll(self.setup_timeout_s):
            self._read_warm()

    @staticmethod
    def _spawn(spec: WorkerSpec | None, device_index: int | None = None) -> tuple[Any, Connection]:
        """A new worker process (from the fork server) and this side of its pipe."""
        ctx = processes.context()
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker_main, args=(child, spec, processes.environment(), device_index),
                           daemon=True)
        proc.start()
        child.close()
        return proc, parent

    def _read_warm(self) -> None:
        """Consume the prestarted process's "warm" message (or leave an EOF for the next read to report)."""
        assert self._conn is not None
        try:
            kind, _ = self._conn.recv()
            assert kind == "warm", kind
        except EOFError:
            pass
        self._warming = False

    def use(self, spec: WorkerSpec, trial_timeout_s: float) -> None:
        """The problem the next trials are of."""
        if spec != self.spec or self._proc is None:
            self.spec, self._needs_setup = spec, self._proc is not None
        self.trial_timeout_s = trial_timeout_s

    def _start(self) -> None:
        reused = False
        if self._proc is not None and self._proc.is_alive() and self._conn is not None:
            proc, parent = self._proc, self._conn  # a live worker: the new problem is set up in it
            try:
                if self._warming:
                    self._read_warm()
                parent.send(("setup", self.spec))
                self._in_flight = reused = True
            except (BrokenPipeError, ConnectionResetError, OSError):  # it died just now: start a new one
                self._kill()
        if not reused:
            proc, parent = self._spawn(self.spec)
            self._proc, self._conn, self._in_flight = proc, parent, True  # close() kills it if setup is interrupted
        self._needs_setup = False
        try:
            if not parent.poll(self.setup_timeout_s):
                raise WorkerSetupError(f"the trial worker did not start within {self.setup_timeout_s:.0f} s")
            try:
                kind, payload = parent.recv()
            except EOFError:
                proc.join(5)
                raise WorkerSetupError(f"the trial worker died while starting (exit code {proc.exitcode})") from None
            if kind != "ready":
                raise WorkerSetupError(f"the trial worker could not set up the problem: {payload}")
        except WorkerSetupError:
            self.close()
            raise
        self._in_flight = False

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn, self._in_flight, self._warming = None, None, False, False
        self.restarts += 1

    def _ask(self, kind: str, payload: Any) -> Outcome:
        if self._proc is None or not self._proc.is_alive():
            if self._proc is not None:
                self._kill()
            self._start()
        elif self._needs_setup:
            self._start()
        assert self._conn is not None
        try:
            self._in_flight = True  # until the answer is read: close() kills a worker caught mid-trial
            self._conn.send((kind, payload))
            if not self._conn.poll(self.trial_timeout_s):
                self._kill()
                return Outcome("timeout", error=f"no answer within {self.trial_timeout_s:g} s; the worker was killed")
            _, outcome = self._conn.recv()
            self._in_flight = False
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = None
            if self._proc is not None:
                self._proc.join(5)  # the pipe closes before the process is reaped; wait for its exit code
                code = self._proc.exitcode
            self._kill()
            return Outcome("crash", error=f"the trial worker died (exit code {code})")
        if outcome.status == "crash":
            self._kill()
        return outcome

    def measure(self, config: dict[str, Any], quick: bool = False) -> Outcome:
        """Check a config against the reference and time it (briefly, with `quick`)."""
        return self._ask("measure", (config, quick))

    def time(self, config: dict[str, Any]) -> Outcome:
        """Time a config checked before, fully."""
        return self._ask("time", config)

    def baseline(self) -> Outcome:
        return self._ask("baseline", None)

    def close(self, wait: bool = True) -> None:
        """Stop the process: asked to exit (`wait`), or killed (it holds nothing to save; not waiting saves the
        second or so its CUDA context takes to tear down)."""
        if (self._in_flight or not wait) and self._proc is not None:
            self._proc.kill()  # interrupted mid-trial: the worker may be stuck in a kernel, don't wait for it
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(("stop", None))
                self._proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._proc, self._conn, self._in_flight, self._warming = None, None, False, False

    def __enter__(self) -> TrialRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
