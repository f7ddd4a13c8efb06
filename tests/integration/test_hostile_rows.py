"""No row, file or request breaks a key: every value is checked at every door (an import, POST /jobs, GET /config,
the command line), with one line per refusal and nothing half-written; a bad row already in a database is never
served and never blocks a measured winner. Real SQLite files, a real server process, the real CLI."""

from __future__ import annotations

import copy
import dataclasses
import json
import sqlite3

import pytest
import torch

import autotuner
from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.base.settings import Settings
from autotuner.launch.lookup import Resolver, set_resolver
from autotuner.launch.serving import answer_config
from autotuner.store.database import Store
from autotuner.store.transfer import export_data
from tests.integration.test_api import TOKEN
from tests.integration.test_cli import cli
from tests.support.server import running_server

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def exported(tmp_path):
    """A real export: one softmax result stored through the store, written out as `autotuner export` writes it."""
    store, op, device = Store(f"sqlite:///{tmp_path / 'src.db'}"), get_op("softmax"), current_device()
    problem = op.parse_problem("8x64", "float16")
    run_id = store.start_run(op=op, problem=problem, device=device, strategy="tpe", budget_trials=1,
                             budget_seconds=None, clock="wall")
    config = op.space.default(problem, device)
    store.record_trial(run_id=run_id, config=config, config_key="k", status="ok", median_ms=0.5, p20_ms=0.4,
                       p80_ms=0.6)
    store.finish_run(run_id=run_id, status="done")
    store.save_best(op=op, problem=problem, device=device, config=config, median_ms=0.5, default_ms=0.6,
                    torch_ms=None, run_id=run_id)
    return export_data(store)


def _import(tmp_path, data, name="in.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    target = tmp_path / "target.db"
    return cli("import", str(path), "--db", f"sqlite:///{target}"), target


def test_an_import_refuses_every_bad_value_one_line_each_and_writes_nothing(tmp_path, exported):
    bad = copy.deepcopy(exported)
    best, run = bad["best_configs"][0], bad["runs"][0]
    best["median_ms"] = float("-inf")
    run["trials"][0]["median_ms"] = 0.0
    run["trials"][0]["p20_ms"] = -1.0
    bad["best_configs"].append({**copy.deepcopy(exported["best_configs"][0]), "op": "nosuch"})
    bad["best_configs"].append({**copy.deepcopy(exported["best_configs"][0]), "problem_key": "9x64:float16"})
    bad["best_configs"].append({**copy.deepcopy(exported["best_configs"][0]),
                                "config": {**exported["best_configs"][0]["config"], "BOGUS": 1}})
    huge = copy.deepcopy(exported["best_configs"][0])
    huge["problem"] = {"rows": 10**15, "cols": 64, "dtype": "float16"}
    huge["problem_key"] = f"{10**15}x64:float16"
    bad["best_configs"].append(huge)
    done, target = _import(tmp_path, json.dumps(bad))  # json writes -Infinity, as a hand-edited file may
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    said = done.stderr
    for fault in ("best_configs.0.median_ms", "runs.0.trials.0.median_ms", "runs.0.trials.0.p20_ms"):
        assert fault in said, said
    # the value checks stop the file before the row checks: fix the times and the rest are named, a line each
    bad["best_configs"][0]["median_ms"] = 0.5
    run["trials"][0].update(median_ms=0.5, p20_ms=0.4)
    done, target = _import(tmp_path, bad)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "nothing was imported" in done.stderr, done.stderr
    assert any("best_configs.1.op: unknown op 'nosuch'" in line for line in lines), lines
    assert any("best_configs.2.problem_key: '9x64:float16' is not the key of its problem" in line for line in lines)
    assert any("best_configs.3.config: unknown parameter(s) BOGUS" in line for line in lines), lines
    assert any("best_configs.4.problem" in line and "32-bit offsets" in line for line in lines), lines
    assert not target.exists()  # checked before the database is opened: nothing created, nothing written
    assert _import(tmp_path, exported)[0].returncode == 0  # the file itself imports


def test_an_import_of_nothing_or_of_deep_nesting_creates_nothing(tmp_path):
    for text in ("{}", "[" * 100_000 + "]" * 100_000):
        done, target = _import(tmp_path, text)
        assert done.returncode == 2 and "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 3
        assert not target.exists()


def test_a_bad_row_in_the_database_is_never_served_and_never_blocks_a_winner(tmp_path):
    url = f"sqlite:///{tmp_path / 'k.db'}"
    store, op, device = Store(url), get_op("softmax"), current_device()
    problem = op.parse_problem("8x64", "float32")
    good = op.space.default(problem, device)
    store.save_best(op=op, problem=problem, device=device, config=good, median_ms=9.6, default_ms=None,
                    torch_ms=None, run_id=None)
    with sqlite3.connect(tmp_path / "k.db") as c:  # a writer with the database's own tools
        c.execute("UPDATE best_configs SET median_ms = ?, config = ?",
                  (float("-inf"), json.dumps({**good, "BOGUS": 1})))
    set_resolver(Resolver(Settings(db_url=url)))
    try:
        x = torch.randn(8, 64)
        torch.testing.assert_close(autotuner.softmax(x), torch.softmax(x, -1))  # the bad config is not launched
    finally:
        set_resolver(None)
    answer = answer_config(store, op, problem, device)  # what GET /config answers: JSON, no infinity in it
    assert answer.source != "exact" and answer.median_ms is None
    json.dumps(dataclasses.asdict(answer), default=str, allow_nan=False)
    shown = cli("show", "softmax", "--shape", "8x64", "--dtype", "float32", "--db", url, "--json")
    assert "Traceback" not in shown.stderr and json.loads(shown.stdout)["source"] != "exact"
    with pytest.raises(ValueError, match="finite positive"):
        store.save_best(op=op, problem=problem, device=device, config=good, median_ms=0.0, default_ms=None,
                        torch_ms=None, run_id=None)
    assert store.save_best(op=op, problem=problem, device=device, config=good, median_ms=9.0, default_ms=None,
                           torch_ms=None, run_id=None)  # a measured time replaces the one that was none
    assert store.best(op=op, problem=problem, device=device).median_ms == 9.0


def test_the_service_checks_every_value_the_same_way(tmp_path):
    import tests.support.decorated_kernels  # noqa: F401  (registers the kernel in this process)

    url = f"sqlite:///{tmp_path / 's.db'}"
    store, device = Store(url), current_device()
    kernel = get_op("tests.support.decorated_kernels:scale_kernel")
    store.save_best(op=kernel, problem=kernel.parse_problem("n=4096", "float32"), device=device,
                    config={"BLOCK": 64, "num_warps": 2, "num_stages": 3}, median_ms=0.1, default_ms=None,
                    torch_ms=None, run_id=None)
    with running_server(url, AUTOTUNER_TOKEN=TOKEN, AUTOTUNER_PLUGINS="tests.support.decorated_kernels") as client:
        def config(**params):
            return client.get("/config", params={"op": "tests.support.decorated_kernels:scale_kernel", **params})

        answer = config(shape="n=4096")  # no dtype: the one it was tuned in
        assert answer.status_code == 200 and answer.json()["source"] == "exact", answer.text
        for shape in ("n=abc", "n=NaN", "n=1e308", "m=4096", "n=4096,m=1"):
            refused = config(shape=shape)
            assert refused.status_code in (404, 422) and "detail" in refused.json(), (shape, refused.text)
        big = {"op": "matmul", "shape": "1000000x1000000x1000000"}
        looked_up = client.get("/config", params=big)
        posted = client.post("/jobs", json=big, headers=AUTH)
        assert looked_up.status_code in (404, 422) and posted.status_code == 409  # the schema admits it: see POST /jobs
        assert "32-bit offsets" in looked_up.text and "32-bit offsets" in posted.text
        deep = '{"op": "softmax", "shape": "8x64", "options": ' + '{"x": ' * 1000 + "{}" + "}" * 1000 + "}"
        refused = client.post("/jobs", content=deep, headers={**AUTH, "Content-Type": "application/json"})
        assert refused.status_code == 422 and "nested more than" in refused.text, refused.text
        assert client.get("/healthz").status_code == 200  # and the server goes on


def test_a_bad_shape_is_answered_with_the_forms_not_a_regular_expression(tmp_path):
    with running_server(f"sqlite:///{tmp_path / 'f.db'}", AUTOTUNER_TOKEN=TOKEN) as client:
        looked_up = client.get("/config", params={"op": "softmax", "shape": "4096 by 4096"})
        posted = client.post("/jobs", json={"op": "matmul", "shape": "4096 by 4096"}, headers=AUTH)
    for answer in (looked_up, posted):
        assert answer.status_code == 422, answer.text
        msg = answer.json()["detail"][0]["msg"]
        assert "(?:" not in msg and "^" not in msg and "e.g." in msg, msg
    assert "not a shape of matmul, whose form is MxNxK" in posted.json()["detail"][0]["msg"]


BAD_BESTS = {  # problem shape -> (config text, median) a writer with the database's own tools left
    "8x128": ("not json", 1.0), "8x256": ("[1, 2]", 1.0), "16x64": ("null", 1.0), "16x128": (None, "fast"),
    "32x64": (None, float("-inf")), "32x128": (None, -2.0), "64x64": (None, 0.0)}


def _bad_rows_db(tmp_path):
    """A database with one good softmax result (8x64 float32) and a bad row for each of BAD_BESTS' problems."""
    path = tmp_path / "bad.db"
    store, op, device = Store(f"sqlite:///{path}"), get_op("softmax"), current_device()
    good = op.parse_problem("8x64", "float32")
    config = op.space.default(good, device)
    store.save_best(op=op, problem=good, device=device, config=config, median_ms=0.5, default_ms=None,
                    torch_ms=None, run_id=None)
    with sqlite3.connect(path) as c:
        for shape, (text, median) in BAD_BESTS.items():
            problem = op.parse_problem(shape, "float32")
            c.execute("INSERT INTO best_configs (op, problem_key, problem, device_id, kernel_hash, triton_version, "
                      "config, median_ms, default_ms, torch_ms, run_id, updated_at) SELECT op, ?, ?, device_id, "
                      "kernel_hash, triton_version, ?, ?, NULL, NULL, NULL, updated_at FROM best_configs WHERE id = 1",
                      (problem.key, json.dumps(dataclasses.asdict(problem)),
                       text if text is not None else json.dumps(config), median))
    return path, op


def test_rows_a_writer_left_are_never_served_and_db_check_lists_and_quarantines_them(tmp_path):
    path, op = _bad_rows_db(tmp_path)
    url = f"sqlite:///{path}"
    set_resolver(Resolver(Settings(db_url=url, on_miss="nearest")))
    try:  # the user's own process: every shape launches, with a row of its own or none
        for shape in ["8x64", *BAD_BESTS, "8x512", "128x64"]:
            rows, cols = map(int, shape.split("x"))
            x = torch.randn(rows, cols)
            torch.testing.assert_close(autotuner.softmax(x), torch.softmax(x, -1))
    finally:
        set_resolver(None)
    with running_server(url, AUTOTUNER_TOKEN=TOKEN) as client:
        for shape in ["8x64", *BAD_BESTS, "8x512"]:
            answer = client.get("/config", params={"op": "softmax", "shape": shape, "dtype": "float32"})
            assert answer.status_code in (200, 404), (shape, answer.text)
            if shape in BAD_BESTS and answer.status_code == 200:
                assert answer.json()["source"] != "exact" and answer.json()["median_ms"] in (None, 0.5), answer.text
        results = client.get("/results")
        assert results.status_code == 200 and [r["id"] for r in results.json()["items"]] == [1], results.text
        assert client.get("/").status_code == 200
        assert client.get("/results/2").status_code == 404 and client.get("/results/1").status_code == 200
    shown = cli("show", "softmax", "--shape", "16x128", "--dtype", "float32", "--db", url, "--json")
    assert "Traceback" not in shown.stderr and json.loads(shown.stdout)["source"] != "exact", shown.stderr

    checked = cli("db", "check", "--db", url)
    assert checked.returncode == 1, checked.stderr
    listed = [line for line in checked.stdout.splitlines() if line.startswith("best_configs ")]
    assert [int(line.split()[1].rstrip(":")) for line in listed] == list(range(2, 2 + len(BAD_BESTS))), checked.stdout
    assert "not a JSON object" in checked.stdout and "not a finite positive number" in checked.stdout
    moved = cli("db", "check", "--db", url, "--quarantine", str(tmp_path / "q.json"))
    assert moved.returncode == 0, moved.stderr
    kept = json.loads((tmp_path / "q.json").read_text())
    assert sorted(r["id"] for r in kept) == list(range(2, 2 + len(BAD_BESTS))) and kept[0]["row"]["config"] == "not json"
    again = cli("db", "check", "--db", url)
    assert again.returncode == 0 and "every row reads back" in again.stdout, again.stdout


def test_a_job_row_no_worker_can_run_fails_once_and_the_worker_goes_on(tmp_path):
    path = tmp_path / "jobs.db"
    store = Store(f"sqlite:///{path}")
    bad = [store.queue_job(op="softmax", shape="4x8", dtype="float32", options={}, budget_trials=1) for _ in range(2)]
    good = store.queue_job(op="softmax", shape="4x16", dtype="float32", options={}, budget_trials=2)
    with sqlite3.connect(path) as c:
        c.execute("UPDATE jobs SET options = 'not json' WHERE id = ?", (bad[0],))
        c.execute("UPDATE jobs SET options = '[1, 2]' WHERE id = ?", (bad[1],))
    done = cli("worker", "--until-empty", "--db", f"sqlite:///{path}", timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    with sqlite3.connect(path) as c:
        states = dict(c.execute("SELECT id, state || ': ' || coalesce(error, '') FROM jobs").fetchall())
    assert states[good].startswith("done"), states
    for job_id in bad:
        assert states[job_id].startswith("failed: unreadable job row: options is"), states


def test_an_import_too_large_to_parse_is_refused_before_it_is_read(tmp_path):
    import subprocess
    import sys

    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:  # 100 MB as the file system sees it (sparse: no disk spent)
        f.truncate(100 * 2**20)
    target = tmp_path / "target.db"
    # measured by a small parent of its own: a child forked from this test process starts as large as it is, and
    # its peak memory keeps that through the exec
    measure = ("import os, subprocess, sys; child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
               "_, status, usage = os.wait4(child.pid, 0); print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "autotuner", "import", str(huge),
                           "--db", f"sqlite:///{target}"], capture_output=True, text=True, timeout=300)
    code, peak_kib = map(int, done.stdout.split())
    assert code == 2 and "more than --max-mb" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert peak_kib < 500 * 1024, peak_kib  # the file was never read into memory
    assert not target.exists()
