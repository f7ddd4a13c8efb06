"""One problem's configs measured on several GPUs at once (`autotuner tune --gpus`, engine.search.loop._run_lanes):
on the interpreter each lane is a CPU trial process, so the lanes' mechanics run here; their speed on GPUs is a
benchmark's (benchmarks/tune_time.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timezone
from pathlib import Path

import pytest

from autotuner.cli.handoff import wanted
from autotuner.engine.measure.outcome import Outcome
from autotuner.engine.measure.table import InOrderMeasurer
from autotuner.engine.measure.timing import Timing
from autotuner.engine.search.loop import run_search
from autotuner.engine.search.strategies import make_search
from search_spaces.space import Config, Param, config_key

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotuner", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_two_lanes_measure_configs_at_once_and_pick_the_fastest(tmp_path):
    import tests.support.paced_op as paced

    log = tmp_path / "launches.log"
    out = _cli("tune", "paced_many", "--shape", "64", "--dtype", "float32", "--strategy", "exhaustive",
               "--gpus", "0,1", "--db", f"sqlite:///{tmp_path / 'lanes.db'}", "--json",
               env={"AUTOTUNER_PLUGINS": "tests.support.paced_op", "PACED_LOG": str(log), "PYTHONPATH": str(ROOT)})
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
    """How many processes launched (tests/support/paced_op.py's log; `between`: only launches within those wall-clock
    seconds), and whether two of them launched at once."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for line in log.read_text().splitlines():
        pid, start, end = line.split()[:3]
        if between is None or between[0] <= float(start) and float(end) <= between[1]:
            spans.setdefault(pid, []).append((float(start), float(end)))
    lists = list(spans.values())
    overlap = any(s1 < e2 and s2 < e1 for i, a in enumerate(lists) for b in lists[i + 1:] for s1, e1 in a
                  for s2, e2 in b)
    return len(spans), overlap


def _span(job):
    return tuple(t.replace(tzinfo=t.tzinfo or timezone.utc).timestamp() for t in (job.started_at, job.finished_at))


def test_a_worker_on_two_gpus_runs_a_job_on_each_and_a_job_asking_two_on_both(tmp_path):
    from autotuner.store.database import Store

    db = f"sqlite:///{tmp_path / 'worker.db'}"
    store = Store(db)
    # first (priority) two jobs without a count: one GPU each, at once; then one asking for two
    alone = [store.queue_job(op="paced_many", shape=shape, dtype="float32", options={"approximate": "tanh"},
                             strategy="exhaustive", budget_trials=10, priority=2) for shape in ("32", "64")]
    both = store.queue_job(op="paced_many", shape="128", dtype="float32", options={"approximate": "tanh"},
                           strategy="exhaustive", budget_trials=10, priority=1, gpus=2)
    log = tmp_path / "launches.log"
    out = _cli("worker", "--gpus", "0,1", "--until-empty", "--db", db,
               env={"AUTOTUNER_PLUGINS": "tests.support.paced_op", "PACED_LOG": str(log), "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert ":gpus0,1" in out.stdout
    assert "started on 1 GPU (0)" in out.stdout and "started on 1 GPU (1)" in out.stdout, out.stdout
    assert f"job {both}: paced_many 128" in out.stdout and "started on 2 GPUs (0,1)" in out.stdout
    jobs = [store.job(j) for j in (*alone, both)]
    assert all(j is not None and j.state == "done" and j.attempts == 1 for j in jobs), jobs
    (s1, e1), (s2, e2), (s3, e3) = (_span(j) for j in jobs)
    assert s1 < e2 and s2 < e1  # the two one-GPU jobs ran at once
    assert s3 >= max(e1, e2) - 1.0  # the two-GPU job waited for both GPUs (row times are whole seconds in SQLite)
    # each one-GPU job's configs measured by one process, and the two jobs' processes launching at once
    assert _overlapping_pids(log, (min(s1, s2) - 1, max(e1, e2))) == (2, True)
    # the two-GPU job measured on both GPUs' kept processes
    assert _overlapping_pids(log, (s3, e3 + 1)) == (2, True)


def test_a_worker_on_two_gpus_gives_both_running_jobs_back_when_stopped(tmp_path):
    from autotuner.store.database import Store

    db = f"sqlite:///{tmp_path / 'stop.db'}"
    store = Store(db)
    jobs = [store.queue_job(op="paced_many", shape=shape, dtype="float32", options={"approximate": "tanh"},
                            strategy="exhaustive", budget_trials=10) for shape in ("32", "64")]
    log = tmp_path / "launches.log"
    proc = subprocess.Popen([sys.executable, "-m", "autotuner", "worker", "--gpus", "0,1", "--db", db],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, "AUTOTUNER_PLUGINS": "tests.support.paced_op", "PACED_LOG": str(log),
                                 "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and len({line.split()[0] for line in log.read_text().splitlines()}) >= 2):
            assert time.monotonic() < deadline and proc.poll() is None, "both jobs never measured"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
    text = proc.stdout.read() if proc.stdout else ""
    assert "Traceback" not in text, text
    for job_id in jobs:
        job = store.job(job_id)
        assert job is not None and job.state == "queued" and job.attempts == 0, (job, text)  # given back, uncounted
        assert f"job {job_id}: given back (worker" in text, text


class RecordingLane:
    """A lane of one's own (as a remote machine's would be): it relays every request to a trial worker it holds,
    and notes what it was asked."""

    def __init__(self) -> None:
        from autotuner.engine.measure.runner import TrialRunner

        self.inner = TrialRunner(None)
        self.asked: list[str] = []
        self.spec = None

    @property
    def in_flight(self) -> bool:
        return self.inner.in_flight

    def use(self, spec, trial_timeout_s):
        self.spec = spec
        self.asked.append("use")
        self.inner.use(spec, trial_timeout_s)

    def setup(self):
        self.asked.append("setup")
        self.inner.setup()

    def baseline(self):
        self.asked.append("baseline")
        return self.inner.baseline()

    def measure(self, config, scale=1.0, give_up_ms=None):
        self.asked.append("measure")
        return self.inner.measure(config, scale, give_up_ms)

    def time(self, config, scale=1.0):
        self.asked.append("time")
        return self.inner.time(config, scale)

    def close(self, wait=True):
        self.asked.append("close")
        self.inner.close(wait)


def test_a_lane_of_ones_own_measures_beside_the_problems_device(tmp_path):
    import tests.support.paced_op as paced
    from autotuner.base.registry import get_op, load_plugins
    from autotuner.base.settings import Settings
    from autotuner.engine.measure.lanes import Lane
    from autotuner.engine.tuner import Plan, tune
    from autotuner.store.database import Store

    load_plugins(["tests.support.paced_op"])
    lane = RecordingLane()
    assert isinstance(lane, Lane)
    op = get_op("paced_many")
    problem = op.parse_problem("64", "float32", approximate="tanh")
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'own.db'}", plugins=["tests.support.paced_op"])
    result = tune(op, problem, store=Store(settings.db_url), settings=settings,
                  plan=Plan(strategy="exhaustive", trials=10), lanes=[lane])
    lane.inner.close()
    assert lane.spec is not None and lane.spec.op == "paced_many" and lane.asked[0] == "use"
    on_lane = [t for t in result.trials if t.lane == 1]
    assert on_lane and len(on_lane) == lane.asked.count("measure")  # the search measured some configs there
    assert {t.lane for t in result.trials} == {0, 1} and len(result.trials) == 10
    assert "time" not in lane.asked and "baseline" not in lane.asked  # the winner is re-timed on the problem's device
    assert result.best_config is not None and result.best_config["PAUSE_US"] == paced.MANY_FASTEST_US


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
