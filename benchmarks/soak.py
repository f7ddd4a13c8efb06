"""Soak: `GET /config` and `POST /jobs` against a real `autotuner serve` with two real workers, for minutes,
while the PostgreSQL database goes away and comes back three times.

    python benchmarks/soak.py --minutes 10                 # outages through a TCP proxy (the server stays up)
    python benchmarks/soak.py --minutes 10 --outage pg_ctl # the real cluster stopped and started (needs root)

Everything talks to a fresh database on the PostgreSQL server at AUTOTUNER_TEST_PG_URL (default
postgresql+psycopg://postgres@127.0.0.1:5432/test). With `--outage proxy` the service and the workers reach it
through tests/support/tcp_proxy.py, which the script stops (every connection cut, new ones refused) and starts again.
The workers tune small softmax problems on Triton's interpreter. One lookup in five names a shape not asked
before (the database answers it); the rest repeat (the service's memory answers them). After the load stops and the database is back,
the workers drain the queue; then every accepted job is looked up.

Prints: requests and errors by status per endpoint (5xx other than 503 is the failure that matters), latency
percentiles, and the jobs: accepted, done, failed, still queued, lost (accepted but not in the database) and done
twice (more than one `done` run). Targets: 0 lost, 0 done twice, 0 5xx other than 503 while the database is away.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.tcp_proxy import TcpProxy, url_through  # noqa: E402

PG_URL = os.environ.get("AUTOTUNER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TOKEN = "soak-token"
SHAPES = [f"{r}x{c}" for r in (16, 32, 64) for c in (64, 128, 256, 512)]


class Load:
    def __init__(self, base: str) -> None:
        self.base = base
        self.lock = threading.Lock()
        self.status: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.latency: dict[str, list[float]] = collections.defaultdict(list)
        self.accepted: list[int] = []
        self.bad: list[str] = []  # 5xx other than 503, and transport errors, with when
        self.outage = False
        self.outage_answers: collections.Counter[str] = collections.Counter()
        self.stop = threading.Event()
        self.started = time.monotonic()

    def _note(self, kind: str, status: str, took: float, body: str = "") -> None:
        with self.lock:
            self.status[kind][status] += 1
            self.latency[kind].append(took)
            if self.outage:
                self.outage_answers[status] += 1
            if status.startswith("5") and status != "503" or status == "transport":
                self.bad.append(f"{time.monotonic() - self.started:7.1f}s {kind} {status} {body[:200]}")

    def lookups(self) -> None:
        client = httpx.Client(base_url=self.base, timeout=30)
        while not self.stop.is_set():
            # most lookups repeat (a launching process asks about its own few shapes: answered from memory); one
            # in five is a shape never asked before, which needs the database
            shape = random.choice(SHAPES) if random.random() < 0.8 else \
                f"{random.randint(1, 4096)}x{random.randint(1, 4096)}"
            t = time.monotonic()
            try:
                r = client.get("/config", params={"op": "softmax", "shape": shape})
                self._note("GET /config", str(r.status_code), time.monotonic() - t, r.text)
            except httpx.HTTPError as exc:
                self._note("GET /config", "transport", time.monotonic() - t, repr(exc))
                time.sleep(0.1)

    def jobs(self, every_s: float) -> None:
        client = httpx.Client(base_url=self.base, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"})
        while not self.stop.wait(every_s):
            body = {"op": "softmax", "shape": random.choice(SHAPES), "trials": 3, "strategy": "random"}
            t = time.monotonic()
            try:
                r = client.post("/jobs", json=body)
                self._note("POST /jobs", str(r.status_code), time.monotonic() - t, r.text)
                if r.status_code == 202:
                    with self.lock:
                        self.accepted.append(int(r.json()["id"]))
            except httpx.HTTPError as exc:
                self._note("POST /jobs", "transport", time.monotonic() - t, repr(exc))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--outages", type=int, default=3)
    ap.add_argument("--outage-s", type=float, default=20.0, help="how long the database is away each time")
    ap.add_argument("--outage", choices=("proxy", "pg_ctl"), default="proxy")
    ap.add_argument("--lookup-threads", type=int, default=4)
    ap.add_argument("--job-every-s", type=float, default=3.0)
    ap.add_argument("--drain-s", type=float, default=600.0, help="after the load: how long the workers may drain")
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/autotuner-soak"))
    args = ap.parse_args()
    args.log_dir.mkdir(parents=True, exist_ok=True)

    name = f"autotuner_soak_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)  # it outlives the outages
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    direct = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    pg = make_url(PG_URL)
    proxy = TcpProxy(pg.host or "127.0.0.1", pg.port or 5432) if args.outage == "proxy" else None
    url = url_through(direct, proxy) if proxy else direct
    cluster = next(iter(os.listdir("/etc/postgresql")), "15") if args.outage == "pg_ctl" else ""

    def database(up: bool) -> None:
        if proxy:
            proxy.resume() if up else proxy.stop()
            return
        running = subprocess.run(["pg_isready", "-h", pg.host or "127.0.0.1", "-p", str(pg.port or 5432), "-q"]).returncode == 0
        if running != up:
            subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", cluster, "main", "start" if up else "stop",
                            *([] if up else ["-m", "fast"])], check=True)

    env = {**os.environ, "AUTOTUNER_TOKEN": TOKEN, "TRITON_INTERPRET": "1", "AUTOTUNER_DB_URL": url}
    port = 18700 + random.randrange(200)
    procs = [subprocess.Popen([sys.executable, "-m", "autotuner", "serve", "--port", str(port)], env=env,
                              stdout=(args.log_dir / "serve.log").open("w"), stderr=subprocess.STDOUT)]
    for i in (1, 2):
        procs.append(subprocess.Popen([sys.executable, "-m", "autotuner", "worker", "--name", f"soak-w{i}"], env=env,
                                      stdout=(args.log_dir / f"worker{i}.log").open("w"), stderr=subprocess.STDOUT))
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the server did not start; see " + str(args.log_dir / "serve.log"))
        time.sleep(0.2)

    load = Load(base)
    threads = [threading.Thread(target=load.lookups, daemon=True) for _ in range(args.lookup_threads)]
    threads.append(threading.Thread(target=load.jobs, args=(args.job_every_s,), daemon=True))
    for t in threads:
        t.start()
    total_s = args.minutes * 60
    gap = total_s / (args.outages + 1)
    outages: list[tuple[float, float]] = []
    try:
        for k in range(args.outages):
            time.sleep(max(0.0, load.started + gap * (k + 1) - args.outage_s / 2 - time.monotonic()))
            t0 = time.monotonic() - load.started
            load.outage = True
            database(False)
            print(f"[{t0:6.1f}s] database down", flush=True)
            time.sleep(args.outage_s)
            database(True)
            load.outage = False
            t1 = time.monotonic() - load.started
            outages.append((t0, t1))
            print(f"[{t1:6.1f}s] database up", flush=True)
        time.sleep(max(0.0, load.started + total_s - time.monotonic()))
    finally:
        load.stop.set()
        database(True)
    for t in threads:
        t.join(35)

    engine = create_engine(direct)
    drain_until = time.monotonic() + args.drain_s
    while time.monotonic() < drain_until:
        with engine.connect() as c:
            left = c.execute(text("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')")).scalar()
        if not left:
            break
        time.sleep(2)
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(60)

    with engine.connect() as c:
        states: dict[str, int] = dict(c.execute(text("SELECT state, count(*) FROM jobs GROUP BY state")).all())
        known = {r[0] for r in c.execute(text("SELECT id FROM jobs"))}
        done_runs: dict[int, int] = dict(c.execute(text("SELECT job_id, count(*) FROM tuning_runs WHERE status = 'done' "
                                        "AND job_id IS NOT NULL GROUP BY job_id")).all())
        failed = c.execute(text("SELECT id, error FROM jobs WHERE state = 'failed'")).all()
        n_trials = c.execute(select(func.count()).select_from(text("trials"))).scalar()
    lost = [j for j in load.accepted if j not in known]
    twice = {j: n for j, n in done_runs.items() if n > 1}
    engine.dispose()

    print(f"\nsoak: {args.minutes:g} min, {args.lookup_threads} lookup threads, a job every {args.job_every_s:g} s, "
          f"2 workers (interpreter), {len(outages)} outages of {args.outage_s:g} s ({args.outage})")
    print(f"{'endpoint':<12} {'requests':>9}  by status" + " " * 26 + f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for kind in sorted(load.status):
        counts = ", ".join(f"{s}: {n}" for s, n in sorted(load.status[kind].items()))
        lat = load.latency[kind]
        print(f"{kind:<12} {sum(load.status[kind].values()):>9}  {counts:<34} {pct(lat, .5) * 1e3:8.1f} "
              f"{pct(lat, .99) * 1e3:8.1f} {max(lat) * 1e3:8.1f}")
    print("answers while the database was away: " + ", ".join(f"{s}: {n}" for s, n in sorted(load.outage_answers.items())))
    print(f"5xx other than 503, and transport errors: {len(load.bad)}")
    for line in load.bad[:10]:
        print("   ", line)
    print(f"jobs: {len(load.accepted)} accepted; by state {json.dumps(states)}; {len(lost)} lost; "
          f"{len(twice)} done twice; {n_trials} trials stored")
    for job_id, error in failed[:5]:
        print(f"    failed job {job_id}: {(error or '')[:160]}")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    if proxy:
        proxy.close()


if __name__ == "__main__":
    main()
