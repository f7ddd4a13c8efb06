"""`autotuner tune` handed to a worker running on the same host (autotuner.worker.command_socket, autotuner.cli.handoff and
autotuner.cli.handed_run): real worker and command processes, real sockets, a real SQLite file, kernels in Triton's
interpreter."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "AUTOTUNER_POLL_S": "0.2", **extra}


def tune(*args: str, db: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotuner", "tune", *args, "--db", db], capture_output=True,
                          text=True, timeout=timeout, env=env or _env(), cwd=cwd)


class LocalWorker:
    def __init__(self, db: str, log: Path, cwd: Path = ROOT) -> None:
        self.door_dir = Path(os.environ["AUTOTUNER_RUNTIME_DIR"])
        before = set(self.door_dir.glob("*.sock"))
        self.log_path = log
        self.log = log.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "autotuner", "worker", "--name", "w1", "--db", db],
                                     env=_env(), stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        try:
            while not set(self.door_dir.glob("*.sock")) - before:
                assert self.proc.poll() is None, self.text()
                assert time.monotonic() < deadline, "the worker opened no command socket in 120 s:\n" + self.text()
                time.sleep(0.1)
        except AssertionError:
            self.proc.kill()
            raise

    def text(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.log.close()
        return code


@pytest.fixture
def worker(tmp_path):
    w = LocalWorker(f"sqlite:///{tmp_path / 'w.db'}", tmp_path / "worker.log")
    yield w
    w.stop()


def _runs(db: Path) -> list[tuple[int, str]]:
    """The runs in the worker's database, read as a bystander: read-only, closed at once (a connection left to
    the collector, and one that may write, could checkpoint the worker's WAL from under it as it closed)."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
        return c.execute("SELECT id, status FROM tuning_runs ORDER BY id").fetchall()


@pytest.mark.timeout(300)
def test_a_running_worker_takes_the_command_which_imports_no_torch(worker, tmp_path):
    db = tmp_path / "w.db"
    out = tune("matmul", "--M", "32", "--trials", "3", "--json", db=f"sqlite:///{db}",
               env=_env(PYTHONPROFILEIMPORTTIME="1"))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["problem_key"] == "32x32x32:float16" and len(result["trials"]) == 3
    assert result["best_config"] is not None and result["run_id"] == 1 and result["worker"] == "w1"
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "autotuner.cli.handoff" in imported  # the command's own imports, relayed nothing of the worker's
    assert "torch" not in imported and "triton" not in imported and "sqlalchemy" not in imported
    assert "tune matmul --M 32 --trials 3 --json" in worker.text()
    assert _runs(db) == [(1, "done")]
    # the worker is still there, and takes the next one with its processes kept
    again = tune("matmul", "--M", "16", "--trials", "2", db=f"sqlite:///{db}")
    assert again.returncode == 0, again.stderr
    assert "tuning in worker w1 on this host" in again.stderr
    assert "best config" in again.stdout  # the table, on the command's standard output
    assert _runs(db) == [(1, "done"), (2, "done")]


@pytest.mark.timeout(300)
def test_the_worker_gives_back_what_it_would_not_run_the_same(worker, tmp_path):
    other = tmp_path / "other.db"
    out = tune("matmul", "--M", "32", "--trials", "2", "-q", db=f"sqlite:///{other}")
    assert out.returncode == 0, out.stderr
    assert "did not take this command (it names another database than the worker's)\ntuning in this process" \
        in out.stderr
    assert _runs(other) == [(1, "done")]  # tuned here, into the database the command named
    assert not (tmp_path / "w.db").exists() or _runs(tmp_path / "w.db") == []
    # the same database written another way (a relative path from another folder) is the worker's
    rel = os.path.relpath(tmp_path / "w.db", tmp_path.parent)
    same = tune("matmul", "--M", "16", "--trials", "2", "-q", db=f"sqlite:///{rel}", cwd=tmp_path.parent)
    assert same.returncode == 0, same.stderr
    assert "did not take" not in same.stderr and _runs(tmp_path / "w.db") == [(1, "done")]
    # another device choice is not the worker's to make
    dev = tune("matmul", "--M", "16", "--trials", "1", "-q", db=f"sqlite:///{other}",
               env=_env(CUDA_VISIBLE_DEVICES="7"))
    assert "its CUDA_VISIBLE_DEVICES differs from the worker's" in dev.stderr
    # --here and AUTOTUNER_LOCAL_WORKER=0 keep it here without asking
    before = worker.text().count("from a command on this host")
    for args, env in ((("--here",), _env()), ((), _env(AUTOTUNER_LOCAL_WORKER="0"))):
        here = tune("matmul", "--M", "16", "--trials", "1", "-q", *args, db=f"sqlite:///{other}", env=env)
        assert here.returncode == 0, here.stderr
    assert worker.text().count("from a command on this host") == before


@pytest.mark.timeout(300)
def test_a_worker_started_with_a_relative_database_takes_commands_naming_it_from_elsewhere(tmp_path):
    """The worker's database is resolved in the worker's folder, the command's in the command's."""
    w = LocalWorker("sqlite:///rel.db", tmp_path / "worker.log", cwd=tmp_path)
    try:
        out = tune("matmul", "--M", "16", "--trials", "1", "-q", db=f"sqlite:///{tmp_path / 'rel.db'}")
        assert out.returncode == 0 and "did not take" not in out.stderr, out.stderr
        assert "from a command on this host" in w.text()
        assert _runs(tmp_path / "rel.db") == [(1, "done")]
    finally:
        w.stop()


@pytest.mark.timeout(300)
def test_bad_input_is_answered_by_the_worker_as_it_would_be_here(worker, tmp_path):
    out = tune("matmulx", "--M", "32", db=f"sqlite:///{tmp_path / 'w.db'}")
    assert out.returncode == 2
    assert "unknown op 'matmulx'" in out.stderr
    bad = tune("matmul", "--M", "32", "--strategy", "nope", db=f"sqlite:///{tmp_path / 'w.db'}")
    assert bad.returncode == 2 and "unknown strategy 'nope'" in bad.stderr
    assert worker.text().count("from a command on this host") == 2
    assert worker.proc.poll() is None


@pytest.mark.timeout(300)
def test_a_command_killed_mid_run_leaves_its_run_interrupted_and_the_worker_serving(worker, tmp_path):
    db = tmp_path / "w.db"
    proc = subprocess.Popen([sys.executable, "-m", "autotuner", "tune", "matmul", "--M", "128", "--trials", "60",
                             "--db", f"sqlite:///{db}"], env=_env(), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # killed once it has measured a trial in the worker
        if re.search(r"trial 2/60", line):
            break
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 60
    while _runs(db) != [(1, "interrupted")]:
        assert time.monotonic() < deadline, (_runs(db), worker.text())
        time.sleep(0.2)
    with sqlite3.connect(db) as c:
        trials = c.execute("SELECT count(*) FROM trials WHERE run_id = 1").fetchone()[0]
    assert 2 <= trials < 60  # what it measured is kept; the rest was not measured
    out = tune("matmul", "--M", "16", "--trials", "2", "-q", db=f"sqlite:///{db}")
    assert out.returncode == 0 and "did not take" not in out.stderr, out.stderr
    assert _runs(db) == [(1, "interrupted"), (2, "done")]
    assert worker.proc.poll() is None


@pytest.mark.timeout(300)
def test_a_door_left_by_a_dead_worker_or_a_stopped_one_is_passed_by(tmp_path):
    door_dir = Path(os.environ["AUTOTUNER_RUNTIME_DIR"])

    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(door_dir / "99999999.sock"))
    dead.close()  # the file stays, nothing listens
    out = tune("matmul", "--M", "16", "--trials", "1", "-q", db=f"sqlite:///{tmp_path / 'a.db'}")
    assert out.returncode == 0, out.stderr
    assert _runs(tmp_path / "a.db") == [(1, "done")]
    w = LocalWorker(f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "worker.log")
    try:
        mine = set(door_dir.glob("*.sock")) - {door_dir / "99999999.sock"}
        assert len(mine) == 1
    finally:
        assert w.stop() == 143  # SIGTERM, as a shell reports it
    assert not any(p.exists() for p in mine)  # a stopped worker removes its command socket


@pytest.mark.timeout(300)
def test_a_busy_worker_never_holds_a_command_back(worker, tmp_path):
    from autotuner.store.database import Store

    db = f"sqlite:///{tmp_path / 'w.db'}"
    Store(db).queue_job(op="matmul", shape="256x256x256", dtype="float16", options={}, budget_trials=500,
                        strategy="exhaustive")  # many minutes in the interpreter; stopped with the worker
    deadline = time.monotonic() + 120
    while "started" not in worker.text():  # the worker is busy with its job
        assert time.monotonic() < deadline, worker.text()
        time.sleep(0.2)
    bad = tune("softmax", "--shape", "4xx8", db=db)
    assert bad.returncode == 2 and "is busy with its job" in bad.stderr, bad.stderr  # checked here, at once
    here = tune("softmax", "--shape", "4x8", "--trials", "1", "--json", db=db)
    assert here.returncode == 0, here.stderr
    assert "worker" not in json.loads(here.stdout) and "is busy with its job" in here.stderr
    waited = tune("softmax", "--shape", "4xx8", "--wait", db=db)  # checked before waiting for the worker
    assert waited.returncode == 2 and "bad shape string '4xx8'" in waited.stderr, waited.stderr
    assert "tune softmax" not in worker.text()  # the worker never took any of these commands


@pytest.mark.timeout(300)
def test_ctrl_c_stops_a_busy_worker_with_130_and_no_child_tracebacks(tmp_path):
    from autotuner.store.database import Store

    db = f"sqlite:///{tmp_path / 'c.db'}"
    job = Store(db).queue_job(op="matmul", shape="128x128x128", dtype="float16", options={}, budget_trials=500,
                              strategy="exhaustive")
    w = LocalWorker(db, tmp_path / "worker.log")
    deadline = time.monotonic() + 120
    while "] trial" not in w.text() and "trial 1" not in w.text() and "started" not in w.text():
        assert time.monotonic() < deadline, w.text()
        time.sleep(0.2)
    time.sleep(2)  # its trial worker and compile pool are up
    os.killpg(w.proc.pid, signal.SIGINT)  # what Ctrl-C in its terminal sends: the whole process group
    assert w.proc.wait(timeout=60) == 130
    text = w.text()
    w.log.close()
    assert "Traceback" not in text and "ForkServerProcess" not in text, text
    with sqlite3.connect(tmp_path / "c.db") as c:
        assert c.execute("SELECT state FROM jobs WHERE id = ?", (job,)).fetchone() == ("queued",)  # given back
