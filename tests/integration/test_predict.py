"""A sweep's model of its trials (autotuner.engine.sweeps.predict), measured against nearest by leaving each point out,
and served between the points only where it won (autotuner.store.regret.predicted_pick): synthetic landscapes
whose answers are known, a real SQLite file, and a row written by hand that is never trusted."""

from __future__ import annotations

import math

import pytest

from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.engine.sweeps.predict import predict
from autotuner.launch.serving import answer_config
from autotuner.store.database import Store
from autotuner.store.lazy import LazyStore
from autotuner.store.prediction import MODEL, NEAREST
from autotuner.store.resolution import resolve
from autotuner.store.stored_best import versions
from db import repository as repo
from db.engine import session_scope
from search_spaces.space import config_key

CONFIG = {"BLOCK_N": 64, "ROWS": 1, "num_warps": 1, "num_stages": 1}
ROWS = (1, 2, 4, 8, 16, 32, 64)
POINTS = tuple(16 << i for i in range(8))  # 16 .. 2048 rows


def valley(rows: int, per_program: int) -> float:
    """A landscape whose best rows per program is rows / 16 (a diagonal valley in log space)."""
    return 1.0 + 0.3 * (math.log2(rows) - 4 - math.log2(per_program)) ** 2


def _times(time_of, only=None):
    return [{config_key(c): (c, time_of(m, c["ROWS"])) for c in ({**CONFIG, "ROWS": r} for r in ROWS)
             if only is None or only(m, c["ROWS"])} for m in POINTS]


def _problems():
    op = get_op("softmax")
    return [op.parse_problem(f"{m}x1000", "float32") for m in POINTS]


def test_the_model_is_chosen_where_it_beats_nearest_on_the_sweeps_own_points():
    """Between powers of two the best moves along the valley: nearest, left one point out, serves the next
    point's winner (30% slower); the model picks each left-out point's best, and between the points the best."""
    p = predict(_problems(), _times(valley), kernel_hash="h", triton_version="v")
    assert p is not None and p.chosen == MODEL and p.left_out == len(POINTS) - 2 == p.measured
    assert p.model_loss == pytest.approx(0.0) and p.nearest_loss == pytest.approx(0.3)
    span = math.log2(POINTS[-1] / POINTS[0])
    for rows in (24, 48, 96, 400, 600):  # none halfway between two ROWS (a tie)
        best = min(ROWS, key=lambda r: valley(rows, r))
        assert p.pick_at(math.log2(rows / POINTS[0]) / span)["ROWS"] == best, rows


def test_nearest_is_kept_where_the_model_does_not_beat_it():
    """One config wins everywhere: both lose nothing; a tie keeps nearest."""
    p = predict(_problems(), _times(lambda m, r: 1.0 + 0.1 * r), kernel_hash="h", triton_version="v")
    assert p is not None and p.chosen == NEAREST and "nearest lost +0.0%" in p.why


def test_picks_never_timed_on_their_point_are_not_a_measurement():
    """Each point timed only its own best: the model's picks on a left-out point were never timed there, so it
    is not served; nor is a sweep of two points, or one with a point that has no time, predicted."""
    p = predict(_problems(), _times(valley, only=lambda m, r: r == min(m // 16, ROWS[-1])), kernel_hash="h", triton_version="v")
    assert p is not None and p.chosen == NEAREST and p.measured == 0 and "not measured enough" in p.why
    assert predict(_problems()[:2], _times(valley)[:2], kernel_hash="h", triton_version="v") is None
    holed = _times(valley)
    holed[3] = {k: (c, None) for k, (c, _) in holed[3].items()}
    assert predict(_problems(), holed, kernel_hash="h", triton_version="v") is None


def _swept(tmp_path, prediction):
    """A softmax sweep over POINTS with each point's best stored and `prediction` stored for this device."""
    db = f"sqlite:///{tmp_path / 'p.db'}"
    store, op, device = Store(db), get_op("softmax"), current_device()
    for m, problem in zip(POINTS, _problems(), strict=True):
        best = min(ROWS, key=lambda r: valley(m, r))
        store.save_best(op=op, problem=problem, device=device, config={**CONFIG, "ROWS": best},
                        median_ms=valley(m, best), default_ms=None, torch_ms=None, run_id=None)
    sweep_id = store.create_sweep(op="softmax", dtype="float32", options={}, dim="ROWS",
                                  shapes=[f"{m}x1000" for m in POINTS])
    with session_scope(store.engine) as s:
        repo.save_sweep_prediction(s, sweep_id=sweep_id, device_key=device.key, prediction=prediction)
    return db, store, op, device


def test_between_the_points_the_models_pick_is_served_with_the_loss_it_was_measured_at(tmp_path):
    p = predict(_problems(), _times(valley), kernel_hash=get_op("softmax").kernel_hash,
                triton_version=versions()[0])
    assert p is not None
    db, store, op, device = _swept(tmp_path, p.as_json())
    q = op.parse_problem("48x1000", "float32")
    for reader in (store, LazyStore(db, create=False, retry_s=0).get()):  # the Store, and sqlite3's reads
        res = resolve(op, q, device, store=reader)
        assert (res.source, res.config["ROWS"]) == ("predicted", 4), res.trace
    answer = answer_config(store, op, q, device)
    assert answer.source == "predicted" and answer.expected_regret == pytest.approx(0.0)
    assert "picked by a model of sweep" in (answer.regret_basis or "") and "+30.0%" in (answer.regret_basis or "")
    # a swept point is served its own result; outside the points, nearest
    assert resolve(op, op.parse_problem("64x1000", "float32"), device, store=store).source == "exact"
    assert resolve(op, op.parse_problem("4096x1000", "float32"), device, store=store).source != "predicted"


@pytest.mark.parametrize("spoil", [
    {"kernel_hash": "another version of the kernel"}, {"chosen": NEAREST}, {"picks": [99, 0]}, {"picks": "all"},
    {"model_loss": -1}, {"configs": []}])
def test_a_prediction_that_is_stale_unchosen_or_malformed_is_never_served(tmp_path, spoil):
    p = predict(_problems(), _times(valley), kernel_hash=get_op("softmax").kernel_hash,
                triton_version=versions()[0])
    assert p is not None
    db, store, op, device = _swept(tmp_path, {**p.as_json(), **spoil})
    res = resolve(op, op.parse_problem("48x1000", "float32"), device, store=store)
    assert res.source != "predicted" and not any("pick" in t for t in res.trace)


def test_a_pick_the_space_rejects_here_is_not_served(tmp_path):
    p = predict(_problems(), _times(valley), kernel_hash=get_op("softmax").kernel_hash,
                triton_version=versions()[0])
    assert p is not None
    bad = {**p.as_json(), "configs": [{**c, "num_warps": 3} for c in p.as_json()["configs"]]}
    db, store, op, device = _swept(tmp_path, bad)
    res = resolve(op, op.parse_problem("48x1000", "float32"), device, store=store)
    assert res.source != "predicted" and any("predicted pick is not valid here" in t for t in res.trace)


def _trials(store, op, device, problem, rows):
    """A run at `problem` that measured every ROWS of the valley."""
    run = store.start_run(op=op, problem=problem, device=device, strategy="exhaustive", budget_trials=None,
                          budget_seconds=None, clock="wall-clock (interpreter)")
    for r in ROWS:
        config = {**CONFIG, "ROWS": r}
        store.record_trial(run_id=run, config=config, config_key=config_key(config), status="ok",
                           median_ms=valley(rows, r))
    store.finish_run(run_id=run, status="done")


def test_a_miss_between_the_points_is_queued_itself_with_a_few_trials_the_fastest_either_side_first(tmp_path):
    """48 rows lie between the points 32 and 64: its job asks for MISS_TRIALS trials (a key outside the sweep, the
    bucket with the default budget), and what its tuning measures first is the model's pick there, then the
    configs fastest on 32 and on 64, each once."""
    from sqlalchemy import select

    from autotuner.base.settings import Settings
    from autotuner.launch.lookup import MISS_TRIALS, Resolver
    from autotuner.store.regret import bracketing_configs
    from db.models import Job

    p = predict(_problems(), _times(valley), kernel_hash=get_op("softmax").kernel_hash,
                triton_version=versions()[0])
    assert p is not None and p.chosen == MODEL
    db, store, op, device = _swept(tmp_path, p.as_json())
    for m in (32, 64):
        _trials(store, op, device, op.parse_problem(f"{m}x1000", "float32"), m)
    q = op.parse_problem("48x1000", "float32")
    first = bracketing_configs(store, op, q, device, per_side=2)
    # the pick (ROWS=4, as served above); then the fastest on 32 (2) and on 64 (4: there already); then the
    # second fastest on 32 (1: tied with 4, measured first) and on 64 (2: tied with 8, measured first; there already)
    assert [c["ROWS"] for c in first] == [4, 2, 1]
    assert bracketing_configs(store, op, op.parse_problem("64x1000", "float32"), device) == []  # a point
    assert bracketing_configs(store, op, op.parse_problem("4000x1000", "float32"), device) == []  # outside
    r = Resolver(Settings(db_url=db, tune_on_miss=True))
    for rows in (48, 4000):
        r.resolve(op, op.parse_problem(f"{rows}x1000", "float32"), device)
    r._join_background()
    with session_scope(store.engine) as s:
        jobs = {j.shape: j.budget_trials for j in s.scalars(select(Job))}
    assert jobs == {"48x1000": MISS_TRIALS, "4096x1000": None}


def test_a_plans_first_configs_are_measured_right_after_the_default(tmp_path):
    from autotuner.base.settings import Settings
    from autotuner.engine.tuner import Plan, tune

    db = f"sqlite:///{tmp_path / 't.db'}"
    store, op, device = Store(db), get_op("softmax"), current_device()
    problem = op.parse_problem("8x64", "float32")
    default = op.space.default(problem, device)
    others = [c for c in op.space.enumerate(problem, device).valid if c != default][-2:]
    result = tune(op, problem, store=store, settings=Settings(db_url=db), device=device,
                  plan=Plan(strategy="random", trials=3, first=tuple(others[::-1])))
    assert [t.config for t in result.trials] == [default, others[1], others[0]]
