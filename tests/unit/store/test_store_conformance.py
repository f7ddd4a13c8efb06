"""One conformance suite for every implementation of the store's read interface (`ResultReader`, as Optuna runs
one suite over its storages): the full Store on SQLite and on PostgreSQL, a launching process's stdlib-sqlite3
reads (`LaunchReads`), a worker's job store (`JobStore`), and an in-memory backend that is test code
(tests/support/memory_store.py, registered for `memory://`): the rows are written once through the store's
interfaces; each reader must answer the same. A new backend joins by registering its URL scheme
(autotuner.store.register_backend) and adding its kind to `READERS`."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.store import open_store
from autotuner.store.job_store import JobStore
from autotuner.store.lazy import LaunchReads, LazyStore
from search_spaces.space import config_key
from tests.support import memory_store

READERS = ["store-sqlite", pytest.param("store-postgresql", marks=pytest.mark.postgres), "launch-reads",
           "job-store", "memory"]
FAST = {"BLOCK_N": 128, "ROWS": 1, "num_warps": 4, "num_stages": 1}
SLOW = {"BLOCK_N": 128, "ROWS": 2, "num_warps": 2, "num_stages": 1}
ONCE = {"BLOCK_N": 256, "ROWS": 2, "num_warps": 2, "num_stages": 1}


@pytest.fixture(params=READERS)
def written(request, tmp_path):
    """(the reader, the Store that wrote the rows): softmax 16x100 tuned now (a run of two trials, one failed),
    16x400 and 64x100 tuned now, 16x200 tuned only under another kernel hash (stale), a sweep over 16x100 and
    16x400 with its cross timings."""
    if request.param == "store-postgresql":
        url = request.getfixturevalue("pg_url")
    elif request.param == "memory":
        url = f"memory://{tmp_path}"
    else:
        url = f"sqlite:///{tmp_path / 'conformance.db'}"
    store = open_store(url)
    op, device = get_op("softmax"), current_device()
    p = {shape: op.parse_problem(shape, "float32") for shape in ("16x100", "16x400", "64x100", "16x200")}
    run = store.start_run(op=op, problem=p["16x100"], device=device, strategy="tpe", budget_trials=2,
                          budget_seconds=None, clock="wall")
    store.record_trial(run_id=run, config=FAST, config_key=config_key(FAST), status="ok", median_ms=1.5)
    store.record_trial(run_id=run, config=SLOW, config_key=config_key(SLOW), status="crash", error="boom")
    store.record_trial(run_id=run, config=ONCE, config_key=config_key(ONCE), status="crash", error="driver error 700")
    store.finish_run(run_id=run, status="done")
    again = store.start_run(op=op, problem=p["16x100"], device=device, strategy="tpe", budget_trials=2,
                            budget_seconds=None, clock="wall")  # SLOW fails again with the same cause; ONCE is not tried
    store.record_trial(run_id=again, config=SLOW, config_key=config_key(SLOW), status="crash", error="boom")
    store.finish_run(run_id=again, status="done")
    store.save_best(op=op, problem=p["16x100"], device=device, config=FAST, median_ms=1.5, default_ms=3.0,
                    torch_ms=2.0, run_id=run)
    store.save_best(op=op, problem=p["16x100"], device=device, config=SLOW, median_ms=9.0, default_ms=3.0,
                    torch_ms=2.0, run_id=None)  # slower: not kept
    store.save_best(op=op, problem=p["16x400"], device=device, config=SLOW, median_ms=4.0, default_ms=None,
                    torch_ms=None, run_id=None)
    store.save_best(op=op, problem=p["64x100"], device=device, config=SLOW, median_ms=6.0, default_ms=None,
                    torch_ms=None, run_id=None)
    older = copy.copy(op)  # the same op at another version of its kernel
    older.__dict__["kernel_hash"] = "an-older-kernel"
    store.save_best(op=older, problem=p["16x200"], device=device, config=FAST, median_ms=1.0, default_ms=None,
                    torch_ms=None, run_id=None)
    sweep = store.create_sweep(op=op.name, dtype="float32", options={}, dim="cols",
                               shapes=["16x100", "16x400"], target=0.02, budget=2)
    store.save_cross_timings(sweep_id=sweep, op=op, device=device, cells=[
        dict(winner_key=p["16x100"].key, on_key=p["16x400"].key, config=FAST, ms=4.4, own_ms=4.0),
        dict(winner_key=p["16x400"].key, on_key=p["16x100"].key, config=SLOW, ms=None, own_ms=1.5)])
    if request.param == "launch-reads":
        reader = LazyStore(url, create=False, retry_s=1.0).get()
        assert isinstance(reader, LaunchReads)
    elif request.param == "job-store":
        reader = JobStore(open_store(url), job_id=1, worker="w", retry_s=1.0)
    else:
        reader = open_store(url)
    if request.param == "memory":  # opened through the registry, not the SQL store
        assert isinstance(reader, memory_store.MemoryStore) and reader is store
    return reader, store, op, device, p, sweep


def test_best_is_the_current_fastest_else_the_newest_stale_else_none(written):
    reader, _, op, device, p, _ = written
    best = reader.best(op=op, problem=p["16x100"], device=device)
    assert best is not None and not best.stale and best.config == FAST and best.median_ms == 1.5
    assert best.default_ms == 3.0 and best.torch_ms == 2.0 and best.problem_key == p["16x100"].key
    stale = reader.best(op=op, problem=p["16x200"], device=device)
    assert stale is not None and stale.stale and "kernel" in stale.stale_reason
    named = reader.best(op=op, problem=p["16x200"], device=device, kernel_hash="an-older-kernel")
    assert named is not None and not named.stale and named.config == FAST
    assert reader.best(op=op, problem=op.parse_problem("16x100", "float16"), device=device) is None


def test_nearest_ranks_current_results_of_the_same_dtype_and_leaves_stale_ones_out(written):
    reader, _, op, device, p, _ = written
    ranked = reader.nearest(op=op, problem=op.parse_problem("16x180", "float32"), device=device, limit=3)
    keys = [q.key for q, _ in ranked]
    assert keys[0] == p["16x100"].key and p["16x200"].key not in keys and set(keys) <= {p[s].key for s in p}
    assert [row.config for q, row in ranked if q.key == p["16x100"].key] == [FAST]
    assert len(reader.nearest(op=op, problem=op.parse_problem("16x180", "float32"), device=device, limit=1)) == 1
    assert reader.nearest(op=op, problem=op.parse_problem("16x180", "float16"), device=device) == []


def test_trial_times_hold_every_measured_config_and_the_failed_as_none(written):
    """Where a config ran, the failed ones are answers: SLOW (failed twice) and ONCE (failed once) are None."""
    reader, _, op, device, p, _ = written
    times = reader.trial_times(op=op, problem=p["16x100"], device=device)
    assert times == {config_key(FAST): (FAST, 1.5), config_key(SLOW): (SLOW, None), config_key(ONCE): (ONCE, None)}
    assert reader.trial_times(op=op, problem=p["16x400"], device=device) == {}


def test_sweeps_and_their_cross_timings_read_back_as_written(written):
    reader, store, op, device, p, sweep = written
    sweeps = reader.sweeps(op="softmax")
    assert [(s.id, s.shapes, s.dim, s.target, s.budget) for s in sweeps] == [(sweep, ("16x100", "16x400"), "cols",
                                                                               0.02, 2)]
    assert reader.sweeps(op="matmul") == []
    cells = sorted(reader.cross_timings(sweep, device_key=device.key), key=lambda c: c.winner_key)
    assert [(c.winner_key, c.on_key, dict(c.config), c.ms, c.own_ms) for c in cells] == [
        (p["16x100"].key, p["16x400"].key, FAST, 4.4, 4.0), (p["16x400"].key, p["16x100"].key, SLOW, None, 1.5)]
    assert reader.cross_timings(sweep, device_key="another-device") == []
    assert [dataclasses.asdict(c) for c in cells] == [
        dataclasses.asdict(c) for c in sorted(store.cross_timings(sweep, device_key=device.key),
                                              key=lambda c: c.winner_key)]


def test_where_every_config_failed_a_failure_is_kept_only_while_it_repeats_with_the_same_cause():
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from autotuner.store.row_checks import FAILURE_KEPT_S, trial_times

    now = datetime.now(timezone.utc)

    def trial(status, error=None, ago_s=0.0, ms=None):
        return SimpleNamespace(id=1, config_key="k", config={"BLOCK": 1}, status=status, median_ms=ms,
                               retimed_ms=None, error=error, created_at=now - timedelta(seconds=ago_s))

    timeout, crash = trial("timeout", "no answer in 10.0 s"), trial("timeout", "no answer in 12.5 s")
    assert trial_times([timeout], now) == {}  # once: measured again
    assert trial_times([timeout, crash], now) == {"k": ({"BLOCK": 1}, None)}  # the same cause, its numbers aside
    assert trial_times([timeout, trial("crash", "exit 11")], now) == {}  # another cause
    late = trial("timeout", "no answer in 10.0 s", ago_s=FAILURE_KEPT_S + 60)
    assert trial_times([timeout, late], now) == {}  # kept for a bounded time
    assert trial_times([timeout, crash, trial("ok", ms=2.0)], now) == {"k": ({"BLOCK": 1}, 2.0)}
    assert trial_times([trial("ok", ms=2.0), timeout], now) == {}  # a time, then a failure: measured again
    other = SimpleNamespace(**{**vars(trial("ok", ms=1.0)), "config_key": "j", "config": {"BLOCK": 2}})
    assert trial_times([timeout, other], now) == {"k": ({"BLOCK": 1}, None), "j": ({"BLOCK": 2}, 1.0)}  # another ran


def test_a_stored_config_holds_what_a_launch_takes():
    """A row's config is read back as a launch takes it: numbers, strings, bools, None and lists of them (a tuple
    constexpr as JSON keeps it); not a NaN, not an object, and for a built-in op only its own parameters and values."""
    from autotuner.store.row_checks import config_fault

    softmax = get_op("softmax").space
    assert config_fault({"BLOCK": 32, "ACT": None, "SHAPE": [16, 16], "FAST": True, "MODE": "x"}) is None
    assert "not a value" in config_fault({"BLOCK": float("nan")})
    assert "not a value" in config_fault({"BLOCK": {"nested": 1}})
    assert "not a JSON object" in config_fault([1, 2])
    assert config_fault(FAST, softmax) is None
    assert "unknown parameter" in config_fault({**FAST, "BOGUS": 1}, softmax)
    assert "outside the space" in config_fault({**FAST, "BLOCK_N": 3}, softmax)
