"""The job queue and `autotuner worker`, on SQLite and the real PostgreSQL: claiming, heartbeats, retries, and
several worker processes draining a queue while one of them is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from autotuner.base.registry import get_op
from autotuner.base.settings import Settings
from autotuner.store.database import Store
from autotuner.worker.loop import Worker
from db import queue
from db.engine import session_scope
from db.models import BestConfig, Job, TuningRun, utcnow

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(heartbeat_s=0.3, lease_s=3.0, poll_s=0.2)


def _queue(store: Store, op: str, shape: str, **kw) -> int:
    kw.setdefault("trials", 2)
    return store.queue_job(op=op, shape=shape, dtype=kw.pop("dtype", "float16"), options=kw.pop("options", {}),
                           budget_trials=kw.pop("trials"), **kw)


def _job(store: Store, job_id: int) -> Job:
    with session_scope(store.engine) as s:
        job = queue.get_job(s, job_id=job_id)
        assert job is not None
        s.expunge(job)
        return job


def test_a_worker_runs_a_job_and_stores_its_result(url):
    settings = Settings(db_url=url, **FAST)
    store = Store(url)
    job_id = _queue(store, "softmax", "6x40")
    worker = Worker(settings, name="w1")
    assert worker.run(once=True) == 1
    job = _job(store, job_id)
    assert (job.state, job.attempts, job.worker, job.error) == ("done", 1, "w1", None)
    assert job.started_at is not None and job.finished_at is not None and job.run_id is not None
    with session_scope(store.engine) as s:
        run = s.get(TuningRun, job.run_id)
        assert run is not None and run.status == "done" and run.job_id == job_id and run.problem_key == "6x40:float16"
        best = s.scalars(select(BestConfig).where(BestConfig.run_id == job.run_id)).one()
        assert best.op == "softmax" and best.median_ms > 0
    op = get_op("softmax")
    stored = store.best(op=op, problem=op.parse_problem("6x40"), device=worker_device())
    assert stored is not None and not stored.stale and stored.config == best.config
    assert Worker(settings).run(once=True) == 0  # nothing left: --once returns without waiting


def test_a_worker_tells_a_jobs_progress_as_it_goes(url):
    said: list[str] = []
    store = Store(url)
    job_id = _queue(store, "softmax", "6x40", trials=3)
    Worker(Settings(db_url=url, **FAST), name="w", on_event=said.append).run(once=True)
    assert _job(store, job_id).state == "done"
    for phase in ("setup", "search: 3 configs", "record"):
        assert f"job {job_id}: {phase}" in said, said


def worker_device():
    from autotuner.base.device import current_device

    return current_device()


def test_jobs_are_claimed_by_priority_then_age_and_never_twice(url):
    store = Store(url)
    low = _queue(store, "softmax", "4x8", priority=0)
    high = _queue(store, "softmax", "4x9", priority=5)
    low2 = _queue(store, "softmax", "4x10", priority=0)
    claimed: list[int] = []
    lock = threading.Lock()

    def claim(name: str) -> None:
        with session_scope(store.engine) as s:
            job = queue.claim_job(s, worker=name)
            if job is not None:
                with lock:
                    claimed.append(job.id)

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted([low, high, low2])  # each job once, no more claims than jobs
    with session_scope(store.engine) as s:
        assert {j.state for j in s.scalars(select(Job))} == {"running"}
    # order on an empty-then-refilled queue: priority first, then age
    store2 = Store(url)
    a, b = _queue(store2, "softmax", "4x11"), _queue(store2, "softmax", "4x12", priority=9)
    with session_scope(store2.engine) as s:
        assert queue.claim_job(s, worker="x").id == b
    with session_scope(store2.engine) as s:
        assert queue.claim_job(s, worker="x").id == a


def test_a_claim_prefers_the_kernels_its_worker_compiled_and_leaves_those_being_compiled(url):
    """Of jobs of one priority, a worker takes next one of the kernels of the job it ended last (their binaries are
    compiled), and otherwise one whose kernels no running job is compiling, before the oldest; a higher priority
    still comes first."""
    store = Store(url)
    f1, f2 = _queue(store, "softmax", "4x8"), _queue(store, "softmax", "4x16")
    b1, b2 = _queue(store, "softmax", "4x8", dtype="bfloat16"), _queue(store, "softmax", "4x16", dtype="bfloat16")
    assert store.claim_job("w1")[0].id == f1  # the oldest
    assert store.claim_job("w2")[0].id == b1  # not f2: w1 is compiling its kernels
    assert store.finish_job(job_id=f1, worker="w1", run_id=None)
    urgent = _queue(store, "softmax", "4x32", dtype="bfloat16", priority=3)
    assert store.claim_job("w1", after=f1)[0].id == urgent  # priority before kernels
    assert store.claim_job("w3", after=b1)[0].id == b2  # the kernels of the job it names, though others run them
    assert store.claim_job("w4", after=f1)[0].id == f2
    assert store.claim_job("w4", after=f1)[0] is None


def test_a_worker_takes_next_the_jobs_of_the_kernels_it_just_tuned(tmp_path):
    """A draining worker runs a job of the kernels it ended last before an older job of other kernels."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = Store(url)
    f1, b1, f2 = (_queue(store, "softmax", "4x8"), _queue(store, "softmax", "4x8", dtype="bfloat16"),
                  _queue(store, "softmax", "4x16"))
    assert Worker(Settings(db_url=url, **FAST), name="w").run(until_empty=True) == 3
    started = sorted((_job(store, j).started_at, j) for j in (f1, b1, f2))
    assert [j for _, j in started] == [f1, f2, b1]


def test_a_job_of_other_kernels_is_passed_over_only_so_often(url):
    """Jobs of the kernels a worker just tuned, queued one after another, do not hold an older job back for ever:
    once AFFINITY_WINDOW jobs queued after it were taken first, it is next."""
    store = Store(url)
    other = _queue(store, "softmax", "4x8", dtype="bfloat16")
    last = _queue(store, "softmax", "4x8")
    assert store.claim_job("w", after=None)[0].id == other
    assert store.finish_job(job_id=other, worker="w", run_id=None)
    store.claim_job("w0")  # `last`, ended: the kernels its worker prefers
    assert store.finish_job(job_id=last, worker="w0", run_id=None)
    older = _queue(store, "softmax", "4x16", dtype="bfloat16")
    taken = []
    for i in range(queue.AFFINITY_WINDOW + 2):
        _queue(store, "softmax", f"4x{24 + 8 * i}")  # a stream of jobs of the preferred kernels
        job = store.claim_job("w0", after=last)[0]
        taken.append(job.id)
        if job.id == older:
            break
    assert taken[-1] == older and len(taken) == queue.AFFINITY_WINDOW + 1, taken


def test_the_claim_order_ranks_priority_then_kernels_then_age():
    window = [(1, 0, "a"), (2, 0, "b"), (3, 0, "c"), (4, 5, "a"), (5, 0, "a")]
    assert queue.claim_order(window, last=None, running=set()) == [4, 1, 2, 3, 5]
    assert queue.claim_order(window, last="c", running=set()) == [4, 3, 1, 2, 5]
    assert queue.claim_order(window, last=None, running={"a"}) == [4, 2, 3, 1, 5]
    assert queue.claim_order(window, last="a", running={"a", "b"}) == [4, 1, 5, 3, 2]


def test_a_queued_jobs_priority_rises_by_its_meets_through_either_writer(url):
    """Store.raise_priority (SQLAlchemy) and the launch path's sqlite3 writer raise a queued job, not one claimed."""
    from autotuner.store.lazy import LazyStore

    store = Store(url)
    met_once, met_often = _queue(store, "softmax", "4x8"), _queue(store, "softmax", "4x9")
    assert store.raise_priority(met_once, by=1) and store.raise_priority(met_often, by=3)
    launch = LazyStore(url, create=False, retry_s=1).prefetch()  # a plain SQLite file: sqlite3; else the Store
    assert launch.raise_priority(met_often, by=4)
    assert (_job(store, met_once).priority, _job(store, met_often).priority) == (1, 7)
    assert store.claim_job("w")[0].id == met_often  # the most-met first
    assert not store.raise_priority(met_often, by=1) and not launch.raise_priority(met_often, by=1)  # running now
    assert _job(store, met_often).priority == 7


@pytest.mark.postgres
def test_postgres_claims_skip_rows_locked_by_another_transaction(pg_url):
    store = Store(pg_url)
    first, second = _queue(store, "softmax", "4x8"), _queue(store, "softmax", "4x9")
    with session_scope(store.engine) as a:
        job_a = queue.claim_job(a, worker="a")  # not committed yet: its row stays locked
        t0 = time.perf_counter()
        with session_scope(store.engine) as b:
            job_b = queue.claim_job(b, worker="b")
        assert time.perf_counter() - t0 < 2  # b did not wait for a's lock
        assert (job_a.id, job_b.id) == (first, second)


def test_a_job_whose_worker_stopped_heartbeating_is_queued_again_then_failed(url):
    store = Store(url)
    job_id = _queue(store, "softmax", "4x8")
    for attempt in (1, 2):
        with session_scope(store.engine) as s:
            assert queue.claim_job(s, worker=f"dead{attempt}").id == job_id
        run_id = store.start_run(op=get_op("softmax"), problem=get_op("softmax").parse_problem("4x8"),
                                 device=worker_device(), strategy="tpe", budget_trials=2, budget_seconds=None,
                                 clock="wall", job_id=job_id)
        with session_scope(store.engine) as s:  # still fresh: nothing happens
            assert queue.requeue_stale(s, older_than=utcnow() - timedelta(seconds=60), max_attempts=3) == []
        with session_scope(store.engine) as s:
            changed = queue.requeue_stale(s, older_than=utcnow() + timedelta(seconds=1), max_attempts=3)
        assert changed == [(job_id, "queued" if attempt < 2 else "failed")]  # a second lost worker fails it
        job = _job(store, job_id)
        assert f"worker dead{attempt} stopped heartbeating" in job.error
        with session_scope(store.engine) as s:
            run = s.get(TuningRun, run_id)
            assert run.status == "interrupted" and "stopped heartbeating" in run.error
    assert job.state == "failed" and job.attempts == 2 and job.lost == 2
    assert job.error.startswith("2 workers were lost running it")
    # the dead worker's late heartbeat and finish are refused: it no longer holds the job
    with session_scope(store.engine) as s:
        assert not queue.heartbeat(s, job_id=job_id, worker="dead2")
        assert not queue.finish_job(s, job_id=job_id, worker="dead2", run_id=None)


def test_a_failing_job_is_retried_then_marked_failed_with_its_reason(url):
    settings = Settings(db_url=url, plugins=["tests.support.faulty_op"], **FAST)
    import tests.support.faulty_op  # noqa: F401

    store = Store(url)
    job_id = _queue(store, "broken", "1000", trials=1)
    states = []
    for _ in range(3):
        Worker(settings, name="w").run(once=True)
        states.append(_job(store, job_id).state)
    job = _job(store, job_id)
    assert states == ["queued", "queued", "failed"] and job.attempts == 3
    assert "failed 3 times" in job.error and "cannot allocate inputs" in job.error


def test_a_job_naming_an_unknown_op_fails_at_once(url):
    store = Store(url)
    job_id = _queue(store, "no_such_op", "64")
    Worker(Settings(db_url=url, **FAST), name="w").run(once=True)
    job = _job(store, job_id)
    assert job.state == "failed" and job.attempts == 1 and "unknown op 'no_such_op'" in job.error


def _run_worker(url: str, cwd, **env: str) -> subprocess.CompletedProcess:
    """`python -m autotuner worker --until-empty` in `cwd` (a folder holding modules a job may name), with the
    suite's AUTOTUNER_KERNEL_MODULES replaced by `env`'s or left out."""
    base = {k: v for k, v in os.environ.items() if k != "AUTOTUNER_KERNEL_MODULES"}
    base.update(AUTOTUNER_HEARTBEAT_S="0.3", AUTOTUNER_LEASE_S="1", AUTOTUNER_POLL_S="0.2",
                PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **env)
    return subprocess.run([sys.executable, "-m", "autotuner", "worker", "--until-empty", "--db", url], cwd=cwd,
                          env=base, capture_output=True, text=True, timeout=300)


def test_a_job_never_makes_a_worker_import_what_the_operator_did_not_allow(url, tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    (here / "worker.py").write_text("open('imported', 'w').write('ran')\n")  # a .py beside the worker
    store = Store(url)
    ops = ["this:x", "venv.__main__:x", "autotuner.__main__:x", "worker:kernel", "os:system"]
    ids = {op: _queue(store, op, "n=8", dtype="float32") for op in ops}
    after = _queue(store, "softmax", "4x8")
    done = _run_worker(url, here)
    assert done.returncode == 0, done.stderr
    assert not (here / "imported").exists() and sorted(p.name for p in here.iterdir()) == ["worker.py"]
    assert "Beautiful is better" not in done.stdout + done.stderr  # `this` (the Zen of Python) never imported
    for op, job_id in ids.items():
        job = _job(store, job_id)
        assert (job.state, job.attempts) == ("failed", 1), (op, job.error)
        assert "bad job" in job.error and ("is not allowed on this worker" in job.error
                                           or "never a __main__" in job.error), job.error
    assert _job(store, after).state == "done"  # the worker went on to the next job
    # even an allowed package's __main__ is never imported
    job_id = _queue(store, "autotuner.__main__:x", "n=8", dtype="float32")
    assert _run_worker(url, here, AUTOTUNER_KERNEL_MODULES="autotuner").returncode == 0
    assert "never a __main__" in _job(store, job_id).error


def test_an_allowed_module_that_exits_kills_or_hangs_on_import_fails_its_job_once(url, tmp_path):
    (tmp_path / "exits.py").write_text("raise SystemExit(3)\n")
    (tmp_path / "dies.py").write_text("import os\nos._exit(9)\n")
    (tmp_path / "hangs.py").write_text("import time\ntime.sleep(10**6)\n")
    store = Store(url)
    jobs = {name: _queue(store, f"{name}:kernel", "n=8", dtype="float32") for name in ("exits", "dies", "hangs")}
    after = _queue(store, "softmax", "4x8")
    done = _run_worker(url, tmp_path, AUTOTUNER_KERNEL_MODULES="exits,dies,hangs", AUTOTUNER_IMPORT_PROBE_S="5")
    assert done.returncode == 0, done.stderr  # the imports ended children, never the worker
    for name, said in (("exits", "exit status 3"), ("dies", "exit status 9"), ("hangs", "took longer than 5 s")):
        job = _job(store, jobs[name])
        assert (job.state, job.attempts, job.lost) == ("failed", 1, 0) and said in job.error, (name, job.error)
    assert _job(store, after).state == "done"


def _worker_proc(url: str, name: str, log) -> subprocess.Popen:
    env = {**os.environ, "AUTOTUNER_HEARTBEAT_S": "0.3", "AUTOTUNER_LEASE_S": "3", "AUTOTUNER_POLL_S": "0.2"}
    return subprocess.Popen([sys.executable, "-m", "autotuner", "worker", "--until-empty", "--name", name,
                             "--db", url], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_three_workers_drain_twelve_jobs_while_one_is_killed(url, tmp_path):
    store = Store(url)
    jobs = [_queue(store, "softmax", f"4x{16 + i}") for i in range(12)]
    logs = {n: open(tmp_path / f"{n}.log", "w+") for n in ("w1", "w2", "w3")}
    procs = {n: _worker_proc(url, n, logs[n]) for n in logs}
    victim_job = None
    deadline = time.monotonic() + 240
    while victim_job is None and time.monotonic() < deadline:  # kill w1 in the middle of a job's search
        with session_scope(store.engine) as s:  # (its run exists once the trial worker is set up)
            victim_job = s.scalar(select(Job.id).join(TuningRun, TuningRun.job_id == Job.id)
                                  .where(Job.worker == "w1", Job.state == "running", TuningRun.status == "running"))
        time.sleep(0.05)
    assert victim_job is not None, "w1 never started a job"
    os.killpg(procs["w1"].pid, signal.SIGKILL)  # the worker and its trial process, no chance to clean up
    procs["w1"].wait()
    for name in ("w2", "w3"):
        assert procs[name].wait(timeout=max(1, deadline - time.monotonic())) == 0, logs[name].seek(0) or logs[name].read()

    with session_scope(store.engine) as s:
        rows = {j.id: j for j in s.scalars(select(Job))}
        runs = list(s.scalars(select(TuningRun).order_by(TuningRun.id)))
    assert set(rows) == set(jobs)
    assert all(j.state == "done" for j in rows.values()), {j.id: (j.state, j.error) for j in rows.values()}
    done_runs = [r.job_id for r in runs if r.status == "done"]
    assert sorted(done_runs) == sorted(jobs)  # every job done exactly once
    victim = rows[victim_job]
    assert victim.attempts == 2 and victim.worker in ("w2", "w3")
    assert [r.status for r in runs if r.job_id == victim_job] == ["interrupted", "done"], \
        [(r.id, r.status, r.error) for r in runs if r.job_id == victim_job]
    assert all(rows[j].attempts == 1 for j in jobs if j != victim_job)
    with session_scope(store.engine) as s:
        assert len(list(s.scalars(select(BestConfig)))) == 12
    for f in logs.values():
        f.close()


def test_a_trial_worker_is_kept_from_one_problem_to_the_next():
    """A worker's trial process sets each new problem up in place (torch imported, CUDA context made once)."""
    from dataclasses import asdict

    from autotuner.base.device import current_device
    from autotuner.engine.measure.runner import TrialRunner, WorkerSetupError
    from autotuner.engine.measure.trial_process import WorkerSpec

    sm = get_op("softmax")
    first, second = sm.parse_problem("8x64"), sm.parse_problem("16x128")
    runner = TrialRunner(WorkerSpec("softmax", asdict(first), (), None), 60)
    try:
        assert runner.measure(sm.space.default(first, current_device())).status == "ok"
        pid = runner._proc.pid
        runner.use(WorkerSpec("softmax", asdict(second), (), None), 60)
        out = runner.measure(sm.space.default(second, current_device()))
        assert out.status == "ok" and runner._proc.pid == pid and runner.restarts == 0
        # a problem that cannot be set up fails as at a first start, naming why
        runner.use(WorkerSpec("softmax", {**asdict(second), "dtype": "int8"}, (), None), 60)
        with pytest.raises(WorkerSetupError, match="could not set up"):
            runner.measure(sm.space.default(second, current_device()))
    finally:
        runner.close()
