"""The repository and schema on both backends: a real SQLite file and the real PostgreSQL server."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest
from sqlalchemy import select, text

from autotuner.base.registry import get_op
from autotuner.store.database import Store
from db import repository as repo
from db.engine import (
    DatabaseUnavailable,
    NotAutotunerDatabase,
    head_revision,
    make_engine,
    schema_state,
    session_scope,
    upgrade,
)
from tests.support.devices import H100 as GPU


def test_new_database_is_created_at_the_latest_schema(url):
    engine = make_engine(url)
    assert schema_state(engine) == "empty"
    Store(url)  # first use migrates
    assert schema_state(engine) == "current"
    assert upgrade(engine) == "current"
    with engine.connect() as conn:
        assert conn.execute(text("select version_num from alembic_version")).scalar() == head_revision()


def test_runs_trials_and_best_configs_round_trip(url):
    store = Store(url)
    op = get_op("matmul")
    problem = op.parse_problem("4096x4096x4096")
    run_id = store.start_run(op=op, problem=problem, device=GPU, strategy="tpe", budget_trials=10,
                             budget_seconds=None, clock="cuda-events")
    cfg = op.space.default(problem, GPU)
    tid = store.record_trial(run_id=run_id, config=cfg, config_key="k1", status="ok", median_ms=0.25, p20_ms=0.24,
                             p80_ms=0.26, compile_s=1.5)
    store.record_trial(run_id=run_id, config=cfg, config_key="k2", status="out_of_resources", error="smem")
    store.set_retimed(trial_id=tid, retimed_ms=0.251)
    store.finish_run(run_id=run_id, status="done")
    assert store.save_best(op=op, problem=problem, device=GPU, config=cfg, median_ms=0.251, default_ms=0.3,
                           torch_ms=0.2, run_id=run_id)
    with session_scope(store.engine) as s:
        run = repo.get_run(s, run_id=run_id)
        assert run is not None and run.status == "done" and run.device.key == GPU.key
        assert [t.status for t in run.trials] == ["ok", "out_of_resources"]
        assert run.trials[0].retimed_ms == 0.251 and run.trials[0].p80_ms == 0.26
        assert [d.key for d in repo.list_devices(s)] == [GPU.key]
    best = store.best(op=op, problem=problem, device=GPU)
    assert best is not None and best.config == cfg and best.median_ms == 0.251 and not best.stale


def test_stale_when_kernel_hash_or_triton_differs(url):
    store = Store(url)
    op = get_op("softmax")
    problem = op.parse_problem("4096x4096")
    device_id = store.device_id(GPU)
    with session_scope(store.engine) as s:
        repo.save_best(s, op="softmax", problem_key=problem.key, problem={"rows": 4096, "cols": 4096, "dtype": "float16"},
                       device_id=device_id, kernel_hash="0123456789abcdef", triton_version="0.0.1",
                       config={"BLOCK_N": 4096, "ROWS": 1, "num_warps": 8, "num_stages": 1}, median_ms=0.1,
                       default_ms=None, torch_ms=None, run_id=None)
    best = store.best(op=op, problem=problem, device=GPU)
    assert best is not None and best.stale
    assert "kernel source changed" in (best.stale_reason or "") and "Triton version differs" in (best.stale_reason or "")
    assert store.nearest(op=op, problem=op.parse_problem("2048x4096"), device=GPU) == []  # stale is never a warm start


def test_nearest_prefers_same_n_and_k_for_matmul(url):
    store = Store(url)
    op = get_op("matmul")
    for shape, ms in (("4096x4096x4096", 1.0), ("64x4096x4096", 0.1), ("128x1024x1024", 0.1)):
        p = op.parse_problem(shape)
        store.save_best(op=op, problem=p, device=GPU, config=op.space.default(p, GPU), median_ms=ms, default_ms=None,
                        torch_ms=None, run_id=None)
    near = store.nearest(op=op, problem=op.parse_problem("100x4096x4096"), device=GPU)
    assert [p.key for p, _ in near] == ["64x4096x4096:float16", "4096x4096x4096:float16", "128x1024x1024:float16"]
    assert store.nearest(op=op, problem=op.parse_problem("100x4096x4096", "bfloat16"), device=GPU) == []


def test_sqlite_foreign_file_and_newer_schema_are_refused_untouched(tmp_path):
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as con:
        con.execute("create table t (x int)")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database at all" * 100)
    for path, error in ((foreign, NotAutotunerDatabase), (garbage, DatabaseUnavailable)):
        before = path.read_bytes()
        with pytest.raises(error):
            Store(f"sqlite:///{path}")
        assert path.read_bytes() == before
    newer = tmp_path / "newer.db"
    Store(f"sqlite:///{newer}")
    with sqlite3.connect(newer) as con:
        con.execute("update alembic_version set version_num = '9999_from_the_future'")
    before = newer.read_bytes()
    with pytest.raises(NotAutotunerDatabase, match="newer than this autotuner knows"):
        upgrade(make_engine(f"sqlite:///{newer}"))
    assert newer.read_bytes() == before


def test_dead_postgres_is_a_clear_error():
    with pytest.raises(DatabaseUnavailable, match="cannot open the database"):
        schema_state(make_engine("postgresql+psycopg://postgres@127.0.0.1:1/nothing"))


def test_save_best_and_a_tuning_claim_say_whether_they_wrote(url):
    """Both answer from RETURNING: an INSERT .. ON CONFLICT's rowcount is -1 under some drivers (psycopg 3)."""
    store = Store(url)
    op = get_op("softmax")
    problem = op.parse_problem("64x64")
    cfg = op.space.default(problem, GPU)
    assert store.save_best(op=op, problem=problem, device=GPU, config=cfg, median_ms=1.0, default_ms=None,
                           torch_ms=None, run_id=None)
    assert not store.save_best(op=op, problem=problem, device=GPU, config=cfg, median_ms=2.0, default_ms=None,
                               torch_ms=None, run_id=None)  # slower: not written
    assert store.claim_tuning(op="k", problem_key="p", device_key="d", owner="a", lease_s=60)
    assert not store.claim_tuning(op="k", problem_key="p", device_key="d", owner="b", lease_s=60)
    store.release_tuning(op="k", problem_key="p", device_key="d", owner="a")
    assert store.claim_tuning(op="k", problem_key="p", device_key="d", owner="b", lease_s=60)


def test_the_migrations_build_the_models_schema(url):
    """Alembic's head and the SQLAlchemy models agree (tables, columns, indexes, foreign keys; column types on PostgreSQL,
    SQLite not enforcing VARCHAR lengths, so its widened columns keep their first declared length)."""
    from alembic import command
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from db.engine import _alembic_config
    from db.models import Base

    engine = make_engine(url)
    with engine.begin() as conn:  # every migration, from nothing (a new database is made from the models)
        command.upgrade(_alembic_config(conn), "head")
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": engine.dialect.name != "sqlite"})
        assert compare_metadata(ctx, Base.metadata) == []


def test_head_is_the_newest_migration():
    """db.engine.HEAD lets a database at the newest schema open without loading Alembic: it must name it."""
    from db.engine import HEAD

    assert HEAD == head_revision()


def test_rejection_rows_of_an_old_database_are_folded_into_counts(url):
    """Migration 0005: a run's `invalid`, never-timed trial rows (one per rejected config) become the run's
    counts per reason and are deleted; measured and failed trials stay."""
    from alembic import command

    from db.engine import _alembic_config, open_engine
    from db.models import Trial, TuningRun

    engine = make_engine(url)
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0004")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO devices (id, key, name, capability, sm_count, total_memory, smem_per_block,"
                          " created_at) VALUES (1, 'd', 'd', '9.0', 132, 1, 232448, '2026-01-01 00:00:00')"))
        conn.execute(text("INSERT INTO tuning_runs (id, op, problem_key, problem, device_id, kernel_hash, "
                          "triton_version, torch_version, strategy, clock, status, started_at) VALUES (7, 'matmul',"
                          " 'p', '{}', 1, 'h', '3.6.0', '2.11', 'tpe', 'cuda_events', 'done', '2026-01-01 00:00:00')"))
        rows = [("ok", 0.5, None), ("compile_error", None, "boom"),
                ("invalid", None, "shared memory 262144 B (pipeline) exceeds the device's 232448 B per block"),
                ("invalid", None, "shared memory 393216 B (pipeline) exceeds the device's 232448 B per block; "
                                  "8 warps for a 16x16 tile leave 4 outputs per thread (need >= 8)"),
                ("invalid", None, "GROUP_M=8 has no effect with one row of tiles (M=16, BLOCK_M=16)")]
        for i, (status, ms, error) in enumerate(rows):
            conn.execute(text("INSERT INTO trials (run_id, config, config_key, status, median_ms, error, created_at)"
                              " VALUES (7, '{}', :k, :s, :ms, :e, '2026-01-01 00:00:00')"),
                         {"k": f"c{i}", "s": status, "ms": ms, "e": error})
    engine.dispose()
    migrated = open_engine(url)
    with session_scope(migrated) as s:
        run = s.get(TuningRun, 7)
        assert run is not None and run.rejected == 3
        assert run.rejections == {
            "shared memory N B (pipeline) exceeds the device's N B per block": {
                "count": 2, "example": "shared memory 262144 B (pipeline) exceeds the device's 232448 B per block"},
            "GROUP_M=N has no effect with one row of tiles (M=N, BLOCK_M=N)": {
                "count": 1, "example": "GROUP_M=8 has no effect with one row of tiles (M=16, BLOCK_M=16)"}}
        assert sorted(t.status for t in s.scalars(select(Trial))) == ["compile_error", "ok"]


def test_a_schema_being_made_is_never_seen_half_made_and_is_waited_for(tmp_path):
    """A new database's tables and revision are written in one transaction under SQLite's write lock: another
    process opening the file meanwhile sees no tables at all, then waits for the lock and finds the schema made
    (the driver commits each CREATE TABLE on its own unless a transaction is begun by hand; such a process saw
    the tables without their revision and refused the file as foreign)."""
    import threading
    import time

    from db.engine import _create_at_head, _migration_lock

    path = tmp_path / "new.db"
    maker = make_engine(f"sqlite:///{path}")
    made, go_on = threading.Event(), threading.Event()

    def make_slowly() -> None:
        with _migration_lock(maker) as conn:
            _create_at_head(conn)
            made.set()
            go_on.wait(30)
            time.sleep(0.5)

    thread = threading.Thread(target=make_slowly)
    thread.start()
    try:
        assert made.wait(30)
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
            assert c.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall() == []
        started = time.monotonic()
        go_on.set()
        # waits for the maker's commit, then finds the schema made: `autotuner db upgrade` says "already current"
        waiter = make_engine(f"sqlite:///{path}")
        assert upgrade(waiter) == "current"
        assert time.monotonic() - started >= 0.5
        waiter.dispose()
    finally:
        go_on.set()
        thread.join()
        maker.dispose()
    Store(f"sqlite:///{path}").ping()
    with closing(sqlite3.connect(path)) as c:
        assert c.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)


def _open_each(urls: list[str], barrier) -> None:  # type: ignore[no-untyped-def]
    from db.engine import open_engine

    for url in urls:
        barrier.wait(60)
        open_engine(url).dispose()


def _made_at(url: str, revision: str) -> None:
    """A database at an old revision, made by its migrations."""
    from alembic import command

    from db.engine import _alembic_config

    engine = make_engine(url)
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), revision)
    engine.dispose()


def _opened_at_once(urls: list[str], processes: int = 4) -> list[int | None]:
    """Each database opened by `processes` new processes at the same moment, one database after another; their
    exit codes (a process still running after four minutes is killed, and counts as None)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    procs = [ctx.Process(target=_open_each, args=(urls, barrier)) for _ in range(processes)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(240)
        return [p.exitcode for p in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


def test_processes_opening_new_and_old_databases_at_the_same_moment_all_open_them(tmp_path):
    """Four processes open each of thirty new files, then five files at an old revision, at the same moment (a
    fleet's workers started together): every open succeeds, and every file is at the newest revision once."""
    from db.engine import HEAD

    new = [tmp_path / f"new{i}.db" for i in range(30)]
    old = [tmp_path / f"old{i}.db" for i in range(5)]
    for path in old:
        _made_at(f"sqlite:///{path}", "0004")
    assert _opened_at_once([f"sqlite:///{p}" for p in new + old]) == [0, 0, 0, 0]
    for path in new + old:
        with closing(sqlite3.connect(path)) as c:
            assert c.execute("SELECT version_num FROM alembic_version").fetchall() == [(HEAD,)]


@pytest.mark.postgres
def test_processes_opening_new_and_old_postgres_databases_at_the_same_moment_all_open_them():
    """The same on PostgreSQL (its advisory lock): three new databases, then one at an old revision."""
    from contextlib import ExitStack

    from db.engine import HEAD
    from tests.conftest import _fresh_pg_database

    with ExitStack() as stack:
        urls = [stack.enter_context(_fresh_pg_database()) for _ in range(4)]
        _made_at(urls[-1], "0004")
        assert _opened_at_once(urls) == [0, 0, 0, 0]
        for url in urls:
            engine = make_engine(url)
            with engine.connect() as conn:
                assert conn.execute(text("SELECT version_num FROM alembic_version")).all() == [(HEAD,)]
            engine.dispose()
