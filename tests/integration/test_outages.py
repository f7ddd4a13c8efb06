"""The service and the workers against a database that stalls or vanishes, hostile requests and impossible
problems (issue 20). Outages are real: the real PostgreSQL server behind a TCP proxy the test stops, freezes
and brings back (tests/support/tcp_proxy.py); the service and the workers are real processes.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from autotuner.base.settings import Settings
from autotuner.store.database import Store
from db.engine import session_scope
from db.models import BestConfig, Job, Trial, TuningRun
from tests.conftest import PG_URL
from tests.integration.test_api import TOKEN, seed
from tests.support.server import running_server
from tests.support.tcp_proxy import TcpProxy, url_through

AUTH = {"Authorization": f"Bearer {TOKEN}"}
PG = make_url(PG_URL)
FAST = {"AUTOTUNER_HEARTBEAT_S": "0.5", "AUTOTUNER_LEASE_S": "3", "AUTOTUNER_POLL_S": "0.2",
        "AUTOTUNER_DB_TIMEOUT_S": "2", "AUTOTUNER_PLUGINS": json.dumps(["tests.support.paced_op", "tests.support.faulty_op"])}


def _proxy() -> TcpProxy:
    return TcpProxy(PG.host or "127.0.0.1", PG.port or 5432)


def _worker(url: str, name: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "autotuner", "worker", "--once", "--name", name, "--db", url],
                            env={**os.environ, **FAST, **env}, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_for(what: str, check, timeout: float = 120.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _queue_paced(store: Store) -> int:
    """A job of ten configs of known times (25-95 ms each: tests/support/paced_op.py), long enough to interrupt."""
    return store.queue_job(op="paced_many", shape="64", dtype="float32", options={"approximate": "tanh"},
                           strategy="exhaustive", budget_trials=10)


def _trials(store: Store, run_id: int) -> list[Trial]:
    with session_scope(store.engine) as s:
        return list(s.scalars(select(Trial).where(Trial.run_id == run_id)))


def _run_of(store: Store, job_id: int) -> TuningRun | None:
    with session_scope(store.engine) as s:
        return s.scalar(select(TuningRun).where(TuningRun.job_id == job_id).order_by(TuningRun.id.desc()))


# -- 1. a database outage in the middle of a job ----------------------------------------------------------------

@pytest.mark.postgres
@pytest.mark.timeout(300)
@pytest.mark.parametrize("outage", ["stop", "freeze"])
def test_a_worker_rides_out_a_database_outage_in_the_middle_of_a_job(pg_url, tmp_path, outage):
    """The database goes away for 6 s while trials are being written: the worker neither dies nor loses a
    trial; it keeps them in memory, writes them when the database is back, and finishes the job."""
    import tests.support.paced_op as paced

    store = Store(pg_url)
    job_id = _queue_paced(store)
    with _proxy() as proxy:
        log = tmp_path / "worker.log"
        proc = _worker(url_through(pg_url, proxy), "w1", log)
        run = _wait_for("the run's second trial", lambda: (r := _run_of(store, job_id)) and
                        len(_trials(store, r.id)) >= 2 and r)
        getattr(proxy, outage)()
        time.sleep(6)
        during = len(_trials(store, run.id))
        proxy.resume()
        assert proc.wait(180) == 0, log.read_text()
    text = log.read_text()
    assert "keeping trials in memory" in text or "retrying" in text, text
    with session_scope(store.engine) as s:
        job = s.get(Job, job_id)
        final = s.get(TuningRun, run.id)
        assert job is not None and final is not None
        assert job.state == "done" and job.attempts == 1 and job.run_id == run.id, (job.state, job.error)
        assert final.status == "done"
        trials = list(s.scalars(select(Trial).where(Trial.run_id == run.id)))
        best = s.scalar(select(BestConfig).where(BestConfig.run_id == run.id))
    assert len(trials) == 10 and all(t.status == "ok" for t in trials)  # every measured trial, none lost
    assert during < 10  # some of them were measured while the database was away
    assert best is not None and best.config["PAUSE_US"] == paced.MANY_FASTEST_US


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_a_worker_gives_the_job_back_when_the_database_does_not_return(pg_url, tmp_path):
    store = Store(pg_url)
    job_id = _queue_paced(store)
    with _proxy() as proxy:
        log = tmp_path / "worker.log"
        proc = _worker(url_through(pg_url, proxy), "w1", log, AUTOTUNER_DB_RETRY_S="3")
        _wait_for("the run's first trial", lambda: (r := _run_of(store, job_id)) and _trials(store, r.id))
        proxy.stop()
        assert proc.wait(90) == 0, log.read_text()  # it gave up on the job, and said so; it did not crash
    text = log.read_text()
    assert "stayed unavailable" in text and "Traceback" not in text, text
    with session_scope(store.engine) as s:
        job = s.get(Job, job_id)
        assert job is not None and job.state == "running" and job.worker == "w1"  # its lease will give it back
    assert store.requeue_stale(older_than=_utc_in(10), max_attempts=3) == [(job_id, "queued")]


def _utc_in(seconds: float):  # type: ignore[no-untyped-def]
    from datetime import timedelta

    from db.models import utcnow

    return utcnow() + timedelta(seconds=seconds)


# -- 8. a job taken back from its worker ------------------------------------------------------------------------

@pytest.mark.postgres
@pytest.mark.timeout(180)
def test_a_worker_that_lost_its_job_stops_at_once_and_writes_no_result(pg_url, tmp_path):
    """Worker A's database freezes past its lease; the job is taken back and given to B. When A's database
    returns, A learns it at its next heartbeat, stops tuning at once (its run is `interrupted`, not `done`), and
    nothing A measured becomes a stored best."""
    store = Store(pg_url)
    job_id = _queue_paced(store)
    with _proxy() as proxy:
        log = tmp_path / "a.log"
        proc = _worker(url_through(pg_url, proxy), "A", log)
        run = _wait_for("A's first trial", lambda: (r := _run_of(store, job_id)) and _trials(store, r.id) and r)
        proxy.freeze()
        time.sleep(4)  # past the 3 s lease
        assert store.requeue_stale(older_than=_utc_in(-3), max_attempts=3) == [(job_id, "queued")]
        taken, _ = store.claim_job("B")
        assert taken is not None and taken.id == job_id
        proxy.resume()
        started = time.monotonic()
        assert proc.wait(60) == 0, log.read_text()
        stopped_in = time.monotonic() - started
    text = log.read_text()
    assert "taken back" in text, text
    assert stopped_in < 15  # at its next heartbeat, not after the remaining trials (~0.5 s each, and retries)
    with session_scope(store.engine) as s:
        mine = s.get(TuningRun, run.id)
        job = s.get(Job, job_id)
        bests = list(s.scalars(select(BestConfig)))
        assert mine is not None and mine.status == "interrupted"
        assert job is not None and job.worker == "B" and job.state == "running"
    assert bests == []  # A stored nothing as the job's result


# -- 3. a database that stalls, for the service ---------------------------------------------------------------

ROUTES = ["/config?op=softmax&shape=512x200&device=NVIDIA%20H100%2080GB%20HBM3%20(sm_90)", "/results", "/results/1",
          "/devices", "/jobs", "/jobs/1", "/healthz", "/", "/ui/queue", "/ui/results/1"]


def _get_all(client: httpx.Client, paths: list[str]) -> dict[str, tuple[int, float, str]]:
    def one(path: str) -> tuple[int, float, str]:
        t = time.monotonic()
        r = client.get(path)
        return r.status_code, time.monotonic() - t, r.text

    with concurrent.futures.ThreadPoolExecutor(len(paths)) as pool:
        return dict(zip(paths, pool.map(one, paths), strict=True))


@pytest.mark.postgres
@pytest.mark.timeout(180)
def test_the_service_answers_503_within_seconds_while_the_database_stalls_or_is_gone(pg_url):
    seed(pg_url)
    cached = "/config?op=matmul&shape=4096x4096x4096&device=NVIDIA%20H100%2080GB%20HBM3%20(sm_90)"
    with _proxy() as proxy, running_server(url_through(pg_url, proxy), AUTOTUNER_TOKEN=TOKEN,
                                           AUTOTUNER_CONFIG_CACHE_S="1", AUTOTUNER_DB_TIMEOUT_S="2",
                                           AUTOTUNER_REQUEST_TIMEOUT_S="4") as client:
        client.timeout = httpx.Timeout(30)
        warm = client.get(cached)
        assert warm.status_code == 200 and warm.json()["source"] == "exact"
        for outage in ("freeze", "stop"):
            getattr(proxy, outage)()
            time.sleep(1.2)  # past the cache's 1 s: the cached answer must be refreshed, and cannot be
            answers = _get_all(client, ROUTES)
            post = client.post("/jobs", headers=AUTH, json={"op": "softmax", "shape": "64x64"})
            for path, (status, took, body) in [*answers.items(), ("POST /jobs", (post.status_code, 0.0, post.text))]:
                assert status == 503, (outage, path, status, body[:300])
                assert took < 6.5, (outage, path, took)  # a few seconds, never a hang
                assert str(proxy.port) not in body and "psycopg" not in body and "127.0.0.1" not in body, body
            for _ in range(3):  # the answer seen before the outage is still served, marked as such
                hit = client.get(cached)
                assert hit.status_code == 200 and hit.json() == warm.json()
                assert hit.headers["x-autotuner-cache"] == "stale"
                time.sleep(0.5)
            proxy.resume()
            back = _wait_for("the service to answer again",
                             lambda: all(s == 200 for s, _, _ in _get_all(client, ROUTES[1:4]).values()), 30)
            assert back
            assert client.get(cached).status_code == 200


# -- 2, 4. hostile requests, through real uvicorn -------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'h.db'}"
    seed(url)
    with running_server(url, AUTOTUNER_TOKEN=TOKEN) as client:
        yield client


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_get_a_422_whose_detail_is_json(server, number):
    raw = '{"op": "softmax", "shape": "64x64", "time_budget_s": ' + number + "}"
    r = server.post("/jobs", content=raw, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "finite_number", r.text
    unauthenticated = server.post("/jobs", content=raw, headers={"Content-Type": "application/json"})
    assert unauthenticated.status_code == 401
    assert server.get("/healthz").status_code == 200  # the connection and the server are fine


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_large_body_is_refused_before_it_is_read_and_the_token_comes_first(server):
    pid = server.server_pid
    before = _rss_kb(pid)
    host, port = server.base_url.host, server.base_url.port
    for headers, want in (("", b"401"), (f"Authorization: Bearer {TOKEN}\r\n", b"413")):
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(f"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}"
                         f"Content-Length: {200 * 2**20}\r\n\r\n".encode())
            sent = 0
            chunk = b"x" * 2**20
            try:
                for _ in range(200):  # the answer comes before the body is read; sending may then be cut
                    sock.sendall(chunk)
                    sent += len(chunk)
                    sock.settimeout(0.001)
                    try:
                        if sock.recv(1, socket.MSG_PEEK):
                            break
                    except (BlockingIOError, TimeoutError):
                        pass
                    sock.settimeout(10)
            except (BrokenPipeError, ConnectionResetError):
                pass
            sock.settimeout(10)
            answer = sock.recv(4096)
        assert answer.split(b" ")[1] == want, answer[:200]
        assert sent < 100 * 2**20  # refused long before the 200 MB were sent
    assert _rss_kb(pid) - before < 50_000  # the server held none of it (KB)
    # a body over the limit with its length declared: 413 at once; chunked: 413 once the limit is passed
    big = {"op": "softmax", "shape": "64x64", "strategy": "tpe", "pad": "x" * 20_000}
    assert server.post("/jobs", json=big, headers=AUTH).status_code == 413

    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(40):
            yield b" " * 1024

    streamed = server.post("/jobs", content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
    assert streamed.status_code == 413
    assert server.post("/jobs", json={"op": "softmax", "shape": "64x64"}, headers=AUTH).status_code == 202


# -- 5. impossible problems ------------------------------------------------------------------------------------

def test_problems_no_device_could_hold_are_refused_naming_the_limit(server):
    """The schema admits them (it bounds each dimension, not their product): a 409 naming the limit, not the 422
    of a request the schema refuses."""
    for body, named in (({"op": "softmax", "shape": "999999999x999999999"}, "32-bit offsets"),
                        ({"op": "gelu", "shape": "65536x65536"}, "32-bit offsets"),
                        ({"op": "attention", "shape": "1x1x99999999x64"}, "32-bit offsets"),
                        ({"op": "matmul", "shape": "44000x44000x44000", "dtype": "float32"},
                         "largest device this service knows")):
        r = server.post("/jobs", json=body, headers=AUTH)
        assert r.status_code == 409, r.text
        detail = r.json()["detail"][0]
        assert detail["loc"] == ["body", "shape"] and named in detail["msg"] and "smaller shape" in detail["msg"]
    heads = server.post("/jobs", json={"op": "attention", "shape": "1x6x4x1024x64"}, headers=AUTH)
    assert heads.status_code == 409 and "multiple of the key/value heads" in heads.json()["detail"][0]["msg"]
    # what an 80 GB H100 holds (the seeded device) is accepted
    assert server.post("/jobs", json={"op": "softmax", "shape": "60000x30000"}, headers=AUTH).status_code == 202


def test_a_job_whose_inputs_cannot_be_allocated_fails_once_with_a_plain_reason(tmp_path):
    from autotuner.worker.loop import Worker

    url = f"sqlite:///{tmp_path / 'oom.db'}"
    store = Store(url)
    job_id = store.queue_job(op="huge", shape="10000000", dtype="float32", options={"approximate": "tanh"})
    Worker(Settings(db_url=url, plugins=["tests.support.faulty_op"], heartbeat_s=0.5, lease_s=3, poll_s=0.2)).run(once=True)
    with session_scope(store.engine) as s:
        job = s.get(Job, job_id)
    assert job is not None and job.state == "failed" and job.attempts == 1
    assert job.error.startswith("the problem's inputs could not be allocated on this device: out of memory "
                                "(tried to allocate 10000.0 GB)"), job.error


# -- 6, 7 and the smaller points --------------------------------------------------------------------------------

def test_options_are_parsed_strictly(server):
    dev = {"device": "NVIDIA H100 80GB HBM3 (sm_90)"}
    for value in ("no", "0", "False ", "yes"):
        r = server.get("/config", params={"op": "attention", "shape": "1x8x1024x64", "causal": value, **dev})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "causal"], (value, r.text)
    assert server.get("/config", params={"op": "attention", "shape": "1x8x1024x64", "causal": "false",
                                         **dev}).json()["problem"]["causal"] is False
    for value in ("false", "no", 0, 1, None):
        r = server.post("/jobs", headers=AUTH, json={"op": "attention", "shape": "1x8x1024x64",
                                                     "options": {"causal": value}})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "causal", (value, r.text)
    r = server.post("/jobs", headers=AUTH, json={"op": "attention", "shape": "1x8x1024x64",
                                                 "options": {"causal": False}})
    assert r.status_code == 202 and r.json()["options"]["causal"] is False


def test_settings_are_checked_at_start_up():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="shorter than 3 heartbeats"):
        Settings(heartbeat_s=10, lease_s=20)
    assert Settings(heartbeat_s=10, lease_s=30).lease_s == 30
    assert Settings(token="  s3cret\n").token == "s3cret"  # stripped: a newline from a file is not part of it
    with pytest.raises(ValidationError, match="holds whitespace"):
        Settings(token="two words")
    with pytest.raises(ValidationError, match="empty"):
        Settings(token="   ")
    out = subprocess.run([sys.executable, "-m", "autotuner", "serve", "--port", "1"], capture_output=True, text=True,
                         env={**os.environ, "AUTOTUNER_LEASE_S": "5", "AUTOTUNER_HEARTBEAT_S": "10"}, timeout=60)
    assert out.returncode == 4 and "AUTOTUNER_LEASE_S=5 is shorter than 3 heartbeats" in out.stderr
    assert "Traceback" not in out.stderr


def test_result_detail_pages_its_trials_and_counts_rejections(tmp_path):
    from autotuner.base.registry import get_op
    from tests.integration.test_pages import H100
    from tests.integration.test_pages import seed as seed_pages

    url = f"sqlite:///{tmp_path / 'p.db'}"
    seeded = seed_pages(url)
    rejected = get_op("matmul").space.enumerate(get_op("matmul").parse_problem("4096x4096x4096"), H100).rejected
    with running_server(url) as client:
        first = client.get(f"/results/{seeded['result']}", params={"trials_limit": 5}).json()
        rest = client.get(f"/results/{seeded['result']}", params={"trials_limit": 5, "trials_offset": 5}).json()
    assert first["trials_total"] == 8 and len(first["trials"]) == 5 and len(rest["trials"]) == 3
    ids = [t["id"] for t in first["trials"] + rest["trials"]]
    assert ids == sorted(ids) and len(set(ids)) == 8  # in the order measured, each once
    assert all(t["status"] != "invalid" for t in first["trials"] + rest["trials"])
    assert first["run"]["rejected"] == len(rejected) > 0
    assert first["run"]["rejections"]["fits_smem"]["count"] == sum("fits_smem" in r.rules for r in rejected)


def test_config_on_a_database_with_no_device_says_so(tmp_path):
    with running_server(f"sqlite:///{tmp_path / 'empty.db'}") as client:
        r = client.get("/config", params={"op": "softmax", "shape": "64x64"})
    assert r.status_code == 404 and "knows no device yet" in r.json()["detail"][0]["msg"]


@pytest.mark.parametrize("name", ["AUTOTUNER_TRIAL_TIMEOUT_S", "AUTOTUNER_DB_TIMEOUT_S"])
@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "-Infinity", "1e300"])
def test_an_endless_or_overflowing_wait_is_refused_in_one_line(name, value, tmp_path):
    out = subprocess.run([sys.executable, "-m", "autotuner", "tune", "softmax", "--shape", "4x8", "--trials", "1",
                          "--db", f"sqlite:///{tmp_path / 'w.db'}"], capture_output=True, text=True,
                         env={**os.environ, name: value}, timeout=120)
    assert out.returncode == 4 and name in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_short_compile_secret_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="shorter than 16"):
        Settings(compile_secret="x")
    assert Settings(compile_secret="0123456789abcdef").compile_secret == "0123456789abcdef"


LIBRARY_CALLS = """
import torch, autotuner
x = torch.randn(4, 8)
for _ in range(3):
    torch.testing.assert_close(autotuner.softmax(x), torch.softmax(x, -1))
print("launched")
"""


@pytest.mark.parametrize("setting, words", [
    ("AUTOTUNER_ON_MISS=bogus", "AUTOTUNER_ON_MISS"),
    ("AUTOTUNER_DB_URL=nonsense://x", "unknown database scheme 'nonsense'"),
    ("AUTOTUNER_DB_URL=sqlite:///{notes}", "not a database")])
def test_a_library_call_says_once_in_one_line_what_it_cannot_use(setting, words, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a database\n" * 100)
    name, value = setting.split("=", 1)
    out = subprocess.run([sys.executable, "-c", LIBRARY_CALLS], capture_output=True, text=True, timeout=120,
                         env={**os.environ, name: value.format(notes=notes)})
    assert out.returncode == 0 and "launched" in out.stdout, out.stderr[-2000:]
    said = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and words in said[0] and "Traceback" not in out.stderr, out.stderr
    assert notes.read_text().startswith("my notes")
