"""Trials in a worker subprocess (autotuner.engine.measure.trial_process): it launches the config, checks it against the
reference and times it. No answer within the per-trial timeout is a `timeout` and the worker is killed; a worker that
dies is a `crash`; a CUDA error poisons the context, so the worker answers `crash` and exits, and the next trial gets a
fresh one."""

from __future__ import annotations

import time
from multiprocessing.connection import Connection
from typing import Any

from autotuner.engine.measure import processes
from autotuner.engine.measure.outcome import Outcome
from autotuner.engine.measure.trial_process import WorkerSpec, worker_main
from search_spaces.errors import AutotunerError


class WorkerSetupError(AutotunerError, RuntimeError):
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
        self.deadline: float | None = None  # time.monotonic() by which a request is answered or cut (a time budget)
        self._proc: Any = None
        self._conn: Connection | None = None
        self._warming = False  # prestarted, its "warm" message not read yet
        self._in_flight = False
        self.restarts = 0
        self.setup_s: dict[str, float] = {}  # the last problem's set-up in the process, by part (inputs, reference)
        # a prestarted process's start, by part: fork_s (from asking for it to its first line: the fork server's
        # imports when it had not finished them), then its warm-up's parts (trial_process.warm_up), and ready_s
        # (from asking for it to its warm-up's end)
        self.warm_s: dict[str, float] = {}
        self._asked_at = 0.0

    def take_warm_s(self) -> dict[str, float]:
        """The prestarted process's start by part (`warm_s`), once: a long-lived runner's later problems did not
        wait for it."""
        warm, self.warm_s = self.warm_s, {}
        return warm

    @property
    def in_flight(self) -> bool:
        """A request sent and not answered (or a setup under way): the process may be stuck."""
        return self._in_flight

    def prestart(self, device_index: int | None) -> None:
        """Start the process before its first problem is known: it makes its CUDA context and imports the ops
        meanwhile, and `use` then sets the problem up in it."""
        if self._proc is None:
            self._asked_at = time.time()
            self._proc, self._conn = self._spawn(None, device_index)
            self._warming = True
            self._needs_setup = self.spec is not None

    @staticmethod
    def _spawn(spec: WorkerSpec | None, device_index: int | None = None) -> tuple[Any, Connection]:
        """A new worker process (from the fork server) and this side of its pipe."""
        ctx = processes.context()
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker_main, args=(child, spec, processes.environment(), device_index),
                           daemon=True)
        proc.start()
        child.close()
        return proc, parent

    def _read_warm(self) -> None:
        """Consume the prestarted process's "warm" message (or leave an EOF for the next read to report)."""
        assert self._conn is not None
        try:
            kind, parts = self._conn.recv()
            assert kind == "warm", kind
        except EOFError:
            parts = None
        self._warming = False
        if parts:
            entered, warm = parts.pop("entered_at"), parts.pop("warm_at")
            self.warm_s = {"fork_s": entered - self._asked_at, **parts, "ready_s": warm - self._asked_at}

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
            self.setup_s = dict(payload or {})
        except WorkerSetupError:
            self.close()
            raise
        self._in_flight = False

    def setup(self) -> None:
        """Start the process and set the problem up in it now, rather than at the first request (raises
        WorkerSetupError as the first request would)."""
        if self._proc is not None and not self._proc.is_alive():
            self._kill()
        if self._proc is None or self._needs_setup:
            self._start()

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
            wait_s = self.trial_timeout_s
            left = self.deadline - time.monotonic() if self.deadline is not None else wait_s
            if not self._conn.poll(max(0.0, min(wait_s, left))):
                self._kill()
                if left < wait_s:
                    return Outcome("timeout", error="the command's time budget ran out first", cut=True)
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

    def measure(self, config: dict[str, Any], scale: float = 1.0, give_up_ms: float | None = None) -> Outcome:
        """Check a config against the reference and time it (`scale` of the full warm-up and repetitions; a few
        repetitions only where they are slower than `give_up_ms`)."""
        return self._ask("measure", (config, scale, give_up_ms))

    def time(self, config: dict[str, Any], scale: float = 1.0) -> Outcome:
        """Time a config checked before (`scale` of the full warm-up and repetitions)."""
        return self._ask("time", (config, scale))

    def baseline(self) -> Outcome:
        return self._ask("baseline", None)

    def close(self, wait: bool = True) -> None:
        """Stop the process: asked to exit (`wait`), or killed (it holds nothing to save; not waiting saves the
        second or so its CUDA context takes to tear down; multiprocessing reaps it later)."""
        if not wait and self._proc is not None:
            self._proc.kill()
            if self._conn is not None:
                self._conn.close()
            self._proc, self._conn, self._in_flight, self._warming = None, None, False, False
            return
        if self._in_flight and self._proc is not None:
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
