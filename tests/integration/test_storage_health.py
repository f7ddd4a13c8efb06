"""Storage that vanishes or fails under a running service or worker is seen (db.health): `/healthz` fails with the
cause, writes answer 503 with it and nothing is accepted that could not be kept; `serve` refuses a file that is
not a database, a port in use and a missing extra with one line each. Real server processes, real SQLite files."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys

import pytest

from autotuner.store.database import Store
from tests.integration.test_api import TOKEN
from tests.support.server import running_server

AUTH = {"Authorization": f"Bearer {TOKEN}"}
JOB = {"op": "softmax", "shape": "4x8", "dtype": "float16"}


def _jobs(path) -> int:
    import sqlite3

    with sqlite3.connect(path) as c:
        return int(c.execute("select count(*) from jobs").fetchone()[0])


def _unusable(client, words: str) -> None:
    health = client.get("/healthz")
    assert health.status_code == 503 and words in health.json()["detail"], health.text
    posted = client.post("/jobs", json=JOB, headers=AUTH)
    assert posted.status_code == 503 and words in posted.json()["detail"], posted.text
    assert client.get("/results").status_code in (200, 503)  # reads go on where they still can


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "a.db"
    Store(f"sqlite:///{path}")
    return path


def test_a_database_deleted_under_the_service_is_seen_and_nothing_is_accepted(db):
    with running_server(f"sqlite:///{db}", AUTOTUNER_TOKEN=TOKEN) as client:
        assert client.get("/healthz").json()["status"] == "ok"
        assert client.post("/jobs", json=JOB, headers=AUTH).status_code == 202
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(f"{db}{suffix}"):
                os.unlink(f"{db}{suffix}")
        _unusable(client, "deleted")
        assert not db.exists()  # no new, empty file made in its place


def test_a_database_replaced_under_the_service_is_seen(db, tmp_path):
    other = tmp_path / "other.db"
    Store(f"sqlite:///{other}")
    with running_server(f"sqlite:///{db}", AUTOTUNER_TOKEN=TOKEN) as client:
        assert client.get("/healthz").status_code == 200
        os.replace(other, db)
        _unusable(client, "replaced")


def test_a_database_overwritten_under_the_service_is_corrupt(db):
    import sqlite3

    with running_server(f"sqlite:///{db}", AUTOTUNER_TOKEN=TOKEN) as client:
        assert client.post("/jobs", json=JOB, headers=AUTH).status_code == 202
        with sqlite3.connect(db) as c:  # the log folded into the file, so no later checkpoint rewrites its header
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with open(db, "r+b") as f:
            f.write(b"not a database! " * 8)
        _unusable(client, "corrupt")


def test_a_read_only_database_refuses_writes_with_the_cause(db):
    with running_server(f"sqlite:///file:{db}?mode=ro&uri=true", AUTOTUNER_TOKEN=TOKEN) as client:
        _unusable(client, "read-only")
        assert client.get("/results").status_code == 200
    assert _jobs(db) == 0


def test_a_full_disk_refuses_writes_with_the_cause(db):
    free_mb = shutil.disk_usage(db.parent).free // 2**20
    with running_server(f"sqlite:///{db}", AUTOTUNER_TOKEN=TOKEN, AUTOTUNER_MIN_FREE_MB=str(free_mb + 2**20)) as client:
        _unusable(client, "full")
    assert _jobs(db) == 0


def _serve(*args: str, env: dict[str, str] | None = None, code: str | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "autotuner"]
    return subprocess.run([*argv, "serve", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_serve_refuses_a_file_that_is_not_a_database_in_one_line(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 50)
    done = _serve("--db", f"sqlite:///{path}", "--port", "1")
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 2, done.stderr
    assert path.read_text().startswith("these are my notes")  # untouched


def test_serve_names_a_port_in_use(db):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve("--db", f"sqlite:///{db}", "--port", str(port))
    assert done.returncode == 2 and f"port {port} on 127.0.0.1 is in use" in done.stderr, done.stderr
    assert "Errno" not in done.stderr and "Traceback" not in done.stderr


def test_serve_without_the_server_extra_names_it(db):
    code = ("import sys; sys.modules['uvicorn'] = None; sys.argv = ['autotuner'] + sys.argv[1:]; "
            "from autotuner.cli import main; main()")
    done = _serve("--db", f"sqlite:///{db}", code=code)
    assert done.returncode == 4, done.stderr
    assert "pip install 'autotuner[server]'" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_worker_stops_when_its_database_is_deleted(db, tmp_path):
    from autotuner.base.settings import Settings
    from autotuner.worker.loop import Worker
    from db.health import StorageLost

    worker = Worker(Settings(db_url=f"sqlite:///{db}", poll_s=0.1), name="w")
    assert worker.run(until_empty=True) == 0
    db.unlink()
    with pytest.raises(StorageLost, match="deleted"):
        worker.run(until_empty=True)
    assert not db.exists()


@contextlib.contextmanager
def _pg_role(pg_url: str, *grants: str):
    """The database at `pg_url` (its schema made by its owner) as a new login role that holds only `grants` (SQL
    with {role} for the role's name): that role's URL, the role dropped afterwards."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    Store(pg_url)
    role = f"ro_{uuid.uuid4().hex[:8]}"
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"CREATE ROLE {role} LOGIN"))
        for grant in grants:
            c.execute(text(grant.format(role=role)))
    try:
        yield make_url(pg_url).set(username=role).render_as_string(hide_password=False)
    finally:
        with admin.connect() as c:
            c.execute(text(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}"))
            c.execute(text(f"DROP OWNED BY {role}"))
            c.execute(text(f"DROP ROLE {role}"))
        admin.dispose()


def test_a_postgresql_database_that_takes_no_writes_is_seen(pg_url):
    with _pg_role(pg_url, "ALTER ROLE {role} SET default_transaction_read_only = on",
                  "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}") as reader:
        assert Store(pg_url).health() is None
        assert "accepts no writes" in (Store(reader).health() or "")
        with running_server(reader, AUTOTUNER_TOKEN=TOKEN) as client:
            _unusable(client, "accepts no writes")


def test_a_health_check_keeps_sqlites_locks_so_another_readers_close_loses_nothing(db):
    """POSIX drops every fcntl lock a process holds on a file when any descriptor of it closes: a health check that
    opened the file itself let another process's closing connection take itself for the last one, fold and delete
    the write-ahead log this process went on writing to, and every later write here was lost."""
    from sqlalchemy import text

    from autotuner.store.database import Store
    from db.health import file_identity, storage_problem

    store = Store(f"sqlite:///{db}")
    store.queue_job(op="softmax", shape="4x8", dtype="float16", options={})
    held = store.engine.connect()  # a pooled connection, as a service holds one
    held.execute(text("select count(*) from jobs")).scalar()
    held.commit()
    assert storage_problem(store.engine, file_identity(store.engine)) is None
    reader = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('select count(*) from jobs'); c.close()"
    subprocess.run([sys.executable, "-c", reader, str(db)], check=True, timeout=60)
    assert os.path.exists(f"{db}-wal")  # this process's connection still counts
    store.queue_job(op="softmax", shape="4x16", dtype="float16", options={})
    held.close()
    counted = subprocess.run([sys.executable, "-c", f"import sqlite3; print(sqlite3.connect({str(db)!r})"
                              ".execute('select count(*) from jobs').fetchone()[0])"],
                             capture_output=True, text=True, check=True, timeout=60)
    assert counted.stdout.strip() == "2"


@pytest.mark.postgres
def test_a_postgresql_role_that_cannot_write_fails_health_and_writes_with_503(pg_url):
    with _pg_role(pg_url, "GRANT USAGE ON SCHEMA public TO {role}",
                  "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}") as reader:
        with running_server(reader, AUTOTUNER_TOKEN=TOKEN) as client:
            _unusable(client, "may not write")
