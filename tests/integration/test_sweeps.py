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
from autotuner.engine.sweeps.cross_time import Cell
from autotuner.engine.sweeps.refine import (
    insert_points,
    midpoint_shape,
    neighbour_losses,
    refinements,
    stale_points,
    worst_pair,
)
from autotuner.engine.sweeps.sweep import points
from autotuner.launch.serving import answer_config
from autotuner.store.database import Store
from search_spaces.contract import ProblemType
from search_spaces.problem import ProblemError

ROOT = Path(__file__).resolve().parents[2]
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
              "--json", "-q", "--refine-points", "0")
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
              "--gpus", "2", "--db", db, "--json", "--refine-points", "0")
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
    sweep(1.0, 1.15)  # 1000's winner loses nothing on 2000: 0 expected between, and said to be unmeasured there
    answer = answer_config(store, op, op.parse_problem("64x1100", "float32"), device)
    assert answer.from_problem == LOW and answer.expected_regret == 0.0
    assert "loses nothing on" in answer.regret_basis and "nothing between the two points was timed" in \
        answer.regret_basis


# -- refinement: a midpoint tuned wherever neighbouring winners lose more than the target on each other ----------

def _cell(winner: str, on: str, config: dict[str, int], ms: float | None, own_ms: float = 1.0) -> Cell:
    return Cell(winner_key=winner, on_key=on, config=config, ms=ms, own_ms=own_ms)


def test_which_neighbours_refinement_splits_and_where():
    """A pair's loss is the smaller of its winners' losses on each other; above the target (the worst first, as
    many as the budget allows, none tried before) its log-midpoint is tuned; a point must be timed again wherever a
    winner next to it (or its own) has no timing of its current config."""
    op = get_op("matmul")
    probs = [op.parse_problem(f"{m}x256x256", "float16") for m in (16, 64, 65, 256)]
    k = [p.key for p in probs]
    a, b, c = ({"BLOCK_M": m} for m in (16, 32, 64))
    winners = [a, b, c, c]
    cells = [_cell(k[0], k[0], a, 1.0), _cell(k[0], k[1], a, 1.30), _cell(k[1], k[0], b, 1.10),  # 16 | 64: 10%
             _cell(k[1], k[1], b, 1.0), _cell(k[1], k[2], b, 1.06), _cell(k[2], k[1], c, None),  # 64 | 65: 6%
             _cell(k[2], k[2], c, 1.0), _cell(k[3], k[3], c, 1.0)]  # 65 | 256: one config, no loss
    pairs = neighbour_losses(probs, winners, cells)
    assert [(p.low, p.high) for p in pairs] == list(zip(k, k[1:], strict=False))
    assert [p.loss for p in pairs] == [pytest.approx(0.10), pytest.approx(0.06), 0.0]
    assert [p.between for p in pairs] == ["32x256x256", None, "129x256x256"]  # 64 and 65: nothing between
    assert worst_pair(pairs) == pairs[0]
    made = lambda shape: op.parse_problem(shape, "float16")  # noqa: E731
    new, skipped = refinements(probs, pairs, target=0.02, budget=4, make=made)
    assert [(at, p.shape) for at, p in new] == [(1, "32x256x256")] and skipped == {f"{k[1]} - {k[2]}":
                                                                                    "no point lies between"}
    assert refinements(probs, pairs, target=0.02, budget=0, make=made)[0] == []  # the budget is spent
    assert refinements(probs, pairs, target=0.02, budget=4, make=made, tried={"32x256x256"})[0] == []
    assert refinements(probs, pairs, target=0.2, budget=4, make=made) == ([], {})  # every pair within 20%

    def too_large(shape: str) -> ProblemType:
        raise ProblemError("too large for the device")

    assert refinements(probs, pairs, target=0.02, budget=4, make=too_large)[1]["32x256x256"] == \
        "too large for the device"
    assert insert_points(["16", "64", "65"], [(1, "32"), (3, "x")]) == ["16", "32", "64", "65", "x"]
    # 65's winner has no timing on 65 of a config it no longer has; 256's none on its neighbour 65
    assert stale_points(probs, [a, b, {"BLOCK_M": 128}, c], cells) == [1, 2, 3]
    assert stale_points(probs[:2], winners[:2], cells) == []
    assert midpoint_shape("1x64", "4x64") == "2x64" and midpoint_shape("4x64", "4x64") is None
    assert midpoint_shape("1x64", "2x128") is None and midpoint_shape("M=512,N=64", "M=2048,N=64") == "M=1024,N=64"


def _crossing(tmp_path: Path, *args: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """tests/support/paced_op.py's paced_crossing over 4, 8 (and 16) elements: 4's and 8's winners each run twice as slow
    on the other point (wall clock); at 6 both are fast."""
    db = f"sqlite:///{tmp_path / 'c.db'}"
    out = subprocess.run([sys.executable, "-m", "autotuner", "tune", "paced_crossing", "--dtype", "float32",
                          "--strategy", "exhaustive", "--db", db, *args], capture_output=True, text=True, cwd=ROOT,
                         timeout=600, env={**os.environ, "TRITON_INTERPRET": "1", "AUTOTUNER_PLUGINS": "tests.support.paced_op",
                                           "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return db, out


def test_a_sweep_refines_itself_where_neighbouring_winners_lose_more_than_the_target(tmp_path):
    """4's and 8's winners lose about 100% on each other: 6 is tuned, inserted and cross-timed with both, after
    which every pair is within the target (a wide one: these are wall-clock times) and nothing more is added."""
    db, out = _crossing(tmp_path, "--shape", "4-16:pow2", "--regret", "0.25", "--json", "-q")
    summary = json.loads(out.stdout)
    keys = [p["problem"] for p in summary["points"]]
    assert keys == ["4:float32:tanh", "6:float32:tanh", "8:float32:tanh", "16:float32:tanh"]
    assert summary["refined"] == ["6:float32:tanh"] and [p["refined"] for p in summary["points"]] == \
        [False, True, False, False]
    assert [p["winner"]["SIDE"] for p in summary["points"]][::2] == [0, 1]  # 4's and 8's
    assert summary["target"] == 0.25 and summary["within_target"] is True and summary["worst_loss"] < 0.25
    timed = {(c["winner_key"], c["on_key"]) for c in summary["cross_timings"]}
    assert {(keys[0], keys[1]), (keys[1], keys[0]), (keys[1], keys[2]), (keys[2], keys[1])} <= timed
    (before,) = [c for c in summary["cross_timings"] if (c["winner_key"], c["on_key"]) == (keys[0], keys[2])]
    assert before["ms"] / before["own_ms"] > 1.5  # what called for the midpoint: 4's winner on 8
    store = Store(db, create=False)
    (sweep,) = store.sweeps(op="paced_crossing")
    assert sweep.shapes == ("4", "6", "8", "16") and sweep.refined == ("6",)
    assert (sweep.target, sweep.budget) == (0.25, 3)
    # then a model of the points' trials, measured against nearest on the inner points left out (6 and 8)
    between = summary["between_points"]
    assert between["left_out"] == 2 and between["served"] in ("model", "nearest") and between["nearest_loss"] >= 0
    stored = sweep.predictions[current_device().key]
    assert stored.chosen == between["served"] and {c["SIDE"] for c in stored.configs} == {0, 1}
    table = " ".join(_crossing(tmp_path, "--shape", "4-8:pow2", "--regret", "0.25", "--refine-points", "0")[1]
                     .stdout.split())  # as one line: rich wraps it
    assert "worst neighbouring pair 4:float32:tanh / 8:float32:tanh" in table and "(the point budget is spent)" \
        in table and "1 pair(s) above the 25.0% target" in table


def test_a_queued_sweep_refines_itself_through_the_workers(tmp_path):
    """The cross-timing job queues the midpoint as a job of the sweep, as its points were queued (a share of their
    trials: engine.refine.point_trials); when it is done
    the sweep is cross-timed again, and stops there: every pair is within the target."""
    db, _ = _crossing(tmp_path, "--shape", "4-8:pow2", "--regret", "0.25", "--queue", "--trials", "40")
    worker = subprocess.run([sys.executable, "-m", "autotuner", "worker", "--until-empty", "--db", db],
                            capture_output=True, text=True, cwd=ROOT, timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "1", "AUTOTUNER_PLUGINS": "tests.support.paced_op",
                                 "PYTHONPATH": str(ROOT)})
    assert worker.returncode == 0, worker.stderr + worker.stdout
    store = Store(db, create=False)
    jobs = sorted(store.jobs_page(state=None, limit=10, offset=0)[0], key=lambda j: j.id)
    assert [(j.kind, j.shape, j.state) for j in jobs] == [
        ("tune", "4", "done"), ("tune", "8", "done"), ("cross_time", "8", "done"), ("tune", "6", "done"),
        ("cross_time", "6", "done")]
    # queued as its sweep's were, with a quarter of their trials (it measures the configs fastest either side first)
    assert (jobs[0].budget_trials, jobs[3].budget_trials) == (40, 16) and jobs[3].options == {"approximate": "tanh"}
    assert "refining: 1 points queued (6)" in worker.stderr + worker.stdout
    assert "between the points: " in worker.stderr + worker.stdout  # the settled sweep's model against nearest
    (sweep,) = store.sweeps(op="paced_crossing")
    assert sweep.shapes == ("4", "6", "8") and sweep.refined == ("6",)
    assert sweep.predictions[current_device().key].left_out == 1
    timings = store.cross_timings(sweep.id)
    assert {(c.winner_key, c.on_key) for c in timings} >= {("6:float32:tanh", "4:float32:tanh"),
                                                           ("8:float32:tanh", "6:float32:tanh")}


def test_between_the_points_of_a_refined_sweep_its_rule_serves_not_the_bucket(tmp_path):
    """Softmax rows bucket by powers of two: 100 rows are served 128's winner. Once a sweep refined to a target
    holds 64, 90 (a point it added) and 128, 100 rows lie between 90 and 128 and the sweep's rule serves them: the
    nearest point, 90 (a sweep that does not refine leaves the bucket as it was)."""
    from autotuner.launch.lookup import resolve
    from autotuner.store.lazy import LazyStore

    db = f"sqlite:///{tmp_path / 'b.db'}"
    store, op, device = Store(db), get_op("softmax"), current_device()
    configs = {rows: {**CONFIG, "ROWS": r} for rows, r in ((64, 1), (90, 2), (128, 4))}
    for rows, config in configs.items():
        store.save_best(op=op, problem=op.parse_problem(f"{rows}x1000", "float32"), device=device, config=config,
                        median_ms=1.0, default_ms=None, torch_ms=None, run_id=None)
    keys = {rows: f"{rows}x1000:float32" for rows in configs}
    q = op.parse_problem("100x1000", "float32")
    plain = store.create_sweep(op="softmax", dtype="float32", options={}, dim="ROWS",
                               shapes=[f"{r}x1000" for r in (64, 90, 128)])
    cells = [dict(winner_key=keys[a], on_key=keys[b], config=configs[a], ms=1.01, own_ms=1.0)
             for a, b in ((64, 90), (90, 64), (90, 128), (128, 90))]
    store.save_cross_timings(sweep_id=plain, op=op, device=device, cells=cells)
    res = resolve(op, q, device, store=store)
    assert (res.source, res.from_problem) == ("bucket", keys[128])
    refined = store.create_sweep(op="softmax", dtype="float32", options={}, dim="ROWS",
                                 shapes=["64x1000", "128x1000"], target=0.02, budget=2)
    store.add_sweep_points(refined, shapes=[f"{r}x1000" for r in (64, 90, 128)], added=["90x1000"])
    assert resolve(op, q, device, store=store).source == "bucket"  # no cross timings on this device yet
    store.save_cross_timings(sweep_id=refined, op=op, device=device, cells=cells)
    for reader in (store, LazyStore(db, create=False, retry_s=0).get()):  # the Store, and sqlite3's reads
        res = resolve(op, q, device, store=reader)
        assert (res.source, res.from_problem, res.config) == ("nearest", keys[90], configs[90]), type(reader)
        assert f"between swept points {keys[90]} and {keys[128]} of a refined sweep" in " ".join(res.trace)
    assert resolve(op, q, device, store=store, fallback="default").source == "bucket"  # no rule without nearest


def test_a_midpoint_measures_a_share_of_a_points_trials():
    from autotuner.engine.sweeps.refine import point_trials

    assert [point_trials(t) for t in (None, 64, 200, 20, 8)] == [16, 16, 50, 16, 8]
