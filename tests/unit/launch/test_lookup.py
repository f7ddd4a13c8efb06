"""Library calls resolve their config by themselves (database, service, nearest, default), once per input
signature: later calls with the same signature reuse the prepared launcher."""

from __future__ import annotations

import importlib
import socket
import threading
import time

import pytest
import torch
from sqlalchemy import select

import autotuner
from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.base.settings import Settings
from autotuner.launch.lookup import Resolver, resolver, set_resolver
from autotuner.launch.service_client import SERVICE_TIMEOUT_S
from autotuner.store.database import Store
from autotuner.store.resolution import TORCH_MARGIN
from db.engine import session_scope
from db.models import Job

DEAD_URL = "http://127.0.0.1:9"  # nothing listens on the discard port here
LOOPING = {"BLOCK_N": 32, "ROWS": 2, "num_warps": 1, "num_stages": 2}  # far from the default: easy to tell apart


@pytest.fixture
def db(tmp_path):
    return f"sqlite:///{tmp_path / 'lookup.db'}"


@pytest.fixture
def use(monkeypatch):
    """Install a resolver with the given settings; record the config each softmax launch really receives, and
    each time a launcher is prepared (a new input signature, or an explicit config)."""
    seen: list[dict] = []
    prepared: list[dict] = []
    module = importlib.import_module("kernels.softmax")
    real = module.prepare

    def spy(x, config):
        prepared.append(dict(config))
        launch = real(x, config)

        def recorded(x):
            seen.append(dict(config))
            return launch(x)

        return recorded

    monkeypatch.setattr(module, "prepare", spy)

    def install(**settings):
        set_resolver(Resolver(Settings(**settings)))
        autotuner.clear_cache()
        seen.clear()
        prepared.clear()
        return seen

    install.prepared = prepared
    yield install
    set_resolver(None)
    autotuner.clear_cache()


def _store_best(db, shape, config, dtype="float32", torch_ms=None):
    op = get_op("softmax")
    problem = op.parse_problem(shape, dtype)
    Store(db).save_best(op=op, problem=problem, device=current_device(), config=config, median_ms=1.0,
                        default_ms=2.0, torch_ms=torch_ms, run_id=None)


def test_a_launch_uses_the_tuned_config_from_the_database(db, use):
    _store_best(db, "16x100", LOOPING)
    seen = use(db_url=db)
    x = torch.randn(16, 100)
    y = autotuner.softmax(x)
    assert seen == [LOOPING]
    assert torch.allclose(y, torch.softmax(x, -1), atol=1e-6)
    autotuner.softmax(torch.randn(16, 100))
    assert seen == [LOOPING, LOOPING]
    assert use.prepared == [LOOPING]  # the second launch reused the first one's launcher: no lookup, no checks
    res = resolver().resolve("softmax", get_op("softmax").parse_problem("16x100", "float32"), current_device())
    assert (res.source, res.step) == ("exact", "database")


def test_explicit_config_wins(db, use):
    _store_best(db, "16x100", LOOPING)
    seen = use(db_url=db)
    cfg = {"BLOCK_N": 128, "ROWS": 1, "num_warps": 1, "num_stages": 1}
    autotuner.softmax(torch.randn(16, 100), config=cfg)
    assert seen == [cfg]


def _aten_ops(call):
    """The ATen operators a call ran, as torch's profiler records them on the CPU."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = call()
    return out, {e.name for e in prof.events()}


def test_a_result_whose_tune_timed_torch_faster_launches_torchs_op(db, use):
    """Where a tuned result's own tune timed torch's op more than the margin faster than its best config, the
    library call launches torch's op (the kernel never runs), for its problem and the rest of its bucket; within
    the margin, with an explicit config, for a problem only near it, or where the row's torch time is no time,
    the kernel serves."""
    _store_best(db, "16x100", LOOPING, torch_ms=0.5)  # the best config's time is 1.0
    _store_best(db, "32x100", LOOPING, torch_ms=1.0 - TORCH_MARGIN / 2)  # a tie within the noise
    _store_best(db, "64x100", LOOPING, torch_ms=-1.0)  # a row written by hand: not a time
    seen = use(db_url=db)
    x = torch.randn(16, 100)
    for _ in range(2):  # the first call resolves, the second reuses the kept launch
        y, ran = _aten_ops(lambda: autotuner.softmax(x))
        torch.testing.assert_close(y, torch.softmax(x, -1))
        assert "aten::softmax" in ran
    assert seen == [] and use.prepared == [LOOPING]  # the inputs were checked (prepared), the kernel never launched
    autotuner.softmax(x, config=LOOPING)
    assert seen == [LOOPING]
    _, ran = _aten_ops(lambda: autotuner.softmax(torch.randn(32, 100)))
    assert seen == [LOOPING, LOOPING] and "aten::softmax" not in ran
    autotuner.softmax(torch.randn(16, 120))  # 16x100's config as the nearest tuned problem's: not its torch choice
    assert seen[-1] == LOOPING and len(seen) == 3
    autotuner.softmax(torch.randn(64, 100))
    assert len(seen) == 4
    _, ran = _aten_ops(lambda: autotuner.softmax(torch.randn(12, 100)))  # 16x100 is its bucket's representative
    assert len(seen) == 4 and "aten::softmax" in ran
    with pytest.raises(ValueError, match="must be contiguous in its last dimension"):  # checked as for the kernel
        autotuner.softmax(torch.randn(100, 16).t())  # (16x100: torch's op would serve it)
    seen = use(db_url=db, torch_op=False)  # the user's switch: the tuned kernel, always
    autotuner.softmax(x)
    assert seen == [LOOPING]


def test_nearest_tuned_problem_then_default(db, use):
    _store_best(db, "16x100", LOOPING)
    seen = use(db_url=db)
    autotuner.softmax(torch.randn(20, 100))
    assert seen[-1] == LOOPING
    res = resolver().resolve("softmax", get_op("softmax").parse_problem("20x100", "float32"), current_device())
    assert res.source == "nearest" and res.from_problem == "16x100:float32"
    autotuner.softmax(torch.randn(20, 100).half())  # another dtype: nothing near, the default
    problem = get_op("softmax").parse_problem("20x100", "float16")
    assert seen[-1] == get_op("softmax").space.default(problem, current_device())


def test_a_repeated_call_asked_again_launches_the_result_tuned_meanwhile(db, use, monkeypatch):
    """A nearest answer's launch, repeated (and so tried first, autotuner.launch.same_call), is asked again after
    recheck_s: the exact result stored meanwhile is what the following calls launch, prepared once."""
    from autotuner.launch import lookup

    _store_best(db, "16x100", LOOPING)
    seen = use(db_url=db)
    x = torch.randn(20, 100)
    for _ in range(3):
        autotuner.softmax(x)
    assert seen[-1] == LOOPING
    tuned = {"BLOCK_N": 128, "ROWS": 1, "num_warps": 2, "num_stages": 1}
    _store_best(db, "20x100", tuned)
    monkeypatch.setattr(lookup, "_now", lambda: float("inf"))  # recheck_s has passed
    before = len(use.prepared)
    for _ in range(4):
        autotuner.softmax(x)
    assert seen[-4:] == [tuned] * 4
    assert use.prepared[before:] == [tuned]  # resolved and prepared once: the old answer is not tried again


def test_a_dead_service_never_holds_a_launch_up(db, use):
    """A service that accepts connections and never answers: the first miss waits for it once (its short
    timeout), later misses do not ask it again. Counted on the listening socket, not timed: a loaded machine's
    interpreter launches may take any time."""
    _store_best(db, "16x100", LOOPING)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.settimeout(0.05)
        accepted: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:  # hold each connection open, unanswered
            while not stop.is_set():
                try:
                    accepted.append(silent.accept()[0])
                except TimeoutError:
                    pass

        listener = threading.Thread(target=accept, daemon=True)
        listener.start()
        seen = use(db_url=db, url=f"http://127.0.0.1:{silent.getsockname()[1]}")
        autotuner.softmax(torch.randn(16, 100))  # exact in the local database: the service is not needed
        assert accepted == []
        autotuner.softmax(torch.randn(3, 50))  # a miss: asks the silent service once, gives up, then the default
        for rows in range(4, 14):
            autotuner.softmax(torch.randn(rows, 70))  # more misses: the failed service is remembered
        stop.set()
        listener.join()
        for conn in accepted:
            conn.close()
    assert seen[0] == LOOPING and len(seen) == 12
    assert len(accepted) == 1
    with socket.create_server(("127.0.0.1", 0)) as again:  # a fresh silent service: one ask costs its timeout
        resolver_ = Resolver(Settings(db_url=db, url=f"http://127.0.0.1:{again.getsockname()[1]}"))
        t0 = time.perf_counter()
        r0 = resolver_.resolve("softmax", get_op("softmax").parse_problem("5x70", "float32"), current_device())
        waited = time.perf_counter() - t0
    assert any("Timeout" in t for t in r0.trace), r0.trace
    assert SERVICE_TIMEOUT_S <= waited < 20 * SERVICE_TIMEOUT_S
    res = Resolver(Settings(db_url=db, url=DEAD_URL))
    problem = get_op("softmax").parse_problem("5x77", "float32")
    r1 = res.resolve("softmax", problem, current_device())
    assert any("ConnectError" in t for t in r1.trace) and r1.source == "nearest"
    r2 = res.resolve("softmax", get_op("softmax").parse_problem("6x77", "float32"), current_device())
    assert any("skipped, it failed" in t for t in r2.trace)


def test_a_broken_database_falls_back_to_the_default(tmp_path, use):
    bad = tmp_path / "junk.db"
    bad.write_bytes(b"not sqlite" * 50)
    seen = use(db_url=f"sqlite:///{bad}")
    autotuner.softmax(torch.randn(4, 30))
    problem = get_op("softmax").parse_problem("4x30", "float32")
    assert seen == [get_op("softmax").space.default(problem, current_device())]


def test_stale_results_are_never_served_as_exact(db, use):
    op = get_op("softmax")
    problem = op.parse_problem("16x100", "float32")
    store = Store(db)
    from db import repository as repo

    with session_scope(store.engine) as s:
        repo.save_best(s, op="softmax", problem_key=problem.key, problem={"rows": 16, "cols": 100, "dtype": "float32"},
                       device_id=store.device_id(current_device()), kernel_hash="old", triton_version="0.1",
                       config=LOOPING, median_ms=0.5, default_ms=None, torch_ms=None, run_id=None)
    use(db_url=db)
    res = resolver().resolve("softmax", problem, current_device())
    assert res.source == "default" and any("stale" in t for t in res.trace)


def test_tune_on_miss_queues_a_job_without_blocking_raised_by_its_meets(db, use):
    """The bucket's job is queued once; every launch served without an exact result after its first raises it
    (8x64: 4 launches after its miss; 6x64, of the same bucket: 2)."""
    use(db_url=db, tune_on_miss=True)
    t0 = time.perf_counter()
    for rows, calls in ((8, 5), (6, 3)):
        x = torch.randn(rows, 64)
        for _ in range(calls):
            autotuner.softmax(x)
    assert time.perf_counter() - t0 < 5.0
    resolver()._join_background()
    with session_scope(Store(db).engine) as s:
        jobs = list(s.scalars(select(Job)))
    assert [(j.op, j.shape, j.dtype, j.state, j.priority) for j in jobs] == [
        ("softmax", "8x64", "float32", "queued", 6)]


def test_every_library_call_matches_torch(db, use):
    use(db_url=db)
    a, b, bias = torch.randn(20, 30), torch.randn(30, 17), torch.randn(17)
    torch.testing.assert_close(autotuner.matmul(a, b, bias, activation="relu"), torch.relu(a @ b + bias),
                               atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(autotuner.matmul(a, b, activation="gelu"),
                               torch.nn.functional.gelu(a @ b, approximate="tanh"), atol=1e-4, rtol=1e-4)
    x, w, bb = torch.randn(6, 40), torch.randn(40), torch.randn(40)
    torch.testing.assert_close(autotuner.layer_norm(x, w, bb, 1e-5),
                               torch.nn.functional.layer_norm(x, (40,), w, bb, 1e-5), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(autotuner.gelu(x, approximate="none"), torch.nn.functional.gelu(x), atol=1e-5,
                               rtol=1e-5)
    q, k, v = (torch.randn(1, 2, 20, 64).half() for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(autotuner.attention(q, k, v, causal=True).float(), ref, atol=2e-3, rtol=2e-3)
    with pytest.raises(ValueError, match="activation='tanh' is not supported"):
        autotuner.matmul(a, b, activation="tanh")


def test_checks_run_once_per_input_signature_and_every_new_one_in_full(db, use):
    """A cached launcher serves only its own signature: a new dtype, stride, shape or alignment is checked in full
    (and gets the same clear error a launch with an explicit config gets)."""
    use(db_url=db)
    x = torch.randn(8, 64)
    autotuner.softmax(x)
    assert use.prepared and len(use.prepared) == 1
    with pytest.raises((TypeError, ValueError), match="dtype .?int32.?; accepted: float16, bfloat16, float32"):
        autotuner.softmax(torch.ones(8, 64, dtype=torch.int32))
    with pytest.raises(ValueError, match="must be contiguous in its last dimension"):
        autotuner.softmax(torch.randn(64, 8).t())  # same shape, other strides: a new signature
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        autotuner.softmax([[1.0, 2.0]])
    before = len(use.prepared)
    unaligned = torch.randn(8 * 64 + 1)[1:].view(8, 64)  # same shape and strides, 4-byte aligned only
    torch.testing.assert_close(autotuner.softmax(unaligned), torch.softmax(unaligned, -1))
    autotuner.softmax(unaligned)
    autotuner.softmax(x)
    assert len(use.prepared) == before + 1  # the unaligned input got a launcher of its own, once
    with pytest.raises(ValueError, match="approximate='fast' is not supported"):
        autotuner.gelu(x, approximate="fast")
    with pytest.raises(ValueError, match="bias has shape"):
        autotuner.matmul(torch.randn(4, 8), torch.randn(8, 5), torch.randn(4))


def test_a_problem_without_a_result_is_served_its_buckets(db):
    """Softmax buckets its rows by powers of two: 100 rows are served the result of 128 while they have none of
    their own, and only if that config is valid for 100 rows; an exact result wins over the bucket's."""
    from autotuner.launch.lookup import resolve

    op, device = get_op("softmax"), current_device()
    assert op.parse_problem("100x1000", "float32").bucket() == op.parse_problem("128x1000", "float32")
    assert get_op("matmul").parse_problem("1000x512x256").bucket().shape == "1024x512x256"
    _store_best(db, "128x1000", LOOPING)
    store = Store(db)
    res = resolve(op, op.parse_problem("100x1000", "float32"), device, store=store, fallback="none")
    assert (res.source, res.from_problem, res.config) == ("bucket", "128x1000:float32", LOOPING)
    assert "database: 128x1000:float32, this problem's bucket" in res.trace
    _store_best(db, "100x1000", {**LOOPING, "num_warps": 2})
    assert resolve(op, op.parse_problem("100x1000", "float32"), device, store=store).source == "exact"
    wide = {**LOOPING, "BLOCK_N": 2048}  # larger than useful for 1000 columns: not valid there
    _store_best(db, "16x1000", wide)
    res = resolve(op, op.parse_problem("9x1000", "float32"), device, store=store)
    assert res.source == "nearest" and "database: nothing current for its bucket 16x1000:float32" in res.trace


def test_prepare_readies_the_resolver_ahead_and_follows_a_later_environment(db, monkeypatch):
    """`prepare` (a kernel being decorated) builds the process's resolver and opens its database on a background
    thread, so the first launch pays for neither; a variable changed between then and the first launch still
    counts."""
    from autotuner.launch import lookup

    _store_best(db, "8x64", LOOPING)  # the database exists: a prepared resolver opens it for reads
    monkeypatch.setenv("AUTOTUNER_DB_URL", db)
    monkeypatch.setenv("AUTOTUNER_ON_MISS", "default")
    set_resolver(None)
    try:
        lookup.warm_up(get_op("softmax"))
        lookup.warmed_up()
        ahead = lookup._RESOLVER
        assert ahead is not None and ahead.store._store is not None  # opened before any launch asked
        assert resolver() is ahead and resolver().settings.on_miss == "default"

        set_resolver(None)
        lookup.warm_up()
        lookup.warmed_up()
        monkeypatch.setenv("AUTOTUNER_ON_MISS", "nearest")  # after the resolver was prepared, before first use
        assert resolver().settings.on_miss == "nearest"
    finally:
        set_resolver(None)


def test_a_database_created_after_the_resolver_was_prepared_is_found(tmp_path, monkeypatch):
    """Preparing ahead finds no database yet; that is not remembered as a failure, so the first lookup, after the
    database was created, reads it."""
    from autotuner.launch import lookup

    db = f"sqlite:///{tmp_path / 'later.db'}"
    monkeypatch.setenv("AUTOTUNER_DB_URL", db)
    set_resolver(None)
    try:
        lookup.warm_up(get_op("softmax"))
        lookup.warmed_up()
        assert lookup._RESOLVER is not None and lookup._RESOLVER.store._store is None
        _store_best(db, "8x64", LOOPING)
        store, error = resolver().store.peek()
        assert error is None and store is not None
    finally:
        set_resolver(None)


SLOW_PREPARE = """
import pathlib, sys, time
from autotuner.launch import lookup

marks = pathlib.Path(sys.argv[1])


class Slow:  # an op whose source hash takes a second to compute
    name = "slow"

    @property
    def kernel_hash(self):
        (marks / "started").write_text("")
        time.sleep(1.0)
        (marks / "done").write_text("")
        return "h"


lookup.AST_COUNTER_SHARED = False  # the hash computed ahead whatever the Python (what is tested is the exit)
lookup.warm_up(Slow())
while not (marks / "started").exists():
    time.sleep(0.01)
"""


def test_a_process_exiting_lets_the_readying_under_way_finish(tmp_path):
    """The process exits while prepare's thread computes a source hash: the exit waits for it (a daemon thread
    stopped inside native code as the interpreter shuts down can abort the process), and the process ends 0."""
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", SLOW_PREPARE, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[3],
                         env={**__import__("os").environ, "AUTOTUNER_DB_URL": f"sqlite:///{tmp_path / 'none.db'}"})
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "done").exists()


def test_resolution_is_its_steps_in_order_each_answering_or_passing(db, monkeypatch):
    """`resolve` is the first of `STEPS` to answer; a new source is a step put in its place. Each answer's source is
    a `Source`, and whether the answer is final (kept) or asked again later is the source's."""
    from autotuner.store import resolution
    from autotuner.store.resolution import FINAL, STEPS, Source, Step, resolve

    assert [s.name for s in STEPS] == ["exact", "predicted", "bucket", "service", "give_up", "nearest", "default"]
    assert all(s.does for s in STEPS) and STEPS[-1].sources == (Source.DEFAULT,)  # each step describes itself
    assert FINAL == {Source.EXACT, Source.BUCKET}
    op, device = get_op("softmax"), current_device()
    _store_best(db, "16x100", LOOPING)
    store = Store(db)
    exact = resolve(op, op.parse_problem("16x100", "float32"), device, store=store)
    assert exact.source is Source.EXACT and exact.final and exact.config == LOOPING
    near = resolve(op, op.parse_problem("16x120", "float32"), device, store=store)
    assert near.source is Source.NEAREST and not near.final and near.from_problem.startswith("16x100")
    assert str(near.source) == "nearest" and near.trace[-1].startswith("nearest: 16x100")

    def pinned(q):  # a source of one's own, before nearest: answers for one shape, passes for the others
        if q.problem.shape != "16x120":
            return None
        q.trace.append("pinned: by hand")
        return q.answer(dict(LOOPING, ROWS=1), Source.DEFAULT, "default", "pinned by hand")

    step = Step("pinned", (Source.DEFAULT,), "a config pinned by hand for one shape", pinned)
    monkeypatch.setattr(resolution, "STEPS", (*STEPS[:5], step, *STEPS[5:]))
    again = resolve(op, op.parse_problem("16x120", "float32"), device, store=store)
    assert again.config["ROWS"] == 1 and again.trace[-1] == "pinned: by hand" and not again.final
    assert resolve(op, op.parse_problem("16x100", "float32"), device, store=store).source is Source.EXACT
