"""The search loop: asks a search for configs, has a measurer (autotuner.engine.measure.protocol) measure them,
on one lane or several at once, and tells the search each time, within a trial and a time budget.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from autotuner.engine.measure.outcome import Outcome
from autotuner.engine.measure.protocol import Measurer
from autotuner.engine.search.contract import Search
from search_spaces.space import Config, config_key

T = TypeVar("T")


GIVE_UP = 1.3


def _give_up_ms(search: Search) -> float | None:
    best = search.best(1)
    return best[0][1] * GIVE_UP if best else None


@dataclass
class Measured:
    config: Config
    outcome: Outcome
    lane: int = 0  # the measurer's lane (GPU) that measured it
    at: float = dataclasses.field(default_factory=time.perf_counter)  # when its measurement ended (perf_counter)

    @property
    def ms(self) -> float | None:
        t = self.outcome.timing
        return t.median_ms if self.outcome.status == "ok" and t else None


def _ask_ahead(search: Search, measurer: Measurer, ahead: list[Config], batch: int, *, width: int,
               left: int | None, speculate: bool = True) -> list[Config]:
    """Ask the search for configs until `ahead` holds `width` (as far as `search.max_pending` allows) or `left`
    (what the trial budget leaves, None: no budget), handing them to `measurer.prepare`; then, with a compile pool
    (`batch` > 1), its idle workers compile what the search is likely to ask next. Returns `ahead`."""
    asked: list[Config] = []
    while len(ahead) + len(asked) < search.max_pending(max(1, width), measurer.lanes) and (
            left is None or len(ahead) + len(asked) < left):
        c = search.ask(measurer.readiness)
        if c is None:
            break
        asked.append(c)
    if asked:
        measurer.compile_ahead(asked)
        ahead.extend(asked)
    if batch > 1 and speculate:
        measurer.speculate(search.upcoming(batch))
    return ahead


def _tell(search: Search, m: Measured, done: list[Measured], on_trial: Callable[[Measured], None] | None,
          spent: dict[str, float], t_measure: float) -> None:
    """A measured config told to the search and recorded (`on_trial`), each part's seconds added to `spent`."""
    t_tell = time.perf_counter()
    spent["measure_s"] += t_tell - t_measure
    search.tell(m.config, m.ms)
    done.append(m)
    t_trial = time.perf_counter()
    spent["ask_s"] += t_trial - t_tell
    if on_trial:
        on_trial(m)
    spent["record_trial_s"] += time.perf_counter() - t_trial


def ask_first(search: Search, measurer: Measurer, n: int) -> list[Config]:
    """Before the measurer has started: up to `n` configs that depend on no result, handed to `measurer.prepare` to
    compile while the trial worker sets up (`run_search`'s `ahead`)."""
    return _ask_ahead(search, measurer, [], n, width=n, left=n, speculate=False)


def run_search(search: Search, measurer: Measurer, *, budget: int | None, time_budget_s: float | None = None,
               batch: int = 1, on_trial: Callable[[Measured], None] | None = None,
               spent: dict[str, float] | None = None, ahead: list[Config] | None = None) -> list[Measured]:
    """Ask, measure, tell until the budget (trials, or seconds) or the space runs out; at least one config is measured.
    Up to `batch` configs are asked ahead and handed to `measurer.prepare`, so compiles overlap timing; they are
    measured as they are ready (`first_ready`), and likely next configs compile on idle workers (`speculate`). `spent`
    gets `ask_s`, `measure_s` and `record_trial_s` added; `ahead`: configs asked before."""
    spent = spent if spent is not None else {}
    for part in ("ask_s", "measure_s", "record_trial_s"):
        spent.setdefault(part, 0.0)
    ahead = list(ahead or [])
    if measurer.lanes > 1:
        return _run_lanes(search, measurer, budget=budget, time_budget_s=time_budget_s, batch=batch,
                          on_trial=on_trial, spent=spent, ahead=ahead)
    t0 = time.perf_counter()
    done: list[Measured] = []

    def out_of_budget() -> bool:
        if budget is not None and len(done) >= budget:
            return True
        return time_budget_s is not None and bool(done) and time.perf_counter() - t0 >= time_budget_s

    # A trial process measures while this process waits: what does not need its answer (writing the last trial,
    # asking the next config, guessing what the pool compiles next) is done meanwhile, the measuring on a thread.
    overlap = measurer.measures_elsewhere
    unrecorded: list[Measured] = []

    def record() -> None:
        t_record = time.perf_counter()
        for m in unrecorded:
            if on_trial:
                on_trial(m)
        unrecorded.clear()
        spent["record_trial_s"] += time.perf_counter() - t_record

    while not out_of_budget():
        t = time.perf_counter()
        _ask_ahead(search, measurer, ahead, batch, width=batch + 1,
                   left=budget - len(done) if budget is not None else None, speculate=not overlap)
        if not ahead:
            break
        t_measure = time.perf_counter()
        spent["ask_s"] += t_measure - t
        config = ahead.pop(measurer.first_ready(ahead))
        give_up_ms = _give_up_ms(search)
        if overlap:
            answer = on_a_thread(functools.partial(measurer.measure, config, give_up_ms=give_up_ms))
            t_own = time.perf_counter()
            record()
            t_guess = time.perf_counter()
            # the next config asked meanwhile (this one pending, as the others asked ahead are): the trial worker
            # waited for each ask otherwise (benchmarks/tune_time.py's phases)
            _ask_ahead(search, measurer, ahead, batch, width=batch + 1,
                       left=budget - len(done) - 1 if budget is not None else None, speculate=False)
            if batch > 1:
                measurer.speculate(search.upcoming(batch))
            spent["ask_s"] += time.perf_counter() - t_guess
            t_measure += time.perf_counter() - t_own  # (measure_s: the time spent waiting for it)
            outcome = answer()
        else:
            outcome = measurer.measure(config, give_up_ms=give_up_ms)
        _tell(search, Measured(config, outcome), done, None, spent, t_measure)  # (written by record())
        unrecorded.append(done[-1])
        if not overlap:
            record()
    record()
    for config in ahead:  # asked, never measured: no longer pending
        search.pending.discard(config_key(config))
    return done


def on_a_thread(fn: Callable[[], T], name: str = "measure") -> Callable[[], T]:
    """`fn` started on a thread of its own; the call returned waits for its answer (raising what it raised). A
    daemon thread, not an executor's: those are joined at exit, where one stuck on a hung trial process would hold
    the command's exit."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box.append((False, exc))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def answer() -> T:
        thread.join()
        ok, value = box[0]
        if not ok:
            raise value
        return cast(T, value)

    return answer


def _run_lanes(search: Search, measurer: Measurer, *, budget: int | None, time_budget_s: float | None, batch: int,
               on_trial: Callable[[Measured], None] | None, spent: dict[str, float],
               ahead: list[Config]) -> list[Measured]:
    """`run_search` with a config measured at once per lane (a trial worker per GPU): the search, budget and `on_trial`
    under one lock, the measuring not. Lane 0 runs in the calling thread, so an interrupt there stops the run."""
    t0 = time.perf_counter()
    done: list[Measured] = []
    state = {"in_flight": 0, "stop": False}
    failed: list[BaseException] = []
    changed = threading.Condition()

    def out_of_budget() -> bool:
        if budget is not None and len(done) + state["in_flight"] >= budget:
            return True
        return time_budget_s is not None and bool(done) and time.perf_counter() - t0 >= time_budget_s

    def next_config() -> Config | None:
        """Under the lock: the lane's next config, waiting while none can be asked but other lanes may still
        tell (a search that holds few pending asks); None when the run is over."""
        while not state["stop"] and not out_of_budget():
            t = time.perf_counter()
            _ask_ahead(search, measurer, ahead, batch, width=batch + measurer.lanes,
                       left=budget - len(done) - state["in_flight"] if budget is not None else None)
            spent["ask_s"] += time.perf_counter() - t
            if ahead:
                state["in_flight"] += 1
                return ahead.pop(measurer.first_ready(ahead, wait_for_one=False))
            if not state["in_flight"]:
                return None  # nothing left to ask, and no lane will tell anything more
            changed.wait()
        return None

    def lane(index: int) -> None:
        try:
            while True:
                with changed:
                    config = next_config()
                    give_up_ms = _give_up_ms(search)
                if config is None:
                    return
                t_measure = time.perf_counter()
                outcome = measurer.measure(config, lane=index, give_up_ms=give_up_ms)
                with changed:
                    state["in_flight"] -= 1
                    changed.notify_all()
                    if state["stop"]:
                        return
                    _tell(search, Measured(config, outcome, index), done, on_trial, spent, t_measure)
        except BaseException as exc:
            with changed:
                failed.append(exc)
                state["stop"] = True
                changed.notify_all()
            if index == 0:
                raise

    threads = [threading.Thread(target=lane, args=(i,), name=f"lane-{i}", daemon=True)
               for i in range(1, measurer.lanes)]
    for th in threads:
        th.start()
    try:
        lane(0)
    finally:
        with changed:
            if failed or sys.exc_info()[0] is not None:
                state["stop"] = True
            changed.notify_all()
    for th in threads:
        th.join()
    if failed:
        raise failed[0]
    for config in ahead:  # asked, never measured: no longer pending
        search.pending.discard(config_key(config))
    return done
