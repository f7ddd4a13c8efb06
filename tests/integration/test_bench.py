"""`autotuner bench` and `autotuner report` end to end on the interpreter; roofline arithmetic; migrations."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, select, text

from autotuner.analysis.peaks import Peaks
from db.engine import _alembic_config, make_engine, open_engine, session_scope
from db.models import Job
from tests.support.devices import H100


def _cli(*args: str, db: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotuner", *args, "--db", db], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory):
    db = f"sqlite:///{tmp_path_factory.mktemp('bench') / 'b.db'}"
    r = _cli("tune", "softmax", "--shape", "8x40", "--trials", "2", "--json", db=db)
    assert r.returncode == 0, r.stderr
    return db


def _stored_best(tmp_path, keep_default: bool) -> str:
    """A database whose best softmax 8x40 config on this machine is the space's default, or another config."""
    from autotuner.base.device import current_device
    from autotuner.base.registry import get_op
    from autotuner.store.database import Store

    db = f"sqlite:///{tmp_path / 'best.db'}"
    op, device = get_op("softmax"), current_device()
    problem = op.parse_problem("8x40")
    default = op.space.default(problem, device)
    config = default if keep_default else next(c for c in op.space.enumerate(problem, device).valid if c != default)
    assert Store(db).save_best(op=op, problem=problem, device=device, config=config, median_ms=1.0, default_ms=1.0,
                               torch_ms=None, run_id=None)
    return db


def test_bench_compares_every_candidate_on_the_same_inputs(tmp_path):
    r = _cli("bench", "softmax", "--shape", "8x40", "--rounds", "1", "--json", db=_stored_best(tmp_path, False))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rows = {row["name"]: row for row in out["rows"]}
    assert set(rows) == {"torch eager", "torch.compile", "manual (unfused torch)", "triton default", "triton tuned"}
    assert rows["torch.compile"]["ms"] is None and "interpreter" in rows["torch.compile"]["note"]
    for name in ("torch eager", "manual (unfused torch)", "triton default", "triton tuned"):
        assert rows[name]["ms"] > 0 and rows[name]["error"] < 5e-3 and rows[name]["note"] == "", rows[name]
        assert rows[name]["gbs"] > 0
    assert rows["torch eager"]["vs_eager"] == 1.0 and rows["torch eager"]["rounds_faster"] == 0
    # one round: a candidate beat eager in it exactly when its time is below eager's
    for name in ("manual (unfused torch)", "triton default", "triton tuned"):
        assert out["rounds"] == 1 and rows[name]["rounds_faster"] == int(rows[name]["vs_eager"] > 1.0), rows[name]
    assert out["clock"].startswith("wall-clock") and out["tuned_config"] is not None and out["peaks"] is None
    assert out["tuned_config"] != out["default_config"]


def test_bench_times_a_kept_default_once(tmp_path):
    """Where the tuner kept the default, both rows show the one kernel's time, and say so."""
    from autotuner.analysis.bench import SAME_AS_DEFAULT

    db = _stored_best(tmp_path, True)
    out = json.loads(_cli("bench", "softmax", "--shape", "8x40", "--rounds", "1", "--json", db=db).stdout)
    rows = {row["name"]: row for row in out["rows"]}
    assert out["tuned_config"] == out["default_config"]
    assert rows["triton tuned"]["ms"] == rows["triton default"]["ms"] > 0
    assert rows["triton tuned"]["note"] == SAME_AS_DEFAULT and rows["triton default"]["note"] == ""
    table = _cli("bench", "softmax", "--shape", "8x40", "--rounds", "1", db=db)
    assert table.returncode == 0 and "the default config (nothing measured faster" in " ".join(table.stdout.split())


def test_bench_without_a_tuned_result_says_how_to_get_one(tmp_path):
    db = f"sqlite:///{tmp_path / 'e.db'}"
    r = _cli("bench", "gelu", "--shape", "1000", "--approximate", "none", "--rounds", "1", "--json", db=db)
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)["rows"]}
    note = rows["triton tuned"]["note"]
    assert rows["triton tuned"]["ms"] is None and rows["triton default"]["ms"] > 0
    # the command it names tunes this very problem (its option included): the bench then has a tuned row
    command = note.split("`")[1].split()
    assert command[:3] == ["autotuner", "tune", "gelu"] and "--approximate" in command, note
    assert _cli(*command[1:], "--trials", "2", "-q", db=db).returncode == 0
    again = {row["name"]: row for row in json.loads(_cli("bench", "gelu", "--shape", "1000", "--approximate", "none",
                                                          "--rounds", "1", "--json", db=db).stdout)["rows"]}
    assert again["triton tuned"]["ms"] or "the default config" in again["triton tuned"]["note"]


def test_bench_profile_and_bad_input(tuned_db):
    r = _cli("bench", "softmax", "--shape", "8x40", "--rounds", "1", "--profile", db=tuned_db)
    assert r.returncode == 0, r.stderr
    assert "profile of 20 launches" in r.stdout and "Self CPU" in r.stdout
    bad = _cli("bench", "softmax", "--shape", "8xx", db=tuned_db)
    assert bad.returncode == 2 and "bad shape string" in bad.stderr


def test_report_plots_gpu_results_and_leaves_out_the_interpreters(tuned_db, tmp_path):
    """The interpreter's results are CPU wall-clock: `tune` prints n/a against torch, so the report leaves them out
    rather than plotting meaningless ratios; GPU results (written here through the Store) are plotted."""
    only_interpreter = _cli("report", "-o", str(tmp_path / "i.png"), db=tuned_db)
    assert only_interpreter.returncode == 2 and "1 interpreter results left out" in only_interpreter.stderr
    from autotuner.base.registry import get_op
    from autotuner.store.database import Store

    op = get_op("softmax")
    problem = op.parse_problem("4096x4096")
    Store(tuned_db).save_best(op=op, problem=problem, device=H100, config=op.space.default(problem, H100),
                              median_ms=0.0265, default_ms=0.0265, torch_ms=0.058, run_id=None)
    png = tmp_path / "r.png"
    r = _cli("report", "-o", str(png), db=tuned_db)
    assert r.returncode == 0, r.stderr
    assert "(1 problems)" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    missing = _cli("report", "-o", str(tmp_path / "x.png"), db=f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.returncode == 3 and "no database at" in missing.stderr


def test_roofline_floor_is_the_slower_of_compute_and_memory():
    p = Peaks(copy_gbs=3000.0, matmul_tflops={"float16": 700.0, "bfloat16": 700.0, "float32": 350.0})
    # matmul 4096^3 fp16: 137.4 GFLOP at 700 TFLOP/s = 0.196 ms; 100 MB at 3 TB/s = 0.034 ms
    assert p.floor_ms(2 * 4096**3, 100e6, "float16") == pytest.approx(2 * 4096**3 / 700e12 * 1e3)
    assert p.fraction(2 * 4096**3, 100e6, "float16", 0.25) == pytest.approx(0.1963 / 0.25, rel=1e-3)
    # softmax 4096^2 fp16: memory bound, 64 MiB moved
    assert p.floor_ms(5 * 4096**2, 2 * 2 * 4096**2, "float16") == pytest.approx(2 * 2 * 4096**2 / 3000e9 * 1e3)


def test_a_database_at_the_first_schema_is_migrated_keeping_its_rows(url):
    engine = make_engine(url)
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0001")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO jobs (op, shape, dtype, options, strategy, priority, state, attempts, created_at)"
                          " VALUES ('softmax', '8x8', 'float16', '{}', 'tpe', 0, 'queued', 0, '2026-01-01 00:00:00')"))
    engine.dispose()
    migrated = open_engine(url)
    tables = set(inspect(migrated).get_table_names())
    assert {"device_peaks", "jobs", "tuning_runs"} <= tables
    assert "job_id" in {c["name"] for c in inspect(migrated).get_columns("tuning_runs")}
    with session_scope(migrated) as s:
        assert [j.shape for j in s.scalars(select(Job))] == ["8x8"]


def test_the_interleaved_tune_benchmark_runs_each_tree_in_turn(tmp_path):
    """benchmarks/tune_ab.py (before/after on one host) end to end, on the interpreter: a tiny tune of each of three
    trees, each run's log and JSON kept, and a table of all; a folder that is not a source tree is refused."""
    root = Path(__file__).resolve().parents[2]
    script = root / "benchmarks" / "tune_ab.py"
    out = subprocess.run([sys.executable, str(script), str(root), str(root), str(root), "--rounds", "1", "--tune",
                          "softmax --shape 64x128 --trials 2", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith(("| A | alone", "| B | alone", "| C | alone"))]
    assert len(rows) == 3 and sorted(p.name for p in tmp_path.glob("*.log")) == [f"tune_ab_{t}1_alone.log"
                                                                                 for t in "ABC"]
    kept = sorted(tmp_path.glob("*.json"))
    assert [p.name for p in kept] == [f"tune_ab_{t}1_alone.json" for t in "ABC"], kept
    assert all(json.loads(p.read_text())["trials"] for p in kept), "each run's JSON is the tune's own"
    refused = subprocess.run([sys.executable, str(script), str(tmp_path), str(root)], capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode != 0 and "not a source tree" in refused.stderr


def test_the_scale_benchmark_accounts_for_each_workers_jobs(tmp_path):
    """benchmarks/scale_workers.py's account of a drain, from real job rows in SQLite: each worker's jobs summed,
    its first job, when its last ended, how far apart the workers ended, and the wall outside the jobs."""
    from autotuner.store.database import Store
    from benchmarks.scale_workers import account

    db = tmp_path / "jobs.db"
    store = Store(f"sqlite:///{db}")
    for shape in ("64x64x64", "128x64x64", "64x128x64"):
        store.queue_job(op="matmul", shape=shape, dtype="float16", options={})
    # (worker, start, end) in seconds: gpu0 runs two jobs back to back, gpu1 one that ends a second later
    plan = [("gpu0", 0.0, 4.0), ("gpu1", 0.5, 7.0), ("gpu0", 4.0, 6.0)]
    for worker, start, end in plan:
        job, _ = store.claim_job(worker)
        assert job is not None and store.finish_job(job_id=job.id, worker=worker, run_id=None)
        with store.engine.begin() as c:  # (the times the plan says)
            c.execute(text("UPDATE jobs SET started_at = :a, finished_at = :b WHERE id = :id"),
                      {"a": f"2026-11-28 10:00:{start:06.3f}", "b": f"2026-11-28 10:00:{end:06.3f}", "id": job.id})
    said = account(db, wall=9.0)
    assert "gpu0: 2 jobs 6.0 s, the first 4.0 s, ended at 6.0 s" in said, said
    assert "gpu1: 1 jobs 6.5 s, the first 6.5 s, ended at 7.0 s" in said, said
    assert said.endswith("ends 1.0 s apart; 2.0 s outside the jobs"), said


def test_the_scale_benchmark_takes_shares_of_linear_from_medians_and_round_by_round():
    """benchmarks/scale_workers.py --rounds: a drain's share of linear from the median walls, and each round's
    against that round's own N=1 (a slow round of N=1 does not flatter another round's N=2)."""
    from benchmarks.scale_workers import shares

    table = {(r["mode"], r["n"], r["layout"]): r for r in shares({
        ("cold", 1, "each"): [40.0, 48.0, 44.0],
        ("cold", 2, "each"): [25.0, 24.0, 20.0],
        ("cold", 2, "one"): [22.0, 30.0, 23.0],
        ("running", 2, "each"): [10.0, 12.0, 11.0],  # a mode's smallest N is its base: here N=2 against itself
    })}
    base = table[("cold", 1, "each")]
    assert base["wall"] == 44.0 and base["share"] == 1.0 and base["shares"] == [1.0, 1.0, 1.0]
    each = table[("cold", 2, "each")]
    assert each["wall"] == 24.0 and each["speedup"] == pytest.approx(44 / 24) and each["share"] == pytest.approx(44 / 48)
    assert each["shares"] == pytest.approx([40 / 50, 48 / 48, 44 / 40])
    one = table[("cold", 2, "one")]
    assert one["wall"] == 23.0 and one["shares"] == pytest.approx([40 / 44, 48 / 60, 44 / 46])
    running = table[("running", 2, "each")]
    assert running["share"] == 1.0 and running["walls"] == [10.0, 12.0, 11.0]
