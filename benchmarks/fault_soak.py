"""Fault soak: `autotuner serve` and two workers on one database, SQLite or PostgreSQL, while other processes read it
(the sqlite3 shell, `show`, `export`, `tune --here`), a worker killed with SIGKILL in the middle of a job and
started again, and the service restarted, round after round. Every job the service acknowledged (202) must be done
exactly once and be visible to every process, and every stored run must read back.

    python benchmarks/fault_soak.py --rounds 10                     # SQLite, then PostgreSQL
    python benchmarks/fault_soak.py --backend sqlite --rounds 30

PostgreSQL is the server at AUTOTUNER_TEST_PG_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test), on a
fresh database made for the run. The workers tune small softmax problems on Triton's interpreter (set here where
unset). Prints per backend: jobs acknowledged, done, lost (acknowledged, then missing or not done), done twice (more
than one done run), runs that do not read back, and the readers' commands run and failed. tests/integration/test_fault_injection.py
runs one short soak of each backend in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import Engine, create_engine, text

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("AUTOTUNER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TOKEN = "fault-soak-token"
# a worker's lease is short, so a killed worker's job is taken back within seconds
FAST = {"AUTOTUNER_HEARTBEAT_S": "0.5", "AUTOTUNER_LEASE_S": "2", "AUTOTUNER_POLL_S": "0.2",
        "AUTOTUNER_TOKEN": TOKEN, "AUTOTUNER_CONFIG_CACHE_S": "0"}


@dataclass
class Tally:
    backend: str
    acknowledged: int = 0
    done: int = 0
    lost: list[int] = field(default_factory=list)  # acknowledged, then missing or not done
    duplicated: list[int] = field(default_factory=list)  # more than one done run
    unreadable: list[str] = field(default_factory=list)  # a stored run or result that does not read back
    kills: int = 0
    restarts: int = 0
    reads: int = 0
    read_failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unreadable or self.read_failures) and \
            self.done == self.acknowledged


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Fleet:
    """The service and the workers, each a real process of this checkout, on one database."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url, self.folder = url, folder
        self.env = {**os.environ, **FAST, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.env.setdefault("TRITON_INTERPRET", "1")
        self.env.pop("AUTOTUNER_URL", None)
        self.server: subprocess.Popen[bytes] | None = None
        self.base = ""
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def _log(self, name: str) -> int:
        return os.open(self.folder / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def serve(self) -> None:
        port = _free_port()
        self.server = subprocess.Popen([sys.executable, "-m", "autotuner", "serve", "--port", str(port), "--db",
                                        self.url], env=self.env, stdout=self._log("serve"), stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.base + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the service did not start: {(self.folder / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.1)

    def restart_service(self) -> None:
        assert self.server is not None
        self.server.terminate()
        self.server.wait(30)
        self.serve()

    def worker(self, name: str) -> None:
        self.workers[name] = subprocess.Popen(
            [sys.executable, "-m", "autotuner", "worker", "--name", name, "--db", self.url], env=self.env,
            stdout=self._log(name), stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, name: str) -> None:
        """SIGKILL to the worker and its trial processes: no chance to give its job back."""
        proc = self.workers.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def stop(self) -> None:
        for proc in self.workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.workers.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.workers.clear()
        if self.server is not None:
            self.server.terminate()
            self.server.wait(30)
            self.server = None

    def post(self, shape: str) -> int | None:
        """Queue a job through the service: its id when acknowledged (202), else None."""
        answer = httpx.post(self.base + "/jobs", json={"op": "softmax", "shape": shape, "trials": 2},
                            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        return int(answer.json()["id"]) if answer.status_code == 202 else None


class Readers:
    """Other processes reading the database meanwhile, one after another, each its own process: the sqlite3 shell
    (SQLite), `autotuner show`, `autotuner export` and `autotuner tune --here` of a problem no job names."""

    def __init__(self, fleet: Fleet, tally: Tally) -> None:
        self.fleet, self.tally = fleet, tally
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="readers", daemon=True)

    def commands(self) -> Iterator[list[str]]:
        url, cli = self.fleet.url, [sys.executable, "-m", "autotuner"]
        shell = shutil.which("sqlite3")
        path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else None
        while True:
            if path is not None:  # the sqlite3 shell where it is installed, else Python's sqlite3: open, read, close
                yield [shell, path, "select count(*) from jobs"] if shell else \
                    [sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                                           "print(c.execute('select count(*) from jobs').fetchone()); c.close()", path]
            yield [*cli, "show", "softmax", "--shape", "4x16", "--db", url, "--json"]
            yield [*cli, "export", "--db", url, "-o", str(self.fleet.folder / "export.json")]
            yield [*cli, "tune", "softmax", "--shape", "4x12", "--trials", "1", "--here", "--db", url, "-q"]

    def _run(self) -> None:
        for argv in self.commands():
            if self.stopping.is_set():
                return
            done = subprocess.run(argv, env=self.fleet.env, capture_output=True, text=True, timeout=300)
            self.tally.reads += 1
            # `show` of a problem not stored yet exits 1, as documented; anything else is a failure
            if done.returncode not in (0, 1) or "Traceback" in done.stderr:
                self.tally.read_failures.append(f"{argv[2:4]}: {done.returncode}: {done.stderr[-300:]}")

    def __enter__(self) -> Readers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(300)


def _holding(engine: Engine, worker: str) -> bool:
    """Whether `worker` holds a running job whose tuning run has started (its search under way)."""
    with engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM jobs j JOIN tuning_runs r ON r.job_id = j.id "
            "WHERE j.worker = :w AND j.state = 'running' AND r.status = 'running'"), {"w": worker}).scalar())


def soak(url: str, folder: Path, *, rounds: int, jobs_per_round: int, drain_s: float) -> Tally:
    """Rounds of: jobs queued through the service, worker w1 killed holding one and started again, the service
    restarted; then the queue drained and every acknowledged job checked."""
    tally = Tally(backend=url.split(":", 1)[0].split("+", 1)[0])
    fleet = Fleet(url, folder)
    engine = create_engine(url)  # the harness's own reads: one more reader of the database
    acknowledged: list[int] = []
    t0 = time.monotonic()
    fleet.serve()
    fleet.worker("w1")
    fleet.worker("w2")
    try:
        with Readers(fleet, tally):
            for r in range(rounds):
                for i in range(jobs_per_round):
                    job = fleet.post(f"4x{16 + r * jobs_per_round + i}")
                    if job is not None:
                        acknowledged.append(job)
                until = time.monotonic() + 60
                while not _holding(engine, "w1") and time.monotonic() < until:
                    time.sleep(0.05)
                fleet.kill("w1")
                tally.kills += 1
                fleet.worker("w1")
                fleet.restart_service()
                tally.restarts += 1
            until = time.monotonic() + drain_s
            while time.monotonic() < until and not all(_state(fleet, j) == "done" for j in acknowledged):
                time.sleep(0.5)
        _check(fleet, engine, acknowledged, tally)
    finally:
        fleet.stop()
        engine.dispose()
    tally.acknowledged = len(acknowledged)
    tally.seconds = time.monotonic() - t0
    return tally


def _state(fleet: Fleet, job: int) -> str | None:
    answer = httpx.get(f"{fleet.base}/jobs/{job}", timeout=30)
    return str(answer.json()["state"]) if answer.status_code == 200 else None


def _check(fleet: Fleet, engine: Engine, acknowledged: list[int], tally: Tally) -> None:
    """Every acknowledged job done once, as the service, this process and a new process see it; every stored run
    and result reads back (export, GET /results/{id})."""
    with engine.connect() as conn:
        done_runs = {int(j): int(n) for j, n in conn.execute(text(
            "SELECT job_id, count(*) FROM tuning_runs WHERE status = 'done' AND job_id IS NOT NULL "
            "GROUP BY job_id"))}
        states = {int(i): s for i, s in conn.execute(text("SELECT id, state FROM jobs"))}
        runs = int(conn.execute(text("SELECT count(*) FROM tuning_runs")).scalar() or 0)
        bests = [int(i) for (i,) in conn.execute(text("SELECT id FROM best_configs"))]
    seen_elsewhere = subprocess.run(
        [sys.executable, "-c", "import json, sys; from autotuner.store import open_store; s = open_store(sys.argv[1], "
         "create=False); print(json.dumps({j: (r.state if (r := s.job(j)) else None) for j in json.loads(sys.argv[2])}))",
         fleet.url, json.dumps(acknowledged)], env=fleet.env, capture_output=True, text=True, timeout=120)
    elsewhere = json.loads(seen_elsewhere.stdout) if seen_elsewhere.returncode == 0 else {}
    for job in acknowledged:
        if states.get(job) != "done" or _state(fleet, job) != "done" or elsewhere.get(str(job)) != "done":
            tally.lost.append(job)
        elif done_runs.get(job, 0) != 1:
            tally.duplicated.append(job)
        else:
            tally.done += 1
    exported = subprocess.run([sys.executable, "-m", "autotuner", "export", "--db", fleet.url], env=fleet.env,
                              capture_output=True, text=True, timeout=300)
    if exported.returncode != 0 or len(json.loads(exported.stdout)["runs"]) != runs:
        tally.unreadable.append(f"export: {exported.returncode}: {exported.stderr[-300:]}")
    for best in bests:
        if httpx.get(f"{fleet.base}/results/{best}", timeout=30).status_code != 200:
            tally.unreadable.append(f"GET /results/{best}")


@contextlib.contextmanager
def database(backend: str, folder: Path) -> Iterator[str]:
    """A fresh database: a SQLite file in `folder`, or a new database on the PostgreSQL server."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'soak.db'}"
        return
    with fresh_pg_database("autotuner_soak") as url:
        yield url


@contextlib.contextmanager
def fresh_pg_database(prefix: str) -> Iterator[str]:
    """A new database on the PostgreSQL server at PG_URL, dropped afterwards (the test suite's too)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=4, help="jobs queued per round")
    parser.add_argument("--drain-s", type=float, default=600.0)
    args = parser.parse_args()
    tallies = []
    for backend in ("sqlite", "postgresql") if args.backend == "both" else (args.backend,):
        with tempfile.TemporaryDirectory() as tmp, database(backend, Path(tmp)) as url:
            tallies.append(soak(url, Path(tmp), rounds=args.rounds, jobs_per_round=args.jobs, drain_s=args.drain_s))
    print(f"{'backend':<11} {'acked':>6} {'done':>6} {'lost':>5} {'twice':>6} {'unread':>7} {'kills':>6} "
          f"{'restarts':>9} {'reads':>6} {'failed':>7} {'s':>6}")
    for t in tallies:
        print(f"{t.backend:<11} {t.acknowledged:>6} {t.done:>6} {len(t.lost):>5} {len(t.duplicated):>6} "
              f"{len(t.unreadable):>7} {t.kills:>6} {t.restarts:>9} {t.reads:>6} {len(t.read_failures):>7} "
              f"{t.seconds:>6.0f}")
    for t in tallies:
        if not t.ok:
            print(json.dumps(asdict(t), indent=1))
    sys.exit(0 if all(t.ok for t in tallies) else 1)


if __name__ == "__main__":
    main()
