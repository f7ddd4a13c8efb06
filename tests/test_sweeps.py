"""Sweeps (problems differing in one dimension, tuned ahead of a workload) and the regret they measure, in the
interpreter: the sweep syntax, a sweep tuned here and cross-timed, a sweep queued for workers, and the expected
regret that `show` and `GET /config` report for a bucket or nearest answer."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.cli.common import problems
from autotuner.engine.sweep import points
from autotuner.launch.serving import answer_config
from autotuner.store.database import Store
from search_spaces.problem import ProblemError

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"BLOCK_N": 64, "ROWS": 1, "num_warps": 1, "num_stages": 1}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotuner", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600, env={**os.environ, "TRITON_INTERPRET": "1"})


def test_the_sweep_syntax():
    assert points("1-8192:pow2") == [1 << k for k in range(14)]
    assert points("3-20:pow2") == [3, 4, 8, 16, 20] and points("64,16,16") == [16, 64] and points("7") == [7]
    for bad in ("0-4:pow2", "8-4:pow2", "a", "1-2:linear", "4,-1"):
        with pytest.raises(ProblemError):
            points(bad)
    op, probs, dim = problems("matmul", None, "float16", {"M": "1-64:pow2", "N": "128", "K": "64"}, {})
    assert dim == "M" and [p.shape for p in probs] == [f"{m}x128x64" for m in (1, 2, 4, 8, 16, 32, 64)]
    _, probs, dim = problems("softmax", "1-4:pow2x100", "float32", {}, {})
    assert dim == "ROWS" and [p.key for p in probs] == ["1x100:float32", "2x100:float32", "4x100:float32"]
    with pytest.raises(ValueError, match="sweep one dimension at a time"):
        problems("matmul", None, None, {"M": "1-4:pow2", "N": "8,16"}, {})


def test_a_sweep_tunes_every_point_then_times_each_winner_on_its_neighbours(tmp_path):
    db = f"sqlite:///{tmp_path / 's.db'}"
    out = cli("tune", "softmax", "--shape", "1-4:pow2x64", "--dtype", "float32", "--trials", "2", "--db", db,
              "--json", "-q")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    keys = ["1x64:float32", "2x64:float32", "4x64:float32"]
    assert [p["problem"] for p in summary["points"]] == keys and all(p["winner"] for p in summary["points"])
    pairs = {(c["winner_key"], c["on_key"]) for c in summary["cross_timings"]}
    # each winner on its own point and its neighbours: 2 + 3 + 2
    assert pairs == {(keys[i], keys[j]) for i in range(3) for j in range(3) if abs(i - j) <= 1}
    own = [c for c in summary["cross_timings"] if c["winner_key"] == c["on_key"]]
    assert all(c["ms"] == c["own_ms"] and c["ms"] > 0 for c in own)
    store = Store(db, create=False)
    (sweep,) = store.sweeps(op="softmax")
    assert sweep.dim == "ROWS" and sweep.shapes == ("1x64", "2x64", "4x64")
    assert len(store.cross_timings(sweep.id, device_key=current_device().key)) == 7
    assert len(store.results(op="softmax")) == 3


def test_a_queued_sweep_is_tuned_by_a_worker_which_then_cross_times_it(tmp_path):
    db = f"sqlite:///{tmp_path / 'q.db'}"
    bad = cli("tune", "softmax", "--shape", "1-2:pow2x64", "--queue", "--gpus", "0,1", "--db", db)
    assert bad.returncode == 2 and "with --queue, --gpus is how many of a worker's GPUs" in bad.stderr
    out = cli("tune", "softmax", "--shape", "1-2:pow2x64", "--dtype", "float32", "--trials", "2", "--queue",
              "--gpus", "2", "--db", db, "--json")
    assert out.returncode == 0, out.stderr
    queued = json.loads(out.stdout)
    assert len(queued["jobs"]) == 2
    store = Store(db, create=False)
    waiting = store.jobs_page(state="queued", limit=10, offset=0)[0]
    assert {j.sweep_id for j in waiting} == {queued["sweep_id"]} and {j.gpus for j in waiting} == {2}
    worker = cli("worker", "--until-empty", "--db", db)
    assert worker.returncode == 0, worker.stderr + worker.stdout
    jobs, _ = store.jobs_page(state=None, limit=10, offset=0)
    assert sorted((j.kind, j.state) for j in jobs) == [("cross_time", "done"), ("tune", "done"), ("tune", "done")]
    assert len(store.cross_timings(queued["sweep_id"])) == 4


def _seeded(tmp_path) -> tuple[str, object]:
    """Softmax tuned at 64 and 128 rows (two points of a sweep over rows) with their cross timings: 128's winner
    ran 10% slower on 64 than 64's own; 64's winner 5% slower on 128."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    store, op, device = Store(db), get_op("softmax"), current_device()
    other = {**CONFIG, "ROWS": 2}
    for rows, config in ((64, CONFIG), (128, other)):
        store.save_best(op=op, problem=op.parse_problem(f"{rows}x1000", "float32"), device=device, config=config,
                        median_ms=1.0, default_ms=1.5, torch_ms=None, run_id=None)
    sweep = store.create_sweep(op="softmax", dtype="float32", options={}, dim="ROWS", shapes=["64x1000", "128x1000"])
    a, b = "64x1000:float32", "128x1000:float32"
    store.save_cross_timings(sweep_id=sweep, op=op, device=device, cells=[
        dict(winner_key=a, on_key=a, config=CONFIG, ms=1.0, own_ms=1.0),
        dict(winner_key=b, on_key=a, config=other, ms=1.1, own_ms=1.0),
        dict(winner_key=b, on_key=b, config=other, ms=2.0, own_ms=2.0),
        dict(winner_key=a, on_key=b, config=CONFIG, ms=2.1, own_ms=2.0)])
    return db, op


def test_a_bucket_or_nearest_answer_reports_its_expected_regret(tmp_path):
    db, op = _seeded(tmp_path)
    store, device = Store(db, create=False), current_device()
    bucket = answer_config(store, op, op.parse_problem("100x1000", "float32"), device)  # the bucket of 100: 128
    assert bucket.source == "bucket" and bucket.from_problem == "128x1000:float32"
    # 100 lies 36% of the way from 128 to 64 (log scale), where 128's winner loses 10%: 3.6% expected
    expected = math.log2(128 / 100) * 0.1
    assert bucket.expected_regret == pytest.approx(expected, abs=1e-4)
    assert bucket.regret_measured_on == ("64x1000:float32",) and "+10.0% on 64x1000:float32" in bucket.regret_basis
    near = answer_config(store, op, op.parse_problem("20x1000", "float32"), device)  # bucket 32 untuned; nearest 64
    assert near.source == "nearest" and near.from_problem == "64x1000:float32"
    assert near.expected_regret is None and near.regret_basis.startswith("not measured")  # outside the sweep
    far = answer_config(store, op, op.parse_problem("200x1000", "float32"), device)  # bucket 256 untuned; nearest 128
    assert far.source == "nearest" and far.expected_regret is None and far.regret_basis.startswith("not measured")
    exact = answer_config(store, op, op.parse_problem("64x1000", "float32"), device)
    assert exact.source == "exact" and exact.expected_regret is None and exact.regret_measured_on == ()
    shown = cli("show", "softmax", "--shape", "100x1000", "--dtype", "float32", "--db", db, "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert info["source"] == "bucket" and info["expected_regret"] == pytest.approx(expected, abs=1e-4)
    assert info["regret_measured_on"] == ["64x1000:float32"]
    table = " ".join(cli("show", "softmax", "--shape", "100x1000", "--dtype", "float32", "--db", db).stdout.split())
    assert "+3.6% against this problem's own winner, expected" in table and "interpolated on a log scale" in table


LOW, HIGH, WIDE = "64x1000:float32", "64x2000:float32", {**CONFIG, "BLOCK_N": 1024}


def _two_columns(tmp_path):
    """Softmax tuned at 1000 and 2000 columns (a sweep's points, no bucket between: CONFIG and WIDE win), and
    `sweep(low_on_high, high_on_low)`, which stores a sweep over them with those cross timings (each winner's time
    on the other point, that point's own winner at 1.0)."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    store, op, device = Store(db), get_op("softmax"), current_device()
    for shape, config in (("64x1000", CONFIG), ("64x2000", WIDE)):
        store.save_best(op=op, problem=op.parse_problem(shape, "float32"), device=device, config=config,
                        median_ms=1.0, default_ms=None, torch_ms=None, run_id=None)

    def sweep(low_on_high: float, high_on_low: float) -> None:
        swept = store.create_sweep(op="softmax", dtype="float32", options={}, dim="COLS",
                                   shapes=["64x1000", "64x2000"])
        store.save_cross_timings(sweep_id=swept, op=op, device=device, cells=[
            dict(winner_key=LOW, on_key=HIGH, config=CONFIG, ms=low_on_high, own_ms=1.0),
            dict(winner_key=HIGH, on_key=LOW, config=WIDE, ms=high_on_low, own_ms=1.0)])

    return db, store, op, device, sweep


def test_between_two_swept_points_the_winner_the_sweep_measured_to_lose_less_there_is_served(tmp_path):
    """1100 columns are nearest 1000, but 2000's winner lost 2% on 1000 where 1000's lost 30% on 2000: at 1100
    (14% of the way on a log scale) 1000's is expected to lose 4.1%, 2000's 1.7%, so 2000's is served, and says
    what it should lose. With the losses the other way round, the nearest point's winner stays."""
    from autotuner.launch.lookup import resolve
    from autotuner.store.lazy import LazyStore

    db, store, op, device, sweep = _two_columns(tmp_path)
    sweep(1.30, 1.02)
    q = op.parse_problem("64x1100", "float32")
    for reader in (store, LazyStore(db, create=False, retry_s=0).get()):  # the Store, and sqlite3's reads
        res = resolve(op, q, device, store=reader)
        assert (res.source, res.from_problem, res.config) == ("nearest", HIGH, WIDE), type(reader)
    answer = answer_config(store, op, q, device)  # 1100 lies 86% of the way from 2000 to 1000: 0.86 * 2%
    assert answer.expected_regret == pytest.approx(math.log2(2000 / 1100) * 0.02, abs=1e-4)
    assert answer.regret_measured_on == (LOW,)
    assert resolve(op, op.parse_problem("64x3000", "float32"), device, store=store).from_problem == HIGH
    assert resolve(op, op.parse_problem("64x900", "float32"), device, store=store).from_problem == LOW  # not between
    sweep(1.02, 1.30)  # a newer sweep, measured the other way round
    assert resolve(op, q, device, store=store).from_problem == LOW


def test_between_two_points_the_winner_expected_to_lose_less_there_is_served(tmp_path):
    """1000's winner loses 20% on 2000, 2000's loses 15% on 1000. At 1100 (14% of the way from 1000 to 2000 on a
    log scale) 1000's winner is expected to lose 0.14 * 20% = 2.8%, 2000's 0.86 * 15% = 12.9%: 1000's is served
    (the rule before this one took 2000's, which lost less at the far point). At 1900 columns, 2000's: 0.07 * 15%
    = 1.1%."""
    from autotuner.launch.lookup import resolve

    _, store, op, device, sweep = _two_columns(tmp_path)
    sweep(1.20, 1.15)
    for cols, served, loss in ((1100, LOW, math.log2(1100 / 1000) * 0.20),
                               (1900, HIGH, math.log2(2000 / 1900) * 0.15)):
        q = op.parse_problem(f"64x{cols}", "float32")
        assert resolve(op, q, device, store=store).from_problem == served, cols
        answer = answer_config(store, op, q, device)
        assert answer.from_problem == served and answer.expected_regret == pytest.approx(loss, abs=1e-4), cols
