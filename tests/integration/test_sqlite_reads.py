"""A launching process's reads through stdlib sqlite3 (db.sqlite_reads, autotuner.store.lazy.LaunchReads) answer
exactly what the SQLAlchemy path answers, on a real SQLite file holding current, stale and other problems' rows;
anything else opens the full Store; and a process launching a tuned kernel never imports SQLAlchemy."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.store.database import Store
from autotuner.store.lazy import LaunchReads, LazyStore
from db import repository as repo
from db.basics import NoDatabase
from db.engine import session_scope
from db.sqlite_reads import SqliteReads, plain_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def filled(tmp_path):
    """A database with, for softmax 16x100: a current best, a stale one (another kernel hash) and one of another
    Triton version; another problem's best; two runs of trials (one at another kernel hash)."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = Store(url)
    op, device = get_op("softmax"), current_device()
    problem, other = op.parse_problem("16x100", "float32"), op.parse_problem("32x100", "float32")
    store.save_best(op=op, problem=problem, device=device, config={"BLOCK_N": 128, "num_warps": 4}, median_ms=1.5,
                    default_ms=2.0, torch_ms=None, run_id=None)
    store.save_best(op=op, problem=other, device=device, config={"BLOCK_N": 64, "num_warps": 2}, median_ms=0.5,
                    default_ms=None, torch_ms=0.7, run_id=None)
    device_id = store.device_id(device)
    with session_scope(store.engine) as s:
        for kernel_hash, triton_version, ms in (("old-hash", store_triton(), 0.9), (op.kernel_hash, "2.0.0", 0.8)):
            repo.save_best(s, op=op.name, problem_key=problem.key, problem=dataclasses.asdict(problem),
                           device_id=device_id, kernel_hash=kernel_hash, triton_version=triton_version,
                           config={"BLOCK_N": 32, "num_warps": 1}, median_ms=ms, default_ms=None, torch_ms=None,
                           run_id=None)
    run = store.start_run(op=op, problem=problem, device=device, strategy="tpe", budget_trials=4, budget_seconds=None,
                          clock="wall")
    for i, (status, ms) in enumerate((("ok", 1.0), ("wrong_result", None), ("invalid", None), ("ok", 2.0))):
        trial = store.record_trial(run_id=run, config={"BLOCK_N": 32 << i}, config_key=f"k{i}", status=status,
                                   median_ms=ms)
        if i == 3:
            store.set_retimed(trial_id=trial, retimed_ms=1.75)
    again = store.start_run(op=op, problem=problem, device=device, strategy="tpe", budget_trials=1,
                            budget_seconds=None, clock="wall")
    store.record_trial(run_id=again, config={"BLOCK_N": 32}, config_key="k0", status="ok", median_ms=0.95)
    store.record_trial(run_id=again, config={"BLOCK_N": 64}, config_key="k1", status="wrong_result")  # failed again
    with session_scope(store.engine) as s:  # a run at another kernel hash: not this code's trials
        old = repo.start_run(s, op=op.name, problem_key=problem.key, problem=dataclasses.asdict(problem),
                             device_id=device_id, kernel_hash="old-hash", triton_version=store_triton(),
                             torch_version="x", strategy="tpe", budget_trials=1, budget_seconds=None, clock="wall")
        repo.record_trial(s, run_id=old, config={"BLOCK_N": 999}, config_key="k9", status="ok", median_ms=0.1)
    return url, op, device, problem, other


def store_triton():
    import triton

    return triton.__version__


def test_the_reads_answer_as_the_store_does(filled):
    url, op, device, problem, other = filled
    store, reads = Store(url, create=False), SqliteReads.open(url)
    assert reads is not None
    launch = LaunchReads(reads, url, None)
    for p in (problem, other, op.parse_problem("64x100", "float32")):
        for kernel_hash, triton_version in ((None, None), ("old-hash", None), (None, "2.0.0"), ("nothing", "0")):
            expected = store.best(op=op, problem=p, device=device, kernel_hash=kernel_hash, triton_version=triton_version)
            got = launch.best(op=op, problem=p, device=device, kernel_hash=kernel_hash, triton_version=triton_version)
            assert got == expected, (p.key, kernel_hash, triton_version)
        assert launch.trial_times(op=op, problem=p, device=device) == store.trial_times(op=op, problem=p, device=device)
    with session_scope(store.engine) as s:
        rows = repo.find_best_rows(s, op=op.name, device_key=device.key, problem_key=problem.key)
    plain = reads.best_rows(op=op.name, device_key=device.key, problem_key=problem.key)
    assert len(plain) == len(rows) == 3
    for row, p in zip(rows, plain, strict=True):  # every column the reads give, as SQLAlchemy decodes it
        assert vars(p) == {k: getattr(row, k) for k in vars(p)}
    with session_scope(store.engine) as s:  # every problem of the op on the device: the nearest problem's read
        rows = repo.find_best_rows(s, op=op.name, device_key=device.key)
    plain = reads.best_rows(op=op.name, device_key=device.key)
    assert len(plain) == len(rows) == 4
    for row, p in zip(rows, plain, strict=True):
        assert vars(p) == {k: getattr(row, k) for k in vars(p)}
    for near in ("17x100", "30x100", "16x100", "4096x4096"):
        q = op.parse_problem(near, "float32")
        for kernel_hash in (None, "old-hash"):
            assert launch.nearest(op=op, problem=q, device=device, kernel_hash=kernel_hash) == \
                store.nearest(op=op, problem=q, device=device, kernel_hash=kernel_hash), (near, kernel_hash)
    times = launch.trial_times(op=op, problem=problem, device=device)
    assert times == {"k0": ({"BLOCK_N": 32}, 0.95), "k1": ({"BLOCK_N": 64}, None), "k3": ({"BLOCK_N": 256}, 1.75)}
    best = launch.best(op=op, problem=problem, device=device)
    assert best is not None and best.config == {"BLOCK_N": 128, "num_warps": 4} and not best.stale


def test_a_launching_lazy_store_reads_through_sqlite3_and_writes_through_the_store(filled):
    url, op, device, problem, _ = filled
    lazy = LazyStore(url, create=False, retry_s=60)
    store, error = lazy.peek()
    assert isinstance(store, LaunchReads) and error is None
    assert store.nearest(op=op, problem=op.parse_problem("17x100", "float32"), device=device)
    assert store._full is None  # the nearest problem's read needs no SQLAlchemy either
    assert isinstance(lazy.writer(), Store) and lazy.writer() is store.full and lazy.full() is store.full
    assert isinstance(LazyStore(url, create=True, retry_s=60).get(), Store)  # the worker's and the service's


def test_what_the_reads_do_not_cover_opens_the_full_store(tmp_path, filled):
    url = filled[0]
    path = plain_path(url)
    assert path is not None and path.is_file()
    for other in (f"{url}?timeout=5", "sqlite://", "sqlite:///:memory:", "postgresql+psycopg://u@h/db",
                  f"sqlite:///file:{path}?uri=true", "sqlite:///~/x.db"):
        assert plain_path(other) is None, other
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    assert SqliteReads.open(missing) is None
    lazy = LazyStore(missing, create=False, retry_s=60)
    store, error = lazy.peek()
    assert store is None and "NoDatabase" in (error or "")  # said by the Store path, and nothing is created
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(NoDatabase):
        lazy.get()
    with sqlite3.connect(path) as conn:  # a schema this code does not read: the Store path decides (refuses)
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    assert SqliteReads.open(url) is None
    not_db = tmp_path / "not.db"
    not_db.write_text("not a database")
    assert SqliteReads.open(f"sqlite:///{not_db}") is None


def test_a_forked_child_reads_on_a_connection_of_its_own(filled):
    url, op, device, problem, _ = filled
    reads = SqliteReads.open(url)
    assert reads is not None
    reads.best_rows(op=op.name, device_key=device.key, problem_key=problem.key)
    parent = reads._conn
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new connection, the same answer
        try:
            os.close(read)
            rows = reads.best_rows(op=op.name, device_key=device.key, problem_key=problem.key)
            os.write(write, json.dumps([len(rows), reads._conn is not parent]).encode())
        finally:
            os._exit(0)
    os.close(write)  # a child that wrote nothing reads as empty, not as a wait
    os.waitpid(pid, 0)
    answer = os.read(read, 100)
    os.close(read)
    assert json.loads(answer or b"null") == [3, True]


LAUNCH = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from examples.rmsnorm import rms_norm, rms_norm_forward
from autotuner.launch.lookup import resolver
cols = int(sys.argv[2]) if len(sys.argv) > 2 else 64
x, w = torch.randn(4, cols), torch.randn(cols)
y, _ = rms_norm(x, w)
torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
resolver()._join_background()  # the job a miss queues is written on another thread
print(json.dumps({"source": next(iter(rms_norm_forward.sources.values())),
                  "imported": sorted({m.split(".")[0] for m in sys.modules} & {"sqlalchemy", "alembic", "optuna"})}))
"""


def test_a_process_launching_a_tuned_kernel_never_imports_sqlalchemy(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1", "AUTOTUNER_DB_URL": f"sqlite:///{tmp_path / 'k.db'}",
           "AUTOTUNER_KERNEL_CACHE_DIR": str(tmp_path / "kept"), "AUTOTUNER_ON_MISS": "tune"}

    def launch(*args: str):
        out = subprocess.run([sys.executable, "-c", LAUNCH, str(ROOT), *args], env=env, capture_output=True,
                             text=True, timeout=600, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    tuning = launch()
    assert tuning["source"].startswith("tuned here") and "sqlalchemy" in tuning["imported"]
    assert launch() == {"source": "exact (database)", "imported": []}
    # a new key under the nearest policy: the nearest key's winner, and the key queued through sqlite3 too
    env["AUTOTUNER_ON_MISS"] = "nearest"
    near = launch("96")
    assert near["source"].startswith("nearest (n_cols=64") and near["imported"] == [], near
    jobs, _ = Store(env["AUTOTUNER_DB_URL"], create=False).jobs_page(state="queued", limit=5, offset=0)
    assert [(j.op, j.shape, j.kind) for j in jobs] == [("examples.rmsnorm:rms_norm_forward", "n_cols=96", "tune")]
    assert jobs[0].options["call"]["args"]["X_ptr"]["tensor"]["shape"] == [4, 96]


def test_a_job_queued_through_sqlite3_is_the_job_the_store_queues(filled):
    url = filled[0]
    store, reads = Store(url, create=False), SqliteReads.open(url)
    assert reads is not None
    options = {"call": {"args": {"x": {"value": 1.5}}, "grids": {"k": [4, 1]}}}
    ids = [store.queue_job(op="k:m", shape="n=3", dtype="float16", options=options),
           reads.add_job(op="k:m", shape="n=3", dtype="float16", options=options)]
    jobs = [store.job(i) for i in ids]
    assert all(j is not None for j in jobs)
    a, b = (dataclasses.asdict(j) for j in jobs)  # type: ignore[arg-type]
    assert abs((a.pop("created_at") - b.pop("created_at")).total_seconds()) < 60
    assert a.pop("id") != b.pop("id") and a == b
    claimed, _ = store.claim_job("w")  # the worker takes it as any other
    assert claimed is not None and claimed.id == ids[0]


def test_held_rows_are_read_ahead_and_read_again_in_the_background(filled, monkeypatch):
    """`warm` reads what a first nearest lookup reads (a kernel prepared ahead of its launch), so that lookup reads
    nothing; past OP_ROWS_S the held rows answer while the refresh reads them again, and the next lookup sees what
    was stored meanwhile."""
    url, op, device, _, _ = filled
    refreshes: list = []
    launch = LaunchReads(SqliteReads.open(url), url, None, refresh=refreshes.append)
    launch.warm(op)
    read: list = []
    real = launch.reads.best_rows
    monkeypatch.setattr(launch.reads, "best_rows", lambda **kw: read.append(kw) or real(**kw))
    new = op.parse_problem("40x100", "float32")
    assert launch.nearest(op=op, problem=new, device=device)[0][0].key == "32x100:float32"
    assert read == []  # held since `warm`

    Store(url).save_best(op=op, problem=op.parse_problem("44x100", "float32"), device=device,
                         config={"BLOCK_N": 128, "num_warps": 4}, median_ms=0.6, default_ms=None, torch_ms=None,
                         run_id=None)
    launch._reads_held = {k: (0.0, v) for k, (_, v) in launch._reads_held.items()}  # every held read expired
    assert launch.nearest(op=op, problem=new, device=device)[0][0].key == "32x100:float32"  # the held rows answer
    assert read == [] and len(refreshes) == 1
    refreshes.pop()()  # what the background thread runs
    assert len(read) == 1
    assert launch.nearest(op=op, problem=new, device=device)[0][0].key == "44x100:float32"
    assert len(read) == 1 and refreshes == []  # read again, held for the next OP_ROWS_S
