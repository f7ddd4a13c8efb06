"""Reliability: concurrent writers, a killed tuning run, export/import round trips; SQLite and PostgreSQL."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import func, select

from autotuner.base.registry import get_op
from autotuner.store.database import Store
from autotuner.store.transfer import export_data, import_data, op_files, triton_configs
from db.engine import session_scope
from db.models import BestConfig, Trial, TuningRun
from tests.support.devices import H100 as GPU

WRITERS, TRIALS_EACH = 8, 25


def _writer(db_url: str, seed: int, queue: mp.Queue) -> None:
    rng = random.Random(seed)
    op = get_op("matmul")
    problem = op.parse_problem("4096x4096x4096")
    store = Store(db_url)
    run_id = store.start_run(op=op, problem=problem, device=GPU, strategy="tpe", budget_trials=TRIALS_EACH,
                             budget_seconds=None, clock="cuda-events")
    written = []
    for i in range(TRIALS_EACH):
        ms = rng.uniform(0.2, 1.0)
        cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "i": i}
        store.record_trial(run_id=run_id, config=cfg, config_key=f"{seed}-{i}", status="ok", median_ms=ms)
        store.save_best(op=op, problem=problem, device=GPU, config=cfg, median_ms=ms, default_ms=None, torch_ms=None,
                        run_id=run_id)
        written.append(ms)
    store.finish_run(run_id=run_id, status="done")
    queue.put(written)


def test_eight_processes_write_at_once(url):
    Store(url)  # create the schema once, as `autotuner db upgrade` would
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, seed, queue)) for seed in range(WRITERS)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, "a writer failed (e.g. 'database is locked')"
    store = Store(url)
    with session_scope(store.engine) as s:
        assert s.scalar(select(func.count(Trial.id))) == WRITERS * TRIALS_EACH
        assert s.scalar(select(func.count(TuningRun.id)).where(TuningRun.status == "done")) == WRITERS
        best = s.scalars(select(BestConfig)).one()
    assert best.median_ms == min(ms for r in results for ms in r)


def _ok_trials(db_url: str) -> dict[str, float]:
    store = Store(db_url)
    with session_scope(store.engine) as s:
        return {t.config_key: t.median_ms for t in s.scalars(select(Trial).where(Trial.status == "ok"))}


def test_a_killed_tuning_run_keeps_every_measured_trial(tmp_path):
    """Every trial the tune process reported as measured (its progress lines) is in the database after a SIGKILL
    of the process group, with the time it reported."""
    db_url = f"sqlite:///{tmp_path / 'killed.db'}"
    proc = subprocess.Popen([sys.executable, "-m", "autotuner", "tune", "softmax", "--shape", "32x300",
                             "--strategy", "exhaustive", "--trials", "500", "--db", db_url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stderr is not None
    reported: dict[str, float] = {}
    deadline = time.time() + 240
    for line in proc.stderr:  # "[   2.1s] trial 3/180 {config} 12.3456 ms  best ..."
        if "] trial " in line and " ms  best" in line:
            config = json.loads(line[line.index("{"):line.index("}") + 1])
            reported[json.dumps(config, sort_keys=True, separators=(",", ":"))] = float(line.split("} ")[1].split()[0])
        if len(reported) >= 3 or time.time() > deadline:
            break
    assert len(reported) >= 3, "the run never got going"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    stored = _ok_trials(db_url)
    for key, ms in reported.items():
        assert key in stored, f"reported trial {key} is not in the database"
        assert stored[key] == pytest.approx(ms, rel=1e-3, abs=1e-4)
    store = Store(db_url)
    with session_scope(store.engine) as s:
        run = s.scalars(select(TuningRun)).one()
        assert run.status == "running" and run.finished_at is None  # it died; nothing pretended otherwise


def _fill(store: Store) -> None:
    op = get_op("matmul")
    for shape, ms in (("4096x4096x4096", 0.25), ("32x4096x4096", 0.02), ("4096x4096x4096", 0.3)):
        problem = op.parse_problem(shape)
        run_id = store.start_run(op=op, problem=problem, device=GPU, strategy="tpe", budget_trials=2,
                                 budget_seconds=30.0, clock="cuda-events")
        cfg = op.space.default(problem, GPU)
        store.record_trial(run_id=run_id, config=cfg, config_key="a", status="ok", median_ms=ms, p20_ms=ms * 0.9,
                           p80_ms=ms * 1.1, compile_s=1.0)
        store.record_trial(run_id=run_id, config=cfg, config_key="b", status="timeout", error="no answer")
        store.record_rejections(run_id=run_id, rejected=op.space.enumerate(problem, GPU).rejected)
        store.finish_run(run_id=run_id, status="done")
        store.save_best(op=op, problem=problem, device=GPU, config=cfg, median_ms=ms, default_ms=ms * 1.2,
                        torch_ms=ms * 0.9, run_id=run_id)


def test_export_import_round_trips_exactly(url, tmp_path):
    source = Store(url)
    _fill(source)
    data = export_data(source)
    assert len(data["runs"]) == 3 and len(data["best_configs"]) == 2
    target = Store(f"sqlite:///{tmp_path / 'copy.db'}")
    counts = import_data(target, json.loads(json.dumps(data)))
    assert counts == {"devices": 1, "runs": 3, "trials": 6, "best_configs": 2}
    assert export_data(target) == data
    assert import_data(target, data) == {"devices": 0, "runs": 0, "trials": 0, "best_configs": 0}
    only = export_data(source, op="matmul", problem_key="32x4096x4096:float16")
    assert [b["problem_key"] for b in only["best_configs"]] == ["32x4096x4096:float16"]


def test_an_export_listing_rejections_as_trials_is_imported_as_counts(url, tmp_path):
    """Files exported before rejections were counts hold one `invalid` trial per rejected config."""
    source = Store(url)
    _fill(source)
    data = export_data(source)
    run = data["runs"][0]
    # a run counts its rejections per rule (a config breaking two rules counts under each)
    assert run["rejected"] > 0 and sum(e["count"] for e in run["rejections"].values()) >= run["rejected"]
    old = {k: v for k, v in run.items() if k not in ("rejected", "rejections")}
    old["trials"] = run["trials"] + [
        {"config": {"BLOCK_M": 256}, "config_key": f"r{i}", "status": "invalid", "median_ms": None, "p20_ms": None,
         "p80_ms": None, "retimed_ms": None, "compile_s": None, "created_at": run["started_at"],
         "error": f"shared memory {i * 1000} B (pipeline) exceeds the device's 232448 B per block"}
        for i in range(3)]
    target = Store(f"sqlite:///{tmp_path / 'copy.db'}")
    counts = import_data(target, {**data, "runs": [old], "best_configs": []})
    assert counts["trials"] == 2  # the measured and the timed-out trial; the three rejections became counts
    imported = export_data(target)["runs"][0]
    assert imported["rejected"] == 3 and imported["rejections"] == {
        "shared memory N B (pipeline) exceeds the device's N B per block": {
            "count": 3, "example": "shared memory 0 B (pipeline) exceeds the device's 232448 B per block"}}


def test_import_never_replaces_a_faster_result(url, tmp_path):
    store = Store(url)
    _fill(store)
    data = export_data(store)
    for b in data["best_configs"]:
        b["median_ms"] *= 2  # the same results, but slower
        b["config"] = {**b["config"], "num_stages": 2}
    import_data(store, data)
    op = get_op("matmul")
    best = store.best(op=op, problem=op.parse_problem("4096x4096x4096"), device=GPU)
    assert best is not None and best.median_ms == 0.25 and best.config["num_stages"] != 2


def test_import_rejects_what_is_not_an_export(url):
    store = Store(url)
    with pytest.raises(ValueError, match="not an autotuner export"):
        import_data(store, {"runs": []})


def test_triton_and_vllm_exports(url):
    store = Store(url)
    _fill(store)
    data = export_data(store)
    source = triton_configs(data, "matmul")
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102  (our own generated code: it must be valid Python)
    assert len(namespace["configs"]) == 2
    assert {c.num_warps for c in namespace["configs"]} <= {4, 8}
    files, notes = op_files(data, "vllm")
    assert notes == []  # plain pointer winners: nothing dropped or changed
    assert list(files) == ["N=4096,K=4096,device_name=NVIDIA_H100_80GB_HBM3,dtype=float16.json"]
    table = files["N=4096,K=4096,device_name=NVIDIA_H100_80GB_HBM3,dtype=float16.json"]
    assert list(table) == ["32", "4096"] and set(table["32"]) == {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K",
                                                                  "GROUP_SIZE_M", "num_warps", "num_stages"}


def test_vllm_export_replaces_a_tma_winner_and_says_what_it_dropped(url):
    """vLLM's kernel loads through pointers without split-K: a TMA winner becomes its run's fastest pointer config,
    and a winner with no such config in its run is left out; both are named in the notes."""
    store = Store(url)
    op = get_op("matmul")
    tma = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1, "TMA": 1, "num_warps": 8,
           "num_stages": 3}
    pointer = {**tma, "TMA": 0, "num_stages": 4}
    for shape, trials in (("4096x4096x4096", [(tma, 0.1883), (pointer, 0.1899)]), ("1024x1024x1024", [(tma, 0.0096)])):
        problem = op.parse_problem(shape)
        run_id = store.start_run(op=op, problem=problem, device=GPU, strategy="tpe", budget_trials=2,
                                 budget_seconds=None, clock="cuda-events")
        for i, (cfg, ms) in enumerate(trials):
            store.record_trial(run_id=run_id, config=cfg, config_key=str(i), status="ok", median_ms=ms)
        store.finish_run(run_id=run_id, status="done")
        store.save_best(op=op, problem=problem, device=GPU, config=tma, median_ms=trials[0][1], default_ms=None,
                        torch_ms=None, run_id=run_id)
    files, notes = op_files(export_data(store), "vllm")
    assert list(files) == ["N=4096,K=4096,device_name=NVIDIA_H100_80GB_HBM3,dtype=float16.json"]
    table = files["N=4096,K=4096,device_name=NVIDIA_H100_80GB_HBM3,dtype=float16.json"]
    assert table == {"4096": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8,
                              "num_warps": 8, "num_stages": 4}}
    assert len(notes) == 2
    assert "4096x4096x4096" in notes[0] and "TMA" in notes[0] and "0.1899 ms" in notes[0]
    assert "1024x1024x1024" in notes[1] and "left out" in notes[1]
