"""Helion kernels through the store (autotuner/decorator/helion_cache.py): a kernel written for Helion alone
(tests.support.helion_kernels) searched by Helion in one process under `python -m autotuner run`, kept in the
database (SQLite and PostgreSQL), then launched tuned by another process without a search, and shown by
`autotuner show`; a stored row Helion rejects is not served. On Triton's interpreter, where Helion times with its
wall-clock timer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("helion", reason="Helion is in the dev extra: `pip install -e '.[dev]'`")

from sqlalchemy import update  # noqa: E402

from autotuner.base.settings import Settings  # noqa: E402
from autotuner.decorator import helion_cache  # noqa: E402
from autotuner.launch.lookup import Resolver, set_resolver  # noqa: E402
from autotuner.store.database import Store  # noqa: E402
from db.engine import session_scope  # noqa: E402
from db.models import Job  # noqa: E402
from tests.support.server import running_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NAME = "tests.support.helion_kernels:add_rows"
SHAPE = "x_0=8,x_1=24,y_0=8,y_1=24"
# Helion's search as the interpreter can run it: in this process (no benchmark subprocess, no precompile fork),
# a random search (its count is the script's), configs the interpreter cannot run skipped
HELION_ENV = {"HELION_AUTOTUNE_PRECOMPILE": "0", "HELION_AUTOTUNE_BENCHMARK_SUBPROCESS": "0",
              "HELION_AUTOTUNER": "RandomSearch", "HELION_AUTOTUNE_IGNORE_ERRORS": "1",
              "HELION_AUTOTUNE_RANDOM_SEED": "7", "HELION_AUTOTUNE_PROGRESS_BAR": "0"}


@pytest.fixture(autouse=True)
def _forget_the_kernel():
    """The Helion kernel's op is registered in this process by the tests that make one: forgotten afterwards, so
    later tests in this worker see the registry as it was."""
    yield
    from autotuner.base.registry import unregister_op

    unregister_op(NAME)
    helion_cache._ops.clear()


def _run(url, tmp_path, *args, extra=None):
    env = {**os.environ, **HELION_ENV, "AUTOTUNER_DB_URL": url, "HELION_CACHE_DIR": str(tmp_path / "helion"),
           **(extra or {})}
    return subprocess.run([sys.executable, "-m", "autotuner", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=500, env=env)


def _kernel_run(url, tmp_path, what, extra=None):
    return _run(url, tmp_path, "run", "--", "-m", "tests.support.helion_kernels", what, "8", "24", extra=extra)


@pytest.mark.slow
def test_a_helion_kernel_searched_in_one_process_runs_tuned_in_another_without_a_search(tmp_path):
    url = f"sqlite:///{tmp_path / 'h.db'}"
    tuned = _kernel_run(url, tmp_path, "tune")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    assert "matches" in tuned.stdout
    rows = Store(url).results(op=NAME)
    assert [r.problem_key for r in rows] == [f"{SHAPE}:float32"]
    stored = rows[0].config
    assert isinstance(stored["block_sizes"], list) and len(stored["block_sizes"]) == 2
    # Helion's own check: a search in the second process raises instead of running
    again = _kernel_run(url, tmp_path, "call", extra={"HELION_ASSERT_CACHE_HIT": "1"})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "matches" in again.stdout and "Found cached config" in again.stderr
    shown = _run(url, tmp_path, "show", NAME, "--shape", SHAPE, "--dtype", "float32", "--json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    answer = json.loads(shown.stdout)
    assert answer["source"] == "exact" and answer["config"] == stored


def test_a_stored_config_this_kernel_rejects_is_not_served(url, caplog):
    """A row a writer left whose config Helion's config spec refuses: warned, and the kernel searches (here: the
    cache's answer is None) instead of launching it; a measured config it accepts is served instead."""
    import torch

    from tests.support.helion_kernels import add_rows

    set_resolver(Resolver(Settings(db_url=url)))
    helion_cache.install()
    try:
        from helion.autotuner import cache_classes
        from helion.autotuner.random_search import RandomSearch

        x = torch.randn(8, 24)
        args = (x, x.clone())
        bound = add_rows.bind(args)
        cache = cache_classes["LocalAutotuneCache"](RandomSearch(bound, args, count=2))
        assert cache.get() is None  # nothing stored yet
        good = json.loads(bound.config_spec.default_config().to_json())
        bad = {**good, "block_sizes": [8, 8, 8, 8]}  # four tile sizes for a kernel with two
        store = Store(url)
        helion_cache.record(cache.op, cache.problem, cache.device, bad, 0.001, strategy="a writer")
        assert cache.get() is None
        assert "not one this kernel takes" in caplog.text
        helion_cache.record(cache.op, cache.problem, cache.device, good, 0.5, strategy="helion:RandomSearch")
        assert store.results(op=NAME)[0].config == bad  # still the stored best: the faster row
        served = cache.get()
        assert served is not None and served.config == good
    finally:
        helion_cache.uninstall()
        set_resolver(None)


def test_a_launch_is_keyed_by_its_sizes_layout_and_plain_arguments():
    import torch

    from tests.support.helion_kernels import add_rows

    x = torch.randn(8, 24)
    p = helion_cache.helion_problem(add_rows, (x, x.t().contiguous().t()))
    assert p.key == "x_0=8,x_1=24,y_0=8,y_1=24,y_strides=\"1x8\":float32"
    assert p.dims() == (8, 24, 8, 24)
    wide = helion_cache.helion_problem(add_rows, (torch.randn(2, 3, dtype=torch.float16), "a long text " * 9))
    assert wide.dtype == "float16" and dict(wide.values)["y"].startswith("h")
    with pytest.raises(ValueError, match="searched by tpe, random, own; not 'exhaustive' .its space is not a finite"):
        helion_cache.helion_op(add_rows).search(p, None, None, 4, "exhaustive")


@pytest.mark.slow
def test_a_new_specialization_launches_the_nearest_tuned_config_and_a_worker_tunes_it(tmp_path):
    import torch

    from tests.support.helion_kernels import add_rows

    url = f"sqlite:///{tmp_path / 'n.db'}"
    x = torch.randn(8, 24)
    bound = add_rows.bind((x, x))
    set_resolver(Resolver(Settings(db_url=url)))
    try:  # a tuned neighbour: 8x24 (its config Helion's default, as a search might have picked)
        tuned = json.loads(bound.config_spec.default_config().to_json())
        op = helion_cache.helion_op(add_rows)
        helion_cache.record(op, helion_cache.helion_problem(add_rows, (x, x)), helion_cache._device((x,)), tuned,
                            0.5, strategy="helion:RandomSearch")
    finally:
        set_resolver(None)
    # 8x32, never tuned: launched at once with 8x24's config, no search (Helion's own check), a job queued
    served = _run(url, tmp_path, "run", "--", "-m", "tests.support.helion_kernels", "call", "8", "32",
                  extra={"AUTOTUNER_ON_MISS": "nearest", "HELION_ASSERT_CACHE_HIT": "1"})
    assert served.returncode == 0, served.stderr[-3000:]
    assert "matches" in served.stdout
    assert "launching the nearest tuned problem's config (x_0=8,x_1=24,y_0=8,y_1=24:float32's" in served.stderr
    jobs = Store(url).jobs_page(state="queued", limit=10, offset=0)[0]
    assert [(j.op, j.shape) for j in jobs] == [(NAME, "x_0=8,x_1=32,y_0=8,y_1=32")]
    assert jobs[0].options["call"]["args"]["x"]["tensor"]["shape"] == [8, 32]
    with session_scope(Store(url).engine) as s:  # the operator's budget for it (a miss queues none)
        s.execute(update(Job).values(budget_trials=3))
    worked = _run(url, tmp_path, "worker", "--once", extra={"AUTOTUNER_KERNEL_MODULES": "tests.support.helion_kernels"})
    assert worked.returncode == 0, worked.stderr[-3000:]
    assert Store(url).job(jobs[0].id).state == "done", worked.stderr[-3000:]
    runs = [r for r in Store(url).results(op=NAME) if r.problem_key.startswith("x_0=8,x_1=32")]
    assert len(runs) == 1
    # a Helion kernel's job runs Helion's own search by default (here HELION_AUTOTUNER's RandomSearch)
    assert [r.strategy for r in Store(url).runs(op=NAME)] == ["helion:RandomSearch", "helion:RandomSearch"]
    # `autotuner tune` names it too, here with the project's search over Helion's configs: Helion's default config
    # first, the budget's three configs, each a trial of the run, the fastest its best
    tuned = _run(url, tmp_path, "tune", NAME, "--shape", "x_0=8,x_1=32,y_0=8,y_1=32", "--dtype", "float32",
                 "--trials", "3", "--strategy", "tpe", "--json")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    run = Store(url).runs(op=NAME)[-1]
    assert run.strategy == "tpe" and len(run.trials) == 3, [(r.strategy, len(r.trials)) for r in Store(url).runs()]
    default = add_rows.bind((torch.randn(8, 32), torch.randn(8, 32))).config_spec.default_config()
    assert run.trials[0].config == json.loads(default.to_json()) and len({t.config_key for t in run.trials}) == 3
    fastest = min((t for t in run.trials if t.median_ms is not None), key=lambda t: t.median_ms)
    assert json.loads(tuned.stdout)["best_config"] == fastest.config
    best = next(r for r in Store(url).results(op=NAME) if r.problem_key.startswith("x_0=8,x_1=32")).config
    # the service, with the kernel's module as a plugin, answers for it as for a decorated kernel
    with running_server(url, AUTOTUNER_PLUGINS="tests.support.helion_kernels") as client:
        exact = client.get("/config", params={"op": NAME, "shape": "x_0=8,x_1=32,y_0=8,y_1=32", "dtype": "float32"})
        assert exact.status_code == 200, exact.text
        assert exact.json()["source"] == "exact" and exact.json()["config"] == best
        near = client.get("/config", params={"op": NAME, "shape": "x_0=8,x_1=36,y_0=8,y_1=36", "dtype": "float32"})
        assert near.status_code == 200, near.text
        assert near.json()["source"] == "nearest" and near.json()["config"] == best


def test_the_projects_search_goes_on_past_a_config_whose_compile_raises():
    """helion_search's TPE: Helion's default config first; a batch Helion raises on is measured a config at a time,
    the config that raises a failed trial, not the search's end; the count is kept and the pick is the fastest."""
    import helion
    import torch

    from autotuner.decorator.helion_search import search_class
    from tests.support.helion_kernels import add_rows

    kernel = helion.kernel(add_rows.fn, autotune_precompile=None, autotune_benchmark_subprocess=False,
                           autotune_progress_bar=False)
    args = kernel.normalize_args(torch.randn(8, 24), torch.randn(8, 24))
    helion_cache.install()  # (Helion's wall-clock timer under the interpreter)
    try:
        search = search_class()(kernel.bind(args), args, count=6, seed=1)
        real, raised = search.benchmark_batch, []

        def benchmark_batch(configs, **kwargs):  # Helion raising on the first batch of several, then on its first
            if len(search.times) >= 2 and len(raised) < 2 and (len(configs) > 1 or raised):  # config alone
                raised.append(configs)
                raise RuntimeError("ptxas fatal: insufficient registers")
            return real(configs, **kwargs)

        search.benchmark_batch = benchmark_batch
        best = search.autotune()
    finally:
        helion_cache.uninstall()
    trials = {json.dumps(t[0], sort_keys=True): t[1:] for t in search.trials()}
    assert len(trials) == 6 and len(raised) == 2 and len(raised[0]) > 1 and raised[1] == raised[0][:1]
    assert next(iter(trials)) == json.dumps(json.loads(kernel.bind(args).config_spec.default_config().to_json()),
                                            sort_keys=True)
    assert trials[json.dumps(json.loads(raised[1][0].to_json()), sort_keys=True)] == ("compile_error", None)
    timed = [(ms, key) for key, (_, ms) in trials.items() if ms is not None]
    assert len(timed) >= 4 and json.dumps(json.loads(best.to_json()), sort_keys=True) == min(timed)[1]
