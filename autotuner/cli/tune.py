"""`autotuner tune`: tune one problem, with progress on stderr (a bar on a terminal, plain lines in a log)."""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotuner.cli.common import (
    DbOpt,
    DtypeOpt,
    JsonOpt,
    OpArg,
    ShapeOpt,
    command,
    console,
    err,
    fail,
    ms,
    print_json,
    problem_options,
    problems,
    settings,
    times,
    warn,
)
from autotuner.cli.handoff import since_process_start
from autotuner.engine.search.strategies import strategies_help
from autotuner.engine.sweeps.refine import DEFAULT_TARGET
from autotuner.engine.tune_result import TrialRecord, TuneObserver, TuneResult
from search_spaces.contract import OWN_SEARCH, ProblemType

if TYPE_CHECKING:  # the engine and the store load when the command runs, not when the CLI starts
    from autotuner.base.registry import Op
    from autotuner.base.settings import Settings
    from autotuner.engine.measure.live import KeptProcesses
    from autotuner.engine.tuner import Plan
    from autotuner.store.interfaces import Storage

PHASE_TEXT = {
    "setup": "setup: starting the trial worker (imports, inputs, reference, torch baseline)",
    "search": "search",
    "retime": "re-time: the best configs and the default, interleaved",
    "record": "record: storing the winner",
}


class PlainProgress(TuneObserver):
    """One line per phase and per trial, for logs and pipes."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.result: TuneResult | None = None
        self.total: int | None = None
        self.done = 0

    def _line(self, text: str) -> None:
        err.print(f"[{time.perf_counter() - self.t0:7.1f}s] {text}", soft_wrap=True)

    def phase(self, name: str, total: int | None, result: TuneResult) -> None:
        self.result, self.total, self.done = result, total, 0
        if name == "search":
            budget = f"{total} configs" if total is not None else "until the time budget is spent"
            self._line(f"search: {budget} of {result.candidates} valid ({result.rejected} rejected by constraints)")
        else:
            self._line(PHASE_TEXT[name] + (f" ({total} timings)" if total else ""))

    def step(self, result: TuneResult, record: TrialRecord | None = None) -> None:
        self.done += 1
        if record is None:
            return
        of = f"/{self.total}" if self.total is not None else ""
        detail = ms(record.median_ms) if record.status == "ok" else f"{record.status}: {(record.error or '').splitlines()[0][:120] if record.error else ''}"
        self._line(f"trial {record.index}{of} {json.dumps(record.config)} {detail}  best {ms(result.best_ms)}")


class BarProgress(TuneObserver):
    """A rich progress bar on a terminal: the phase, its steps of a known total, the best time so far."""

    def __init__(self, bar: Progress, label: str) -> None:
        self.bar = bar
        self.label = label
        self.task = bar.add_task(label, total=None, status="")
        self.result: TuneResult | None = None

    def phase(self, name: str, total: int | None, result: TuneResult) -> None:
        self.result = result
        self.bar.reset(self.task, total=total, description=f"{self.label} {name}", status="")

    def step(self, result: TuneResult, record: TrialRecord | None = None) -> None:
        self.bar.update(self.task, advance=1, status=f"best {ms(result.best_ms)}  failures {result.failures}")


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@problem_options
@command
def tune(
    op: OpArg,
    shape: ShapeOpt = None,
    flags: dict[str, str | None] | None = None,
    dtype: DtypeOpt = None,
    options: dict[str, Any] | None = None,
    trials: int | None = typer.Option(None, "--trials", min=1, help="configs to measure (default: up to 64)"),
    time_budget: float | None = typer.Option(None, "--time-budget", min=0.1, help="seconds the whole command may take, "
                                             "start-up included: the search gets most of what is left after set-up, "
                                             "the re-time the rest; a trial still running when it ends is cut, and "
                                             "none measured by then is an error (exit 1)"),
    strategy: str | None = typer.Option(None, "--strategy", help=f"the search: {strategies_help()}; for a Helion "
                                        f"kernel also {OWN_SEARCH}: Helion's own search (default: tpe; a Helion "
                                        f"kernel: {OWN_SEARCH})"),
    seed: int = typer.Option(0, "--seed"),
    margin: float | None = typer.Option(None, "--margin", min=0.0, max=0.99,
                                        help="keep the default config unless another's re-time is faster by more "
                                             "than this fraction (default 0.01)"),
    db: DbOpt = None,
    as_json: JsonOpt = False,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress on stderr"),
    queue: bool = typer.Option(False, "--queue", help="queue the problem (a sweep: its points) as jobs for the "
                                                       "workers instead of tuning here"),
    wait: bool = typer.Option(False, "--wait", help="with an `autotuner worker` on this host busy with a job: wait "
                                                     "for it to take this command (default: tune here at once)"),
    check: bool = typer.Option(False, "--check", hidden=True, help="check the arguments and stop (what --wait "
                                                                   "does before waiting for a busy worker)"),
    here: bool = typer.Option(False, "--here", help="tune in this process, not in an `autotuner worker` running on "
                                                     "this host (which takes the command when it shares the database; "
                                                     "AUTOTUNER_LOCAL_WORKER=0 never hands it over)"),
    regret: float = typer.Option(DEFAULT_TARGET, "--regret", min=0.0, max=0.99,
                                 help="a sweep: tune the point between two neighbours whose winners each lose more "
                                      "than this fraction on the other's point, and again, until none does"),
    refine_points: int | None = typer.Option(None, "--refine-points", min=0, max=4096,
                                             help="a sweep: at most this many points added by --regret (default: as "
                                                  "many as the sweep names; 0: none)"),
    gpus: str | None = typer.Option(None, "--gpus", help="GPUs that measure the configs at once, e.g. 0,1 or all "
                                                         "(default: AUTOTUNER_GPUS, else one); the first is the "
                                                         "problem's device and re-times the finalists. With --queue: "
                                                         "how many of a worker's GPUs measure each job (e.g. 2)"),
) -> None:
    """Tune one problem: search its space, store every trial and the winner. Several values of one dimension (`--M
    1-8192:pow2`, `--M 16,64,256`) sweep it: every point is tuned, then each winner timed on its neighbours.

    A worker on this host (same database) takes the command and tunes in its warm processes; `--here` tunes in this
    process. `--gpus 0,1` measures on both GPUs at once."""
    from autotuner.cli.sweep import Refine

    del here, wait  # read from the arguments by autotuner.cli.handoff, before this process imports anything heavy
    request = _request(op, shape, dtype, flags or {}, options or {}, strategy, gpus, queue, db, check)
    if request.store is None:  # --check: the arguments are good
        return
    plan = request.plan(trials, time_budget, seed, margin)
    refine = Refine(regret, refine_points)
    if queue:
        _queue(request, plan, refine, as_json)
    else:
        _run_here(request, plan, refine, as_json, quiet)


@dataclass
class _Request:
    """What `tune`'s arguments name, checked: the settings, the worker running the command (if one took it), the
    GPUs that measure, the op and its problems (several: a sweep along `dim`)."""

    s: Settings
    by: Any
    devices: tuple[int, ...]
    job_gpus: int | None
    op: Op
    probs: list[ProblemType]
    dim: str | None
    store: Storage | None  # None: only checked (--check), no database opened
    strategy: str  # the one named, else the op's default

    def plan(self, trials: int | None, time_budget: float | None, seed: int, margin: float | None) -> Plan:
        """--time-budget bounds the whole command of one problem, from its process's start (or, handed to a
        worker, the command's); a sweep's, each point's search."""
        from autotuner.engine.plan import DEFAULT_MARGIN, Plan

        began = time.monotonic() - ((self.by.since_start() if self.by is not None else since_process_start()) or 0.0)
        return Plan(strategy=self.strategy, trials=trials, time_budget_s=time_budget, seed=seed, gpus=self.devices,
                    margin=DEFAULT_MARGIN if margin is None else margin,
                    deadline=began + time_budget if time_budget is not None and self.dim is None else None)


def _request(op: str, shape: str | None, dtype: str | None, flags: dict[str, str | None], options: dict[str, Any],
             strategy: str | None, gpus: str | None, queue: bool, db: str | None, check: bool) -> _Request:
    """`tune`'s arguments checked, each bad one a clear error (exit 2), and unless only checking, the database
    opened and a decorated kernel's problems given the dtype and the call its launches recorded."""
    from autotuner.base.device import parse_gpus
    from autotuner.cli import handed_run
    from autotuner.engine.search.strategies import check_strategy
    from autotuner.store import open_store
    from kernels._backend import interpreting

    by = handed_run.current()  # a worker running this command for a process on its host
    s = settings(db)
    try:
        devices = parse_gpus(gpus if gpus is not None else s.gpus) if by is None and not queue else ()
    except ValueError as exc:
        fail(str(exc))
    if devices and interpreting():
        warn(f"No GPU here: --gpus {gpus} measures with {len(devices)} processes of Triton's interpreter (CPU "
             "wall-clock), not GPUs")
    if by is not None:
        by.check_database(s.db_url)
    op_obj, probs, dim = problems(op, shape, dtype, flags, options)
    strategy = strategy or op_obj.default_strategy
    if op_obj.search is None or strategy != OWN_SEARCH:  # (a generated kernel's search also takes its generator's own)
        try:
            check_strategy(strategy)
        except ValueError as exc:
            fail(str(exc))
    if check:
        return _Request(s, by, devices, _job_gpus(gpus) if queue else None, op_obj, probs, dim, None, strategy)
    store = open_store(s.db_url)
    if op_obj.needs_recorded_call:  # a decorated kernel: its arguments are rebuilt from the calls a process recorded
        if dtype is None:  # the dtype its calls were recorded in
            recorded = store.recorded_dtypes(op=op_obj.name, shape=probs[0].shape)
            if len(recorded) > 1:
                fail(f"{op_obj.name} {probs[0].shape} was recorded in {', '.join(recorded)}: give one with --dtype")
            if recorded:
                op_obj, probs, dim = problems(op, shape, recorded[0], flags, options)
        probs = [with_recorded_call(op_obj, p, store) for p in probs]
    return _Request(s, by, devices, _job_gpus(gpus) if queue else None, op_obj, probs, dim, store, strategy)


def _queue(request: _Request, plan: Plan, refine: Any, as_json: bool) -> None:
    """The problem (a sweep: its points) queued as jobs for the workers, as POST /jobs queues one."""
    from autotuner.cli.sweep import queue_sweep

    store = request.store
    assert store is not None
    if request.dim is not None:
        queue_sweep(request.op, request.probs, request.dim, store, plan, as_json, request.job_gpus, refine)
        return
    one = request.probs[0]
    job_id = store.queue_job(op=request.op.name, shape=one.shape, dtype=one.dtype, options=request.op.options_of(one),
                             strategy=str(plan.strategy), budget_trials=plan.trials, budget_seconds=plan.time_budget_s,
                             gpus=request.job_gpus)
    if as_json:
        print_json({"job": job_id, "op": request.op.name, "problem": one.key})
    else:
        console.print(f"queued job {job_id}: {request.op.name} {one.key} (`autotuner worker` tunes it)")


def _run_here(request: _Request, plan: Plan, refine: Any, as_json: bool, quiet: bool) -> None:
    """Tuned in this process (or the worker's that took the command): the trial worker and compile pool make their
    CUDA contexts while this process goes on (or a worker's, ready)."""
    from autotuner.cli import handed_run, prestart
    from autotuner.cli.sweep import run_sweep_here
    from autotuner.engine.measure.live import prestarted
    from autotuner.engine.plan import plan_device

    store, by, s = request.store, request.by, request.s
    assert store is not None
    kept = by.kept if by is not None else prestart.take(plan_device(plan)) or prestarted(s, plan_device(plan))
    try:
        if request.dim is not None:
            run_sweep_here(request.op, request.probs, request.dim, s, store, kept, plan, as_json, quiet, refine)
        else:
            _tune(request.op.name, request.op, request.probs[0], s, store, kept, plan, as_json, quiet)
    finally:
        handed_run.release(kept)


def _job_gpus(text: str | None) -> int | None:
    """`--gpus` with `--queue`: how many of its worker's GPUs measure each job (None: one, a worker with several
    running a job on each; "all": all the worker has, up to 64)."""
    if text is None:
        return None
    if text.strip() == "all":
        return 64
    if not text.strip().isdigit() or not 1 <= int(text) <= 64:
        fail(f"with --queue, --gpus is how many of a worker's GPUs measure each job at once (1-64 or all, e.g. 2; the "
             f"worker's own --gpus says which), got {text!r}")
    return int(text)


def with_recorded_call(op: Op, prob: ProblemType, store: Storage) -> ProblemType:
    """A decorated kernel's problem with the call a launching process recorded for its key."""
    from autotuner.store.interfaces import NoRecordedCall

    if op.options_of(prob).get("call") is not None:
        return prob
    try:
        return store.recorded_problem(op, prob.shape, prob.dtype)
    except NoRecordedCall:
        fail(f"{op.name} {prob.key}: no recorded call to tune from; launch it once with AUTOTUNER_RECORD=1 (or "
             "AUTOTUNER_ON_MISS=default or nearest) first")


def _tune(op: str, op_obj: Op, prob: ProblemType, s: Settings, store: Storage, kept: KeptProcesses, plan: Plan,
          as_json: bool, quiet: bool) -> None:
    from autotuner.base.device import current_device
    from autotuner.cli import handed_run
    from autotuner.engine.plan import plan_device
    from autotuner.engine.tuner import tune as run_tune

    by = handed_run.current()
    device = current_device(by.gpu if by is not None else plan_device(plan))
    if device.is_interpreter and not as_json:
        warn("No GPU: kernels run in Triton's interpreter and times are CPU wall-clock, not GPU speed.")
    if op_obj.search is not None:  # a generated kernel (Helion's): searched through its generator, as a worker does
        handed_run.release(kept)
        try:
            config, ms, run_id = op_obj.search(prob, device, store, plan.trials, str(plan.strategy))
        except Exception as exc:  # noqa: BLE001 - the generator's own errors, said in one line
            fail(f"{op} {prob.key}: the search failed: {type(exc).__name__}: {str(exc)[:500]}")
        if as_json:
            print_json({"op": op, "problem_key": prob.key, "device": device.key, "best_config": config,
                        "best_ms": ms, "run_id": run_id, "strategy": str(plan.strategy)})
        else:
            console.print(f"{op} {prob.key} on {device.key}: best {ms:.4g} ms {config} ({plan.strategy} through the "
                          f"kernel's generator; run {run_id})", soft_wrap=True)
        return
    if by is not None and not as_json and not quiet:
        err.print(f"tuning in worker {by.worker} on this host (its processes were running: no start-up)", style="dim")
    # imports, the database, the device: before the tuner's phases (handed to a worker: this process's, waiting)
    startup_s = by.since_start() if by is not None else since_process_start()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    observer: TuneObserver = TuneObserver()
    try:
        if not quiet and sys.stderr.isatty():
            columns = (TextColumn("{task.description}", markup=False, style="bold"), BarColumn(),
                       MofNCompleteColumn(), TextColumn("{task.fields[status]}", markup=False), TimeElapsedColumn())
            with Progress(*columns, console=err) as bar:
                observer = BarProgress(bar, f"{op} {prob.key}")
                result = run_tune(op_obj, prob, store=store, settings=s, plan=plan, device=device,
                                  observer=observer, kept=kept)
        else:
            observer = PlainProgress() if not quiet else TuneObserver()
            result = run_tune(op_obj, prob, store=store, settings=s, plan=plan, device=device, observer=observer,
                              kept=kept)
    except KeyboardInterrupt as exc:
        handed_run.release(kept)  # before the message: a trial worker stuck in a kernel goes first
        partial: TuneResult | None = getattr(observer, "result", None)
        code = 143 if str(exc) == "SIGTERM" else 130
        if partial is not None and partial.run_id is not None:
            fail(f"interrupted ({str(exc) or 'SIGINT'}): run {partial.run_id} is marked interrupted; its "
                 f"{len(partial.trials)} measured trials are kept", code)
        fail(f"interrupted ({str(exc) or 'SIGINT'}) before anything was stored", code)
    finally:
        signal.signal(signal.SIGTERM, previous)
    handed_run.release(kept)  # killed, not waited for: before the output, which the user is waiting for
    if startup_s is not None:
        result.phases["startup_s"] = startup_s
    if as_json:
        payload = result.to_dict()
        if by is not None:
            payload["worker"] = by.worker  # tuned by a worker running on this host, for this command
        print_json(payload)
    else:
        _print(result, device, op, op_obj)
    if result.best_config is None:
        raise typer.Exit(1)


def _print(result: TuneResult, device: Any, op: str, op_obj: Op) -> None:
    from autotuner.store.resolution import has_torch_op, torch_faster

    table = Table(title=f"{op} {result.problem_key} on {device.key} ({result.clock})")
    table.add_column("")
    table.add_column("value")
    table.add_row("best config", json.dumps(result.best_config))
    table.add_row("best time", ms(result.best_ms))
    table.add_row("default config", f"{json.dumps(result.default_config)}  {ms(result.default_ms)}")
    table.add_row("speedup vs default", times(result.speedup_vs_default))
    table.add_row("torch", ms(result.torch_ms))
    table.add_row("speedup vs torch", "n/a (interpreter wall-clock is not GPU speed)" if device.is_interpreter
                  else times(result.speedup_vs_torch))
    if not device.is_interpreter and has_torch_op(op_obj) and torch_faster(result.torch_ms, result.best_ms):
        # (as the library call decides: Resolution.launches_torch)
        table.add_row("library call", "launches torch's op for this problem: it ran faster than the best config")
    table.add_row("roofline fraction", "n/a" if result.roofline_fraction is None
                  else f"{result.roofline_fraction:.1%} (of datasheet peaks)")
    table.add_row("trials", f"{len(result.trials)} measured, {result.failures} failed, "
                            f"{result.rejected} rejected by constraints (of {result.candidates + result.rejected})")
    table.add_row("stored", f"run {result.run_id}; " + (
        "new best" if result.stored_as_best else "a faster one was already stored" if result.best_config is not None
        else "every config failed, nothing stored" if result.trials else "no config was measured in time, nothing stored"))
    table.add_row("wall time", result.phase_summary() + f"; compiling {result.phases.get('compile_s', 0):.1f} s "
                               "summed over the compile pool")
    console.print(table)
