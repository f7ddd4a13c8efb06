"""`autotuner.autotune`, a drop-in for `@triton.autotune`, on the interpreter, on SQLite and PostgreSQL: the miss
policies, results shared between processes, triton.autotune's hooks and pruning, recording and offline tuning
by a worker, and clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from sqlalchemy import func, select

import autotuner
from autotuner.base.device import current_device
from autotuner.base.settings import Settings
from autotuner.decorator.autotuned import KernelNotTuned
from autotuner.decorator.configs import config_dict
from autotuner.launch.lookup import Resolver, set_resolver
from autotuner.store.database import Store
from db.engine import session_scope
from db.models import Job, Trial, TuningRun
from tests.support import decorated_kernels as dk
from tests.support.devices import H100

ROOT = Path(__file__).resolve().parents[2]


def grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


@pytest.fixture
def use(url):
    """Install a resolver on `url` with these settings, and fresh in-process caches on the test kernels."""
    def install(**settings):
        set_resolver(Resolver(Settings(db_url=url, **settings)))
        for k in (dk.scale_kernel, dk.accumulate, dk.bump):
            k.cache.clear()
            k.sources.clear()
            k._recheck.clear()
    yield install
    set_resolver(None)


def _count(url, model, **where):
    with session_scope(Store(url).engine) as s:
        q = select(func.count()).select_from(model)
        for k, v in where.items():
            q = q.where(getattr(model, k) == v)
        return int(s.scalar(q) or 0)


def _launch_elsewhere(url, n, **env):
    out = subprocess.run([sys.executable, "-m", "tests.support.decorated_kernels", str(n)], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, env={**os.environ, "AUTOTUNER_DB_URL": url, **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tune_here_then_a_second_process_runs_no_trial(url, use):
    use(on_miss="tune")
    x, y = torch.randn(700), torch.empty(700)
    dk.scale_kernel[grid(700)](x, y, 700, 3.0)
    torch.testing.assert_close(y, 3 * x)
    key = next(iter(dk.scale_kernel.cache))
    assert dk.scale_kernel.sources[key].startswith("tuned here")
    trials = _count(url, Trial)
    assert trials == 3  # every config of the list, each checked against the default's output
    other = _launch_elsewhere(url, 700)
    assert other["source"].startswith("exact (database)") and other["config"] == config_dict(dk.scale_kernel.cache[key])
    assert _count(url, Trial) == trials  # the second process measured nothing


def test_adding_a_config_to_the_list_times_only_the_new_one(url, use):
    use(on_miss="tune")
    kernel = autotuner.autotune(configs=dk.CONFIGS[:2], key=["n"], name="tests:growing")(dk.scale_kernel.fn)
    x, y = torch.randn(300), torch.empty(300)
    kernel[grid(300)](x, y, 300, 2.0)
    assert _count(url, Trial) == 2
    grown = autotuner.autotune(configs=dk.CONFIGS, key=["n"], name="tests:growing")(dk.scale_kernel.fn)
    grown[grid(300)](x, y, 300, 2.0)
    assert _count(url, Trial) == 3  # only the added config was timed
    torch.testing.assert_close(y, 2 * x)


def test_default_policy_launches_at_once_and_queues_the_recorded_call(url, use):
    use(on_miss="default")
    x, y = torch.randn(500), torch.empty(500)
    dk.scale_kernel[grid(500)](x, y, 500, 2.0)
    torch.testing.assert_close(y, 2 * x)
    key = next(iter(dk.scale_kernel.cache))
    assert config_dict(dk.scale_kernel.cache[key]) == {"BLOCK": 32, "num_warps": 1, "num_stages": 3}  # the list's first
    assert _count(url, Trial) == 0
    with session_scope(Store(url).engine) as s:
        job = s.scalars(select(Job)).one()
    assert job.op == "tests.support.decorated_kernels:scale_kernel" and job.shape == "n=500" and job.dtype == "float32"
    call = job.options["call"]
    assert call["args"]["x_ptr"] == {"tensor": {"shape": [500], "stride": [1], "dtype": "float32"}}
    assert call["args"]["factor"] == {"value": 2.0} and len(call["grids"]) == 3


def test_record_worker_launch_end_to_end(url, use):
    """A process records (default policy), a worker imports the kernel by its recorded name and tunes it, and a
    later process launches the tuned config without measuring anything."""
    first = _launch_elsewhere(url, 900, AUTOTUNER_ON_MISS="default")
    assert first["source"].startswith("default")
    worker = subprocess.run([sys.executable, "-m", "autotuner", "worker", "--once", "--db", url], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert worker.returncode == 0, worker.stderr + worker.stdout
    with session_scope(Store(url).engine) as s:
        job = s.scalars(select(Job)).one()
    assert job.state == "done", job.error
    assert _count(url, TuningRun, status="done") == 1 and _count(url, Trial) == 3
    later = _launch_elsewhere(url, 900, AUTOTUNER_ON_MISS="error")
    assert later["source"].startswith("exact")
    assert _count(url, Trial) == 3


def test_error_policy_names_the_kernel_the_key_and_the_fix(url, use):
    use(on_miss="error")
    with pytest.raises(KernelNotTuned, match=r"scale_kernel has no tuned config for key n=64:float32 .*AUTOTUNER_ON_MISS=tune"):
        dk.scale_kernel[grid(64)](torch.randn(64), torch.empty(64), 64, 1.0)


def test_hooks_and_pruning_behave_as_in_triton_autotune(url, use):
    """reset_to_zero (an atomic accumulation), restore_value (an in-place update) and early_config_prune give the
    outputs triton.autotune gives, after tuning and on a cache hit."""
    use(on_miss="tune")
    x = torch.randn(1000)
    ours, theirs = torch.zeros(1), torch.zeros(1)
    dk.accumulate[grid(1000)](x, ours, 1000)
    dk.accumulate_triton[grid(1000)](x, theirs, 1000)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours, x.sum().reshape(1), rtol=1e-4, atol=1e-4)
    assert dk.accumulate.best_config.kwargs["BLOCK"] != 64  # pruned away
    assert _count(url, Trial) == 2  # the pruned list only
    dk.accumulate[grid(1000)](x, ours, 1000)  # a hit: no reset, as in triton.autotune
    dk.accumulate_triton[grid(1000)](x, theirs, 1000)
    torch.testing.assert_close(ours, theirs)
    a, b = torch.zeros(1000), torch.zeros(1000)
    dk.bump[grid(1000)](a, 1000)
    dk.bump_triton[grid(1000)](b, 1000)
    torch.testing.assert_close(a, b)
    assert torch.equal(a, torch.ones(1000))  # timing did not drift it: restored after every timed launch


def test_a_stale_result_is_launched_and_a_retune_queued(url, use):
    use(on_miss="error")
    op = dk.scale_kernel.op
    problem = dk.scale_kernel.problem({"n": 128, "x_ptr": torch.zeros(1), "y_ptr": torch.zeros(1)})
    store = Store(url)
    from db import repository as repo

    cfg = {"BLOCK": 64, "num_warps": 2, "num_stages": 3}
    with session_scope(store.engine) as s:
        repo.save_best(s, op=op.name, problem_key=problem.key, problem={"values": [["n", 128]], "dtypes": ["float32"]},
                       device_id=store.device_id(current_device()), kernel_hash=op.kernel_hash,
                       triton_version="0.0.1-old", config=cfg, median_ms=1.0, default_ms=None, torch_ms=None,
                       run_id=None)
    x, y = torch.randn(128), torch.empty(128)
    dk.scale_kernel[grid(128)](x, y, 128, 2.0)
    key = next(iter(dk.scale_kernel.cache))
    assert config_dict(dk.scale_kernel.cache[key]) == cfg and dk.scale_kernel.sources[key].startswith("stale")
    assert _count(url, Job, op=op.name) == 1


def test_two_processes_missing_one_key_tune_it_once(url):
    procs = [subprocess.Popen([sys.executable, "-m", "tests.support.decorated_kernels", "2048"], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "AUTOTUNER_DB_URL": url, "AUTOTUNER_ON_MISS": "tune"})
             for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert _count(url, TuningRun) == 1  # one tuned, the other waited (or found its winner)
    assert results[0]["config"] == results[1]["config"]


def test_bad_declarations_and_jobs_are_named(url):
    with pytest.raises(ValueError, match="key names 'm', which is not an argument of the kernel; accepted: x_ptr"):
        autotuner.autotune(configs=dk.CONFIGS, key=["m"])(dk.scale_kernel.fn)
    with pytest.raises(ValueError, match="config 0 sets 'BLOCK_M', which is not a tl.constexpr parameter"):
        autotuner.autotune(configs=[triton.Config({"BLOCK_M": 32})], key=["n"])(dk.scale_kernel.fn)
    store = Store(url)
    store.queue_job(op="no_such_module:kernel", shape="n=8", dtype="float32", options={"call": {}})
    store.queue_job(op="tests.support.decorated_kernels:scale_kernel", shape="n=8", dtype="float32", options={})
    worker = subprocess.run([sys.executable, "-m", "autotuner", "worker", "--until-empty", "--db", url], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert worker.returncode == 0, worker.stderr
    with session_scope(store.engine) as s:
        jobs = {j.op: j for j in s.scalars(select(Job))}
    assert jobs["no_such_module:kernel"].state == "failed"
    assert "kernel module 'no_such_module' is not allowed" in jobs["no_such_module:kernel"].error
    rebuilt = jobs["tests.support.decorated_kernels:scale_kernel"]
    assert rebuilt.state == "failed" and "no recorded call to rebuild its arguments" in rebuilt.error


@triton.jit
def _gather(x_ptr, idx_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + tl.load(idx_ptr + offs, mask=mask), mask=mask), mask=mask)


def test_make_inputs_makes_recorded_arguments_valid(url, use):
    """An index tensor rebuilt at random is not valid input: make_inputs gets the rebuilt arguments and fixes them."""
    seen = []

    def valid_indices(args):
        seen.append(sorted(args))
        args["idx_ptr"] = torch.randperm(args["n"], dtype=torch.int64)
        return args

    kernel = autotuner.autotune(configs=dk.CONFIGS[:2], key=["n"], name="tests:gather", make_inputs=valid_indices,
                                on_miss="default")(_gather)
    use()
    x, idx, y = torch.randn(64), torch.randperm(64), torch.empty(64)
    kernel[grid(64)](x, idx, y, 64)
    torch.testing.assert_close(y, x[idx])
    problem = kernel.problem(kernel.named((x, idx, y, 64), {}))
    with session_scope(Store(url).engine) as s:
        job = s.scalars(select(Job)).one()
    recorded = kernel.op.parse_problem(job.shape, job.dtype, **job.options)
    assert recorded.key == problem.key
    inputs = kernel.op.make_inputs(recorded, "cpu")
    assert seen == [["idx_ptr", "n", "x_ptr", "y_ptr"]] and inputs["args"]["idx_ptr"].dtype == torch.int64
    out = kernel.op.run_checked(inputs, {"BLOCK": 32, "num_warps": 1, "num_stages": 3})
    torch.testing.assert_close(out["y_ptr"], inputs["args"]["x_ptr"][inputs["args"]["idx_ptr"]])


def test_a_config_that_fails_counts_as_measured(url, use):
    """A config of the list that cannot run (BLOCK=48: not a power of two) is recorded as failed once; later
    processes neither re-time it nor tune the key again."""
    use(on_miss="tune")
    configs = [*dk.CONFIGS[:2], triton.Config({"BLOCK": 48}, num_warps=1)]
    kernel = autotuner.autotune(configs=configs, key=["n"], name="tests:with_a_bad_config")(dk.scale_kernel.fn)
    x, y = torch.randn(200), torch.empty(200)
    kernel[grid(200)](x, y, 200, 2.0)
    torch.testing.assert_close(y, 2 * x)
    assert _count(url, Trial) == 3 and _count(url, Trial, status="ok") == 2
    again = autotuner.autotune(configs=configs, key=["n"], name="tests:with_a_bad_config")(dk.scale_kernel.fn)
    again[grid(200)](x, y, 200, 2.0)
    assert next(iter(again.sources.values())).startswith("exact (database)")
    assert _count(url, Trial) == 3


@pytest.mark.parametrize("script, args", [("tutorial_matmul.py", ["--M", "64", "--dtype", "float32"]),
                                          ("rmsnorm.py", ["--rows", "16", "--cols", "256", "--dtype", "float32"])])
def test_the_examples_run_as_the_readme_says(tmp_path, script, args):
    """Run twice, as a new user would (TRITON_INTERPRET=1 without a GPU): tuned the first time, read from the
    database the second."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "AUTOTUNER_DB_URL": f"sqlite:///{tmp_path / 'ex.db'}"}
    runs = [subprocess.run([sys.executable, f"examples/{script}", *args], capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=600) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr
    assert "(tuned here" in runs[0].stdout and "(exact (database))" in runs[1].stdout, runs[1].stdout
    error = float(runs[1].stdout.rsplit("error ", 1)[1])
    assert error < 1e-4


def test_the_cli_tunes_a_recorded_kernel_problem(url, use):
    """`autotuner tune module:kernel --shape KEY` tunes the call a process recorded, or one made from a call
    recorded at another value of the key (n=301 from n=300: the tensors and the grid follow); with neither, it
    says how to record one."""
    use(on_miss="default")
    dk.scale_kernel[grid(300)](torch.randn(300), torch.empty(300), 300, 2.0)
    cmd = [sys.executable, "-m", "autotuner", "tune", "tests.support.decorated_kernels:scale_kernel", "--dtype", "float32",
           "--db", url, "--json", "-q"]
    out = subprocess.run([*cmd, "--shape", "n=300"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["problem_key"] == "n=300:float32" and len(result["trials"]) == 3 and result["failures"] == 0
    made = subprocess.run([*cmd, "--shape", "n=301"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["problem_key"] == "n=301:float32" and json.loads(made.stdout)["failures"] == 0
    other = [c if c != "float32" else "float16" for c in cmd]  # nothing recorded in float16
    missing = subprocess.run([*other, "--shape", "n=301"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert missing.returncode == 2 and "no recorded call" in missing.stderr and "AUTOTUNER_RECORD=1" in missing.stderr
    no_dtype = [c for c in cmd if c not in ("--dtype", "float32")]  # the dtype the call was recorded in
    again = subprocess.run([*no_dtype, "--shape", "n=300"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert again.returncode == 0 and json.loads(again.stdout)["problem_key"] == "n=300:float32", again.stderr


def test_from_one_recorded_launch_to_a_served_sweep(url, use):
    """The guide's steps: one launch tuned in place (its call kept with its result, nothing queued), a sweep over
    the key tuned from it (each point's call made from that one), then a launch between the points served from
    the sweep."""
    use()
    x = torch.randn(300)
    dk.scale_kernel[grid(300)](x, torch.empty(300), 300, 2.0)  # tuned here (on_miss=tune)
    from autotuner.launch.lookup import resolver

    resolver()._join_background()
    (kept,) = Store(url).jobs_page(state=None, limit=10, offset=0)[0]
    assert (kept.shape, kept.state, "call" in kept.options) == ("n=300", "done", True)
    assert (kept.worker or "").endswith("(tuned in place)")
    out = subprocess.run([sys.executable, "-m", "autotuner", "tune", "tests.support.decorated_kernels:scale_kernel",
                          "--shape", "n=256-1024:pow2", "--dtype", "float32", "--db", url, "--json", "-q",
                          "--refine-points", "0"], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert [p["problem"] for p in summary["points"]] == ["n=256:float32", "n=512:float32", "n=1024:float32"]
    assert all(p["winner"] is not None for p in summary["points"]) and summary["errors"] == {}
    use(on_miss="nearest")
    y = torch.empty(700)
    x = torch.randn(700)
    dk.scale_kernel[grid(700)](x, y, 700, 2.0)
    torch.testing.assert_close(y, 2 * x)
    source = next(iter(dk.scale_kernel.sources.values()))
    assert source.startswith(("nearest (n=512", "nearest (n=1024", "predicted")), source


def test_the_service_and_the_report_show_a_decorated_kernel(url, use, tmp_path):
    """GET /config answers for a decorated kernel on a service that loads its module (AUTOTUNER_PLUGINS), the key
    passed as `shape` and the tensor dtypes as `dtype`; the report draws it against its default config."""
    from tests.support.server import running_server

    use(on_miss="tune")
    dk.scale_kernel[grid(700)](torch.randn(700), torch.empty(700), 700, 3.0)
    tuned = config_dict(next(iter(dk.scale_kernel.cache.values())))
    with running_server(url, AUTOTUNER_PLUGINS='["tests.support.decorated_kernels"]') as client:
        r = client.get("/config", params={"op": "tests.support.decorated_kernels:scale_kernel", "shape": "n=700",
                                          "dtype": "float32", "device": current_device().key, "fallback": "none"})
        assert r.status_code == 200, r.text
        assert r.json()["source"] == "exact" and r.json()["config"] == tuned
        ops = client.get("/openapi.json").json()["paths"]["/config"]["get"]["parameters"][0]["schema"]["enum"]
        assert "tests.support.decorated_kernels:scale_kernel" in ops

    store = Store(url)
    problem = dk.scale_kernel.problem({"n": 4096, "x_ptr": torch.zeros(1), "y_ptr": torch.zeros(1)})
    store.save_best(op=dk.scale_kernel.op, problem=problem, device=H100, config=tuned, median_ms=0.010,
                    default_ms=0.012, torch_ms=None, run_id=None)
    from autotuner.analysis.report import plot_results

    assert plot_results(store, tmp_path / "r.png", device_key=H100.key) == 1


def _store_winner(url, kernel, n, config):
    """A stored winner of `kernel` for key n (float32 tensors), as a tuning run would leave it."""
    problem = kernel.op.parse_problem(f"n={n}", "float32")
    Store(url).save_best(op=kernel.op, problem=problem, device=current_device(), config=config, median_ms=1.0,
                         default_ms=2.0, torch_ms=None, run_id=None)


def test_nearest_policy_launches_the_nearest_keys_winner_tunes_nothing_and_queues_the_key(url, use, monkeypatch):
    use(on_miss="nearest")
    big = {"BLOCK": 128, "num_warps": 4, "num_stages": 3}
    _store_winner(url, dk.scale_kernel, 4096, big)
    _store_winner(url, dk.scale_kernel, 64, {"BLOCK": 32, "num_warps": 1, "num_stages": 3})
    x, y = torch.randn(3000), torch.empty(3000)
    dk.scale_kernel[grid(3000)](x, y, 3000, 2.0)  # log2(3000) is nearer 4096 than 64
    torch.testing.assert_close(y, 2 * x)
    key = next(iter(dk.scale_kernel.cache))
    assert config_dict(dk.scale_kernel.cache[key]) == big
    assert dk.scale_kernel.sources[key] == "nearest (n=4096:float32's winner); the exact key is queued"
    from autotuner.launch.lookup import resolver

    resolver()._join_background()  # the job is written on another thread
    assert _count(url, Trial) == 0 and _count(url, TuningRun) == 0  # nothing tuned on the launching thread
    with session_scope(Store(url).engine) as s:
        job = s.scalars(select(Job)).one()
    assert job.shape == "n=3000" and job.options["call"]["args"]["x_ptr"]["tensor"]["shape"] == [3000]
    # a worker tunes the key; the launching process picks its winner up once the answer is asked again
    from autotuner.worker.loop import Worker

    assert Worker(Settings(db_url=url), name="w").run_job(Store(url).claim_job("w")[0]) == "done"
    dk.scale_kernel[grid(3000)](x, y, 3000, 2.0)
    assert dk.scale_kernel.sources[key].startswith("nearest")  # within recheck_s: the answer stands
    from autotuner.launch import lookup

    monkeypatch.setattr(lookup, "_now", lambda: float("inf"))
    dk.scale_kernel[grid(3000)](x, y, 3000, 2.0)
    assert dk.scale_kernel.sources[key] == "exact (database)"
    torch.testing.assert_close(y, 2 * x)


def test_the_most_met_keys_are_tuned_first_and_a_process_picks_their_winners_up(url, use, monkeypatch):
    """A stream served nearest answers: each key's queued job rises by its meets (counted on the launch path in
    doubling steps), a worker takes the most-met key first, and the launching process, asking again after
    recheck_s, launches its winner."""
    # (an answer that went stale during the stream, on a slow machine, was asked again and its meets counted twice)
    use(on_miss="nearest", recheck_s=3600)
    _store_winner(url, dk.scale_kernel, 4096, {"BLOCK": 128, "num_warps": 4, "num_stages": 3})
    stream = [3000] * 9 + [2000] * 3 + [1500]
    tensors = {n: (torch.randn(n), torch.empty(n)) for n in set(stream)}
    for n in stream:
        x, y = tensors[n]
        dk.scale_kernel[grid(n)](x, y, n, 2.0)
    from autotuner.launch.lookup import resolver

    resolver()._join_background()
    with session_scope(Store(url).engine) as s:
        priority = {j.shape: j.priority for j in s.scalars(select(Job))}
    # the miss is not counted; then meets 1, 2, 4, 8 are each reported when reached: 8 of the 8 later launches
    assert priority == {"n=3000": 8, "n=2000": 2, "n=1500": 0}
    from autotuner.worker.loop import Worker

    worker = Worker(Settings(db_url=url), name="w")
    first = Store(url).claim_job("w")[0]
    assert first.shape == "n=3000"
    assert worker.run_job(first) == "done"
    from autotuner.launch import lookup

    monkeypatch.setattr(lookup, "_now", lambda: float("inf"))  # recheck_s has passed
    x, y = tensors[3000]
    dk.scale_kernel[grid(3000)](x, y, 3000, 2.0)
    key3000 = next(k for k in dk.scale_kernel.sources if 3000 in k)
    assert dk.scale_kernel.sources[key3000] == "exact (database)"
    torch.testing.assert_close(y, 2 * x)


def test_a_recording_waiting_on_the_background_thread_holds_no_tensor_of_its_launch(url, use):
    """A burst of misses under on_miss=nearest queues one recording each on the background thread: while they
    wait, they hold the tensors' forms only, so the launches' memory is freed at once (a serving stream of new
    shapes ran a GPU out of memory when they held the tensors)."""
    import gc
    import weakref

    from autotuner.launch.lookup import resolver

    use(on_miss="nearest")
    _store_winner(url, dk.scale_kernel, 4096, {"BLOCK": 128, "num_warps": 4, "num_stages": 3})
    gate = threading.Event()
    resolver().in_background(gate.wait)  # the background thread is busy until the gate opens
    try:
        refs = []
        for n in (3000, 2000):
            x, y = torch.randn(n), torch.empty(n)
            dk.scale_kernel[grid(n)](x, y, n, 2.0)
            torch.testing.assert_close(y, 2 * x)
            refs += [weakref.ref(x), weakref.ref(y)]
            del x, y
        gc.collect()
        assert [r() is None for r in refs] == [True] * 4
    finally:
        gate.set()
    resolver()._join_background()
    with session_scope(Store(url).engine) as s:
        jobs = {j.shape: j.options["call"]["args"]["x_ptr"]["tensor"]["shape"] for j in s.scalars(select(Job))}
    assert jobs == {"n=3000": [3000], "n=2000": [2000]}  # recorded from the forms, as from the tensors


def test_nearest_policy_skips_a_winner_the_pruning_or_the_space_rules_out(url, use):
    """accumulate prunes BLOCK=64 away: the nearest key's winner with BLOCK 64 is passed over for the next
    nearest; with no valid winner near, the default."""
    use(on_miss="nearest")
    _store_winner(url, dk.accumulate, 1000, {"BLOCK": 64, "num_warps": 2, "num_stages": 3})
    _store_winner(url, dk.accumulate, 100, {"BLOCK": 128, "num_warps": 4, "num_stages": 3})
    x, out = torch.randn(900), torch.zeros(1)
    dk.accumulate[grid(900)](x, out, 900)
    torch.testing.assert_close(out, x.sum().reshape(1), rtol=1e-4, atol=1e-4)
    key = next(iter(dk.accumulate.cache))
    assert config_dict(dk.accumulate.cache[key]) == {"BLOCK": 128, "num_warps": 4, "num_stages": 3}
    assert dk.accumulate.sources[key].startswith("nearest (n=100:float32's winner)")
    kernel = autotuner.autotune(configs=dk.CONFIGS[:1], key=["n"], name="tests:one_config",
                                on_miss="nearest")(dk.scale_kernel.fn)
    _store_winner(url, kernel, 64, {"BLOCK": 128, "num_warps": 4, "num_stages": 3})  # not in its list
    y = torch.empty(900)
    kernel[grid(900)](x, y, 900, 1.0)
    key = next(iter(kernel.cache))
    assert config_dict(kernel.cache[key]) == {"BLOCK": 32, "num_warps": 1, "num_stages": 3}
    assert kernel.sources[key].startswith("default (no nearby tuned key's winner is valid here: n=64:float32)")


def test_nearest_policy_launches_the_default_at_once_when_the_database_is_down(tmp_path):
    dead = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=1"
    set_resolver(Resolver(Settings(db_url=dead, on_miss="nearest")))
    try:
        kernel = autotuner.autotune(configs=dk.CONFIGS, key=["n"], name="tests:dead_db")(dk.scale_kernel.fn)
        x, y = torch.randn(50), torch.empty(50)
        kernel[grid(50)](x, y, 50, 3.0)
        torch.testing.assert_close(y, 3 * x)
        assert kernel.sources[next(iter(kernel.cache))] == "default (nothing tuned near); the exact key is queued"
    finally:
        set_resolver(None)


def test_buckets_resolve_store_and_serve_one_result_per_bucket(url, use):
    use(on_miss="tune")
    kernel = autotuner.autotune(configs=dk.CONFIGS, key=["n"], name="tests:bucketed",
                                buckets={"n": "pow2"})(dk.scale_kernel.fn)
    for n in (700, 900, 1024):  # one bucket: n=1024
        x, y = torch.randn(n), torch.empty(n)
        kernel[grid(n)](x, y, n, 2.0)
        torch.testing.assert_close(y, 2 * x)
    assert list(kernel.sources.values()) == [kernel.sources[(1024, "torch.float32", "torch.float32")]]
    assert kernel.sources[(1024, "torch.float32", "torch.float32")].startswith("tuned here")
    assert _count(url, TuningRun) == 1
    stored = [r.problem_key for r in Store(url).results(op="tests:bucketed")]
    assert stored == ["n=1024:float32"]  # tuned on n=700's launch, stored for its bucket
    kernel.cache.clear()
    x, y = torch.randn(600), torch.empty(600)
    kernel[grid(600)](x, y, 600, 2.0)
    assert kernel.sources[(1024, "torch.float32", "torch.float32")] == "exact (database) for this key's bucket n=1024"
    assert _count(url, TuningRun) == 1
    custom = autotuner.autotune(configs=dk.CONFIGS, key=["n"], name="tests:by_hundreds",
                                buckets={"n": lambda v: -(-v // 100) * 100})(dk.scale_kernel.fn)
    assert custom.problem(custom.named((x, y, 601, 2.0), {})).shape == "n=700"
    for bad, said in (({"m": "pow2"}, "buckets names 'm', which is not a key argument"),
                      ({"n": "log10"}, "bucket 'log10' for 'n' is not known")):
        with pytest.raises(ValueError, match=said):
            autotuner.autotune(configs=dk.CONFIGS, key=["n"], buckets=bad)(dk.scale_kernel.fn)


def test_first_tuning_on_two_lanes_keeps_hooks_and_outputs(url, use, monkeypatch):
    """AUTOTUNER_GPUS=0,1 (here two CPU lanes taking turns): a second lane measures configs on its own copy of the
    arguments, with hooks of its own, so reset_to_zero and restore_value hold on both and every config checks out
    against the reference there; the outputs are triton.autotune's."""
    from autotuner.decorator.engine_view import EngineView

    launches: list[tuple[str, int]] = []
    call = EngineView.call

    def watched(self, named, *args, **kwargs):
        first = next(v for v in named.values() if isinstance(v, torch.Tensor))
        launches.append((threading.current_thread().name, first.data_ptr()))
        return call(self, named, *args, **kwargs)

    monkeypatch.setattr(EngineView, "call", watched)
    use(on_miss="tune", gpus="0,1")
    x = torch.randn(1000)
    ours, theirs = torch.zeros(1), torch.zeros(1)
    dk.accumulate[grid(1000)](x, ours, 1000)
    dk.accumulate_triton[grid(1000)](x, theirs, 1000)
    torch.testing.assert_close(ours, theirs)
    first_kernel = [(name, ptr) for name, ptr in launches]  # compared with x while both are alive
    a, b = torch.zeros(1000), torch.zeros(1000)
    del launches[:]
    dk.bump[grid(1000)](a, 1000)
    dk.bump_triton[grid(1000)](b, 1000)
    assert torch.equal(a, b) and torch.equal(a, torch.ones(1000))
    for kernel in (dk.accumulate, dk.bump):
        assert "on 2 GPUs" in next(iter(kernel.sources.values()))
    with session_scope(Store(url).engine) as s:
        statuses = list(s.scalars(select(Trial.status)))
    assert len(statuses) == 2 + 3 and set(statuses) == {"ok"}  # accumulate's pruned list and bump's
    # the second lane launched, on arguments of its own (not the launch's tensors)
    for seen, own in ((first_kernel, x), (launches, a)):  # (a freed copy's memory may hold a later tensor)
        second = {ptr for name, ptr in seen if name == "lane-1"}
        assert second and own.data_ptr() not in second


def test_arguments_copied_for_another_lane_keep_views_and_refuse_the_unknown():
    from autotuner.decorator.lanes import copied, further_devices, why_one_lane

    base = torch.arange(20, dtype=torch.float32)
    named = {"a": base[2:10].view(2, 4), "b": base[5:], "n": 8, "dtype": torch.float16, "nothing": None}
    out = copied(named, None)
    assert torch.equal(out["a"], named["a"]) and out["a"].stride() == (4, 1) and out["n"] == 8
    assert out["a"].data_ptr() != named["a"].data_ptr()
    out["a"][1, 0] = -1.0  # base[6] in the copy: b's second element, as in the original's memory
    assert out["b"][1] == -1.0 and base[6] == 6.0
    with pytest.raises(TypeError, match="argument c is a object"):
        copied({"c": object()}, None)
    assert further_devices("0,1", current_device()) == [None]  # the interpreter: one more CPU lane
    assert further_devices("0", current_device()) == [] and further_devices("x", current_device()) == []
    assert why_one_lane(dk.scale_kernel.spec) is None
    hooked = autotuner.autotune(configs=dk.CONFIGS, key=["n"], pre_hook=lambda nargs: None)(dk._bump)
    assert why_one_lane(hooked.spec) == "it has hooks of its own"


NO_INTERPRETER = '''
import triton, triton.language as tl, torch
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
import autotuner
kk = autotuner.autotune(configs=[triton.Config({"BLOCK": 32})], key=["n"], on_miss="default")(k)
kk[(1,)](torch.randn(8), 8)
'''


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a GPU says")
def test_a_kernel_compiled_for_a_gpu_on_a_machine_without_one_says_how_to_run_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["AUTOTUNER_DB_URL"] = f"sqlite:///{tmp_path / 'n.db'}"
    (tmp_path / "mine.py").write_text(NO_INTERPRETER)  # Triton reads a kernel's source from its file
    done = subprocess.run([sys.executable, "mine.py"], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert done.returncode != 0 and "set TRITON_INTERPRET=1 before Triton is first imported" in done.stderr
    assert "Cannot call @triton.jit'd outside of the scope of a kernel" not in done.stderr


# A copy kernel whose do_bench raises while FLAKY=1 (a transient driver error), under `{decorator}`; `{after}` runs
# once it is defined; the launch prints `{report}` or, when it raises, its error (exit 1).
FLAKY = '''
import os, sys
import torch, triton, triton.language as tl
import autotuner

timed = []


def bench(fn, quantiles=None):
    if os.environ["FLAKY"] == "1":
        raise RuntimeError("CUDA error: unspecified launch failure (a transient driver error)")
    fn()
    timed.append(1)
    return [1.0, 1.0, 1.0]


{decorator}
@triton.jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


{after}
x = torch.randn(100)
y = torch.empty(100)
try:
    copy[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, y, 100)
except RuntimeError as exc:
    print("raised:", exc)
    sys.exit(1)
assert torch.equal(x, y)
print({report})
'''
CONFIGS_32_64 = 'configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"], do_bench=bench'


def _flaky_runs(tmp_path, **script: str):
    """Run FLAKY (filled with `script`) as a new process each call, on one database: run("1") has do_bench raise."""
    import subprocess

    (tmp_path / "flaky.py").write_text(FLAKY.format(**script))
    env = {**os.environ, "AUTOTUNER_DB_URL": f"sqlite:///{tmp_path / 'f.db'}", "PYTHONPATH": os.getcwd(),
           "AUTOTUNER_ON_MISS": "tune"}

    def run(flaky: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(tmp_path / "flaky.py")], capture_output=True, text=True,
                              timeout=300, env={**env, "FLAKY": flaky})

    return run


def test_a_problem_every_config_of_which_failed_once_is_tuned_again_by_the_next_process(tmp_path):
    """Every trial failed in one process (a do_bench that raised): the next process tunes again, as Triton would;
    only a failure that repeats with the same cause is kept as the answer."""
    run = _flaky_runs(tmp_path, decorator=f'@autotuner.autotune({CONFIGS_32_64}, name="flaky:copy", on_miss="tune")',
                      after="", report='"source:", copy.sources[next(iter(copy.cache))]')
    first = run("1")
    assert first.returncode == 1 and "every config failed" in first.stdout, first.stdout + first.stderr
    assert "transient driver error" in first.stdout  # with its cause
    second = run("0")
    assert second.returncode == 0 and "source: tuned here" in second.stdout, second.stdout + second.stderr[-2000:]
    assert run("1").returncode == 0  # a tuned key launches its winner: no timing, nothing to fail


def test_under_the_switch_a_key_every_config_of_which_failed_once_is_timed_again(tmp_path):
    """The switch's side of a failure that is not an answer: after a process in which every config failed, the
    next process times the configs again (through autotuner, or Triton's own tuning it hands back to), instead of
    launching the first config untimed."""
    run = _flaky_runs(tmp_path, decorator=f"@triton.autotune({CONFIGS_32_64})", after="autotuner.install()",
                      report='"timed:", len(timed)')
    assert run("1").returncode == 1
    second = run("0")
    assert second.returncode == 0 and "timed:" in second.stdout, second.stdout + second.stderr[-2000:]
    assert int(second.stdout.split("timed:")[1]) >= 2, second.stdout  # each config timed at least once
