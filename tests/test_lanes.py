"""One problem's configs measured on several GPUs at once (`autotuner tune --gpus`, engine.measure._run_lanes):
on the interpreter each lane is a CPU trial process, so the lanes' mechanics run here; their speed on GPUs is a
benchmark's (benchmarks/tune_time.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import timezone
from pathlib import Path

import pytest

from autotuner.cli.handoff import wanted
from autotuner.engine.measure import InOrderMeasurer, run_search
from autotuner.engine.outcome import Outcome
from autotuner.engine.strategies import make_search
from autotuner.engine.timing import Timing
from search_spaces.space import Config, Param, config_key

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotuner", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_two_lanes_measure_configs_at_once_and_pick_the_fastest(tmp_path):
    import tests.paced_op as paced

    log = tmp_path / "launches.log"
    out = _cli("tune", "paced_many", "--shape", "64", "--dtype", "float32", "--strategy", "exhaustive",
               "--gpus", "0,1", "--db", f"sqlite:///{tmp_path / 'lanes.db'}", "--json",
               env={"AUTOTUNER_PLUGINS": "tests.paced_op", "PACED_LOG": str(log), "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    trials = result["trials"]
    # every one of the ten configs measured once, by one lane or the other, and each lane measured some
    assert sorted(t["config"]["PAUSE_US"] for t in trials) == sorted(paced.MANY_US)
    assert all(t["status"] == "ok" for t in trials) and {t["lane"] for t in trials} == {0, 1}
    assert result["best_config"]["PAUSE_US"] == paced.MANY_FASTEST_US  # whichever lane measured it
    # two processes launched, and some of their launches overlapped in time
    assert _overlapping_pids(log) == (2, True)


def _overlapping_pids(log: Path, between: tuple[float, float] | None = None) -> tuple[int, bool]:
    """How many processes launched (tests/paced_op.py's log; `between`: only launches within those wall-clock
    seconds), and whether two of them launched at once."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for line in log.read_text().splitlines():
        pid, start, end = line.split()
        if between is None or between[0] <= float(start) and float(end) <= between[1]:
            spans.setdefault(pid, []).append((float(start), float(end)))
    lists = list(spans.values())
    overlap = any(s1 < e2 and s2 < e1 for i, a in enumerate(lists) for b in lists[i + 1:] for s1, e1 in a
                  for s2, e2 in b)
    return len(spans), overlap


def test_a_worker_on_two_gpus_measures_each_job_on_as_many_as_it_asks(tmp_path):
    from autotuner.store.database import Store

    db = f"sqlite:///{tmp_path / 'worker.db'}"
    store = Store(db)
    # first (priority) a job asking for one GPU, then two without a count: all of the worker's GPUs
    one = store.queue_job(op="paced_many", shape="32", dtype="float32", options={"approximate": "tanh"},
                          strategy="exhaustive", budget_trials=10, priority=1, gpus=1)
    jobs = [store.queue_job(op="paced_many", shape=shape, dtype="float32", options={"approximate": "tanh"},
                            strategy="exhaustive", budget_trials=10) for shape in ("64", "128")]
    log = tmp_path / "launches.log"
    out = _cli("worker", "--gpus", "0,1", "--until-empty", "--db", db,
               env={"AUTOTUNER_PLUGINS": "tests.paced_op", "PACED_LOG": str(log), "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert ":gpus0,1" in out.stdout
    assert f"job {one}: paced_many 32" in out.stdout and "started on 1 GPU (0)" in out.stdout
    assert "started on 2 GPUs (0,1)" in out.stdout
    for job_id in (one, *jobs):
        job = store.job(job_id)
        assert job is not None and job.state == "done", job
    first = store.job(one)
    assert first is not None and first.gpus == 1 and first.started_at and first.finished_at
    # the one-GPU job's configs all measured by one process, one after the other
    start, end = (t.replace(tzinfo=t.tzinfo or timezone.utc).timestamp() for t in (first.started_at, first.finished_at))
    assert _overlapping_pids(log, (start, end)) == (1, False)
    # the later jobs' lanes are kept processes: two processes in all, launching at once
    assert _overlapping_pids(log) == (2, True)


@pytest.mark.parametrize("gpus, message", [("x", "--gpus takes device indices"), ("0,0", "names a device twice"),
                                           ("-1", "device indices (0 or more)")])
def test_bad_gpus_are_a_clear_error(tmp_path, gpus, message):
    db = tmp_path / "bad.db"
    out = _cli("tune", "softmax", "--shape", "8x8", "--trials", "2", "--gpus", gpus, "--db", f"sqlite:///{db}")
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("args, message", [(["--gpus", "0,0"], "names a device twice"),
                                           (["--gpus", "0,1", "--gpu", "0"], "not both"),
                                           (["--gpus", "a"], "--gpus takes device indices")])
def test_a_worker_refuses_bad_gpus(tmp_path, args, message):
    out = _cli("worker", *args, "--once", "--db", f"sqlite:///{tmp_path / 'w.db'}")
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_a_command_with_gpus_is_not_handed_to_a_local_worker(monkeypatch):
    monkeypatch.delenv("AUTOTUNER_GPUS", raising=False)
    assert wanted(["softmax", "--shape", "8x8"])
    assert not wanted(["softmax", "--shape", "8x8", "--gpus", "0,1"])
    assert not wanted(["softmax", "--gpus=all"])
    monkeypatch.setenv("AUTOTUNER_GPUS", "0,1")
    assert not wanted(["softmax", "--shape", "8x8"])


class _SlowTable(InOrderMeasurer):
    """Three lanes over a table of times; each measurement takes 20 ms of wall clock, and the lanes that
    measured and how many measured at once are kept."""

    def __init__(self, times: dict[str, float]) -> None:
        self.times, self.by_lane, self.most_at_once = times, {0: 0, 1: 0, 2: 0}, 0
        self._now, self._lock = 0, threading.Lock()

    @property
    def lanes(self) -> int:
        return 3

    def start(self) -> Outcome:
        return Outcome("invalid")

    def measure(self, config: Config, lane: int = 0, give_up_ms: float | None = None) -> Outcome:
        with self._lock:
            self._now += 1
            self.most_at_once = max(self.most_at_once, self._now)
            self.by_lane[lane] += 1
        time.sleep(0.02)
        with self._lock:
            self._now -= 1
        ms = self.times[config_key(config)]
        return Outcome("ok", timing=Timing(ms, ms, ms, 1, "table"))

    def time(self, config: Config, scale: float = 1.0) -> Outcome:
        return self.measure(config)


@pytest.mark.parametrize("strategy", ["exhaustive", "tpe"])
def test_lanes_keep_to_the_budget_and_tell_the_search_every_result(strategy):
    params = [Param("A", (1, 2, 3, 4, 5, 6)), Param("B", (1, 2, 3, 4))]
    configs = [{"A": a, "B": b} for a in params[0].values for b in params[1].values]
    times = {config_key(c): float(abs(c["A"] - 4) + abs(c["B"] - 2) + 1) for c in configs}
    search = make_search(strategy, configs, params, budget=13, seed=0)
    measurer = _SlowTable(times)
    told: list[str] = []
    done = run_search(search, measurer, budget=13, batch=1, on_trial=lambda m: told.append(config_key(m.config)))
    assert len(done) == 13 and len(set(told)) == 13 and told == [config_key(m.config) for m in done]
    assert search.measured == 13 and not search.pending
    assert sum(measurer.by_lane.values()) == 13 and all(n > 0 for n in measurer.by_lane.values())
    assert measurer.most_at_once > 1
    assert {m.lane for m in done} == {0, 1, 2}
