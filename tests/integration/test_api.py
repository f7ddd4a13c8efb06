"""The HTTP service through a real uvicorn process on loopback, on SQLite and the real PostgreSQL."""

from __future__ import annotations

import dataclasses
import time

import httpx
import pytest

from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.base.settings import Settings
from autotuner.launch.lookup import Resolver
from autotuner.store.database import Store
from db import repository as repo
from db.engine import session_scope
from tests.support.devices import H100
from tests.support.server import running_server

TOKEN = "test-token-123"


def seed(url: str) -> dict[str, int]:
    """Two devices; a softmax result on the interpreter, a stale layernorm one, a matmul one on the H100."""
    store = Store(url)
    dev = current_device()
    sm, ln = get_op("softmax"), get_op("layernorm")
    p = sm.parse_problem("64x200")
    run_id = store.start_run(op=sm, problem=p, device=dev, strategy="tpe", budget_trials=3, budget_seconds=None,
                             clock="wall")
    configs = sm.space.candidates(p, dev)[:3]
    for i, c in enumerate(configs):
        store.record_trial(run_id=run_id, config=c, config_key=str(i), status="ok", median_ms=1.0 + i)
    store.finish_run(run_id=run_id, status="done")
    store.save_best(op=sm, problem=p, device=dev, config=configs[0], median_ms=1.0, default_ms=1.5, torch_ms=2.0,
                    run_id=run_id)
    lp = ln.parse_problem("32x100")
    with session_scope(store.engine) as s:
        repo.save_best(s, op="layernorm", problem_key=lp.key, problem=dataclasses.asdict(lp),
                       device_id=store.device_id(dev), kernel_hash=ln.kernel_hash, triton_version="0.0.1-old",
                       config=ln.space.default(lp, dev), median_ms=1.0, default_ms=None, torch_ms=None, run_id=None)
    mm = get_op("matmul")
    mp = mm.parse_problem("4096x4096x4096")
    store.save_best(op=mm, problem=mp, device=H100, config=mm.space.default(mp, H100), median_ms=0.21,
                    default_ms=0.23, torch_ms=0.2, run_id=None)
    return {"run_id": run_id}


@pytest.fixture
def served(url):
    seeded = seed(url)
    with running_server(url, AUTOTUNER_TOKEN=TOKEN) as client:
        yield client, seeded, url


def _field(r: httpx.Response) -> list[str]:
    assert 400 <= r.status_code < 500, r.text
    return r.json()["detail"][0]["loc"]


def test_config_answers_exact_nearest_default_and_404(served):
    client, _, _ = served
    dev = current_device().key
    r = client.get("/config", params={"op": "softmax", "shape": "64x200", "device": dev})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == "exact" and body["median_ms"] == 1.0 and body["speedup_vs_default"] == 1.5
    assert body["stale"] is False and body["tuned_at"] and body["problem_key"] == "64x200:float16"
    assert body["config"] == get_op("softmax").space.candidates(get_op("softmax").parse_problem("64x200"),
                                                                current_device())[0]
    near = client.get("/config", params={"op": "softmax", "shape": "128x200", "device": dev}).json()
    assert near["source"] == "nearest" and near["from_problem"] == "64x200:float16"
    # its times are the other problem's, and the answer says so
    assert near["timing_problem"] == "64x200:float16" and near["median_ms"] == 1.0
    assert body["timing_problem"] == "64x200:float16"
    default = client.get("/config", params={"op": "gelu", "shape": "1000", "device": dev}).json()
    gelu = get_op("gelu")
    assert default["source"] == "default" and default["timing_problem"] is None and default["median_ms"] is None
    assert default["config"] == gelu.space.default(gelu.parse_problem("1000"), current_device())
    miss = client.get("/config", params={"op": "softmax", "shape": "128x200", "device": dev, "fallback": "none"})
    assert miss.status_code == 404 and "no tuned result" in miss.json()["detail"]
    # the H100 result is answered for the H100, with its limits read from the database
    mm = client.get("/config", params={"op": "matmul", "shape": "4096x4096x4096", "device": H100.key}).json()
    assert mm["source"] == "exact" and mm["device"] == H100.key
    # its tune timed cuBLAS at 0.20 ms against the config's 0.21: the library call launches torch's op there
    assert mm["launches_torch"] is True and body["launches_torch"] is False and near["launches_torch"] is False


def test_a_stale_result_is_never_served_as_exact(served):
    client, _, _ = served
    params = {"op": "layernorm", "shape": "32x100", "device": current_device().key}
    body = client.get("/config", params=params).json()
    assert body["source"] != "exact" and body["stale"] is True and "Triton version differs" in body["stale_reason"]
    r = client.get("/config", params={**params, "fallback": "none"})
    assert r.status_code == 404 and "stale" in r.json()["detail"]
    # a caller running that old Triton version gets it as exact
    old = client.get("/config", params={**params, "triton_version": "0.0.1-old"}).json()
    assert old["source"] == "exact" and old["stale"] is False


def test_device_may_be_left_out_only_when_one_is_known(served, tmp_path):
    client, _, _ = served
    r = client.get("/config", params={"op": "softmax", "shape": "64x200"})
    assert r.status_code == 300 and r.json()["detail"][0]["loc"] == ["query", "device"]  # Multiple Choices
    assert set(r.json()["devices"]) == {H100.key, current_device().key}
    one = f"sqlite:///{tmp_path / 'one.db'}"
    store = Store(one)
    sm = get_op("softmax")
    p = sm.parse_problem("64x200")
    store.save_best(op=sm, problem=p, device=current_device(), config=sm.space.default(p, current_device()),
                    median_ms=1.0, default_ms=1.0, torch_ms=None, run_id=None)
    with running_server(one) as single:
        body = single.get("/config", params={"op": "softmax", "shape": "64x200"}).json()
        assert body["source"] == "exact" and body["device"] == current_device().key


BAD_LOOKUPS = [
    ({"op": "nope", "shape": "64x64"}, "op"),
    ({"op": "softmax", "shape": "64xx"}, "shape"),
    ({"op": "matmul", "shape": "64x64"}, "shape"),
    ({"op": "softmax", "shape": "0x64"}, "shape"),
    ({"op": "softmax", "shape": "9" * 101}, "shape"),
    ({"op": "softmax", "shape": "64x64", "dtype": "int8"}, "dtype"),
    ({"op": "softmax", "shape": "64x64", "device": "TPU v9"}, "device"),
    ({"op": "softmax", "shape": "64x64", "device": "bad\x00key"}, "device"),
    ({"op": "softmax", "shape": "64x64", "fallback": "maybe"}, "fallback"),
    ({"op": "matmul", "shape": "64x64x64", "epilogue": "tanh"}, "epilogue"),
    ({"op": "softmax", "shape": "64x64", "epilogue": "bias"}, "epilogue"),
    ({"op": "attention", "shape": "1x2x64x64", "causal": "perhaps"}, "causal"),
    ({"op": "softmax", "shape": "64x64", "kernel_hash": "XYZ"}, "kernel_hash"),
    ({"op": "softmax", "shape": "64x64", "shpe": "1"}, "shpe"),
    ({"shape": "64x64"}, "op"),
]


def test_bad_lookups_are_4xx_naming_the_field(served):
    client, _, _ = served
    for params, field in BAD_LOOKUPS:
        r = client.get("/config", params={"device": current_device().key, **params})
        assert _field(r)[-1] == field, (params, r.text)


def test_a_query_parameter_given_twice_is_refused_naming_it(served):
    """Every query parameter takes one value: given twice, the service answered with the last one (a request its
    schema refuses, found by schemathesis); now a 422 names it, on any route."""
    client, _, _ = served
    for path, query, name in (("/results", "offset=1&offset=0", "offset"), ("/jobs", "limit=5&state=done&limit=6",
                                                                             "limit"),
                              ("/config", "op=softmax&shape=64x128&op=gelu", "op")):
        r = client.get(f"{path}?{query}")
        assert r.status_code == 422 and _field(r) == ["query", name], (path, r.text)
    assert client.get("/results?offset=0&limit=5").status_code == 200


def test_results_devices_and_one_result_with_its_trials(served):
    client, seeded, _ = served
    devices = client.get("/devices").json()
    assert {d["key"] for d in devices} == {current_device().key, H100.key}
    page = client.get("/results", params={"limit": 2}).json()
    assert page["total"] == 3 and len(page["items"]) == 2 and page["limit"] == 2
    rest = client.get("/results", params={"limit": 2, "offset": 2}).json()
    assert len(rest["items"]) == 1
    assert {i["id"] for i in page["items"] + rest["items"]} == {1, 2, 3}
    only = client.get("/results", params={"op": "matmul", "device": H100.key}).json()
    assert only["total"] == 1 and only["items"][0]["problem_key"] == "4096x4096x4096:float16"
    assert only["items"][0]["library"] is None  # a built-in op; a `module:qualname` kernel names its package
    long_name = "liger_kernel.ops.fused_linear_cross_entropy:_fused_linear_cross_entropy_fwd_kernel"
    assert client.get("/results", params={"op": long_name}).json()["total"] == 0  # kernel names run long
    assert client.get("/results", params={"device": "nothing"}).json()["total"] == 0
    softmax = client.get("/results", params={"op": "softmax"}).json()["items"][0]
    detail = client.get(f"/results/{softmax['id']}").json()
    assert detail["run"]["id"] == seeded["run_id"] and len(detail["trials"]) == 3
    assert [t["median_ms"] for t in detail["trials"]] == [1.0, 2.0, 3.0]
    assert client.get("/results/999").status_code == 404
    assert _field(client.get("/results", params={"limit": 0}))[-1] == "limit"
    assert _field(client.get("/results/abc"))[-1] == "result_id"


def test_jobs_need_the_token_and_are_validated(served):
    client, _, _ = served
    job = {"op": "matmul", "shape": "256x256x256", "dtype": "bf16", "options": {"epilogue": "bias"}, "trials": 5,
           "priority": 3}
    assert client.post("/jobs", json=job).status_code == 401
    wrong = client.post("/jobs", json=job, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = client.post("/jobs", json=job, headers=auth)
    assert r.status_code == 202, r.text
    created = r.json()
    assert created["state"] == "queued" and created["dtype"] == "bfloat16" and created["options"] == {"epilogue": "bias"}
    assert created["gpus"] is None  # no count: all of its worker's GPUs
    assert r.headers["location"] == f"/jobs/{created['id']}"
    got = client.get(r.headers["location"]).json()
    assert got == created
    assert client.get("/jobs", params={"state": "queued"}).json()["total"] == 1
    assert client.get("/jobs/12345").status_code == 404
    bad = [({**job, "op": "conv"}, "op"), ({**job, "shape": "1x2"}, "shape"), ({**job, "dtype": "int4"}, "dtype"),
           ({**job, "options": {"epilogue": "x"}}, "epilogue"), ({**job, "options": {"causal": True}}, "causal"),
           ({**job, "strategy": "grid"}, "strategy"), ({**job, "trials": 0}, "trials"), ({**job, "extra": 1}, "extra"),
           ({**job, "priority": 10**9}, "priority"), ({**job, "gpus": 0}, "gpus"), ({**job, "gpus": 1.5}, "gpus"),
           ({**job, "gpus": "2"}, "gpus"), ({**job, "gpus": 65}, "gpus")]
    for body, field in bad:
        assert _field(client.post("/jobs", json=body, headers=auth))[-1] == field, body
    assert client.get("/jobs").json()["total"] == 1  # nothing bad was queued
    two = client.post("/jobs", json={**job, "gpus": 2.0}, headers=auth).json()  # JSON's 2.0 is the integer 2
    assert two["gpus"] == 2 and client.get(f"/jobs/{two['id']}").json()["gpus"] == 2


def test_a_server_without_a_token_refuses_every_write(tmp_path):
    with running_server(f"sqlite:///{tmp_path / 'x.db'}") as client:
        r = client.post("/jobs", json={"op": "softmax", "shape": "8x8"}, headers={"Authorization": "Bearer x"})
        assert r.status_code == 403 and "AUTOTUNER_TOKEN" in r.json()["detail"]
        assert client.get("/jobs").json()["total"] == 0


def test_health_and_metrics(served):
    client, _, _ = served
    assert client.get("/healthz").json()["status"] == "ok"
    dev = current_device().key
    for shape in ("64x200", "64x200", "128x200"):
        client.get("/config", params={"op": "softmax", "shape": shape, "device": dev})
    client.get("/config", params={"op": "softmax", "shape": "128x200", "device": dev, "fallback": "none"})
    client.post("/jobs", json={"op": "softmax", "shape": "8x8"}, headers={"Authorization": f"Bearer {TOKEN}"})
    text = client.get("/metrics").text
    assert 'autotuner_config_lookups_total{source="exact"} 2.0' in text
    assert 'autotuner_config_lookups_total{source="nearest"} 1.0' in text
    assert 'autotuner_config_lookups_total{source="none"} 1.0' in text
    assert 'autotuner_http_requests_total{method="GET",route="/config",status="200"} 3.0' in text
    assert 'autotuner_http_requests_total{method="GET",route="/config",status="404"} 1.0' in text
    assert 'autotuner_jobs{state="queued"} 1.0' in text
    assert 'autotuner_http_request_duration_seconds_count{method="GET",route="/config"} 4.0' in text


def test_a_dead_database_gives_503_not_500_and_the_server_stays_up():
    dead = "postgresql+psycopg://postgres@127.0.0.1:1/none"
    with running_server(dead, AUTOTUNER_TOKEN=TOKEN) as client:
        health = client.get("/healthz")
        assert health.status_code == 503 and health.json()["status"] == "unavailable"
        r = client.get("/config", params={"op": "softmax", "shape": "64x64"})
        assert r.status_code == 503 and "unavailable" in r.json()["detail"]
        assert client.post("/jobs", json={"op": "softmax", "shape": "8x8"},
                           headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 503
        assert client.get("/config", params={"op": "nope", "shape": "1"}).status_code == 422  # still validates
        assert client.get("/metrics").status_code == 200


def test_cached_answers_are_refreshed(url):
    """With the answer cache on, a new result reaches lookups within the cache time, and no request waits."""
    seed(url)
    dev = current_device()
    params = {"op": "softmax", "shape": "512x200", "device": dev.key}
    with running_server(url, AUTOTUNER_CONFIG_CACHE_S="0.5") as client:
        assert client.get("/config", params=params).json()["source"] == "nearest"
        sm = get_op("softmax")
        p = sm.parse_problem("512x200")
        Store(url).save_best(op=sm, problem=p, device=dev, config=sm.space.default(p, dev), median_ms=0.5,
                             default_ms=0.5, torch_ms=None, run_id=None)
        assert client.get("/config", params=params).json()["source"] == "nearest"  # cached
        deadline = time.monotonic() + 10
        while client.get("/config", params=params).json()["source"] != "exact":
            assert time.monotonic() < deadline, "the cached answer was never refreshed"
            time.sleep(0.1)


def test_library_lookups_go_through_the_service(served, tmp_path):
    client, _, _ = served
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'empty-local.db'}", url=str(client.base_url))
    sm = get_op("softmax")
    served_config = client.get("/config", params={"op": "softmax", "shape": "64x200",
                                                  "device": current_device().key}).json()["config"]
    # asked once first: a launching process gives the service 0.25 s, more than a cold first answer can take
    # on a loaded 2-core machine
    res = Resolver(settings).resolve(sm, sm.parse_problem("64x200"), current_device())
    assert (res.source, res.step) == ("exact", "service"), res.trace
    assert res.config == served_config
    assert res.torch_ms == 2.0 and not res.launches_torch  # torch's op ran slower there: the config serves

    sm_problem = sm.parse_problem("64x300")  # a result whose tune timed torch's op faster than its best config
    Store(served[2]).save_best(op=sm, problem=sm_problem, device=current_device(), config=res.config, median_ms=1.0,
                               default_ms=1.5, torch_ms=0.5, run_id=None)
    client.get("/config", params={"op": "softmax", "shape": "64x300", "device": current_device().key})
    res = Resolver(settings).resolve(sm, sm_problem, current_device())
    assert (res.step, res.torch_ms, res.launches_torch) == ("service", 0.5, True), res.trace
