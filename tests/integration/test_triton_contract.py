"""What a process that leaves autotuner on for days relies on, under the decorator, the switch
(`autotuner.install()`) and the library calls, in the interpreter on the same launch path as a GPU's:

- no tensor of a launch is kept once it returns, keyword arguments included, with one direct launcher per call
  signature (never per tensor);
- Triton's Autotuner attributes as Triton's `run` leaves them (`cache`, `best_config`), the pruning called with
  what Triton passes, the autotuning listener told, `wrap_triton` and `triton_op` taking a decorated kernel;
- a stored config the kernel no longer lists is never launched; a config added is the only one timed; the
  kernel's identity is its code, not its decorator's arguments."""

from __future__ import annotations

import gc
import importlib.util
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from sqlalchemy import func, select
from triton.runtime.autotuner import Autotuner
from triton.tools.tensor_descriptor import TensorDescriptor

import autotuner
from autotuner.base.settings import Settings, unknown_variables
from autotuner.decorator import install as covered
from autotuner.decorator.configs import config_dict
from autotuner.launch import library, same_call
from autotuner.launch.lookup import Resolver, resolver, set_resolver
from autotuner.store.database import Store
from db.engine import session_scope
from db.models import Trial, TuningRun
from search_spaces.kernel_identity import kernel_identity
from tests.support.interpreter_timing import wall_bench

CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2),
           triton.Config({"BLOCK": 128}, num_warps=4)]


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def at_least_n(configs, nargs, **kwargs):
    """An early_config_prune whose answer depends on the key: the smallest block of at least n (else the largest),
    one config, which Triton launches without timing."""
    n = nargs["n"] if "n" in nargs else kwargs["n"]
    return [c for c in configs if c.kwargs["BLOCK"] >= n][:1] or configs[-1:]


axpy = autotuner.autotune(configs=CONFIGS, key=["n"], name="contract:axpy", on_miss="default")(_axpy)
axpy_pruned = autotuner.autotune(configs=CONFIGS, key=["n"], name="contract:axpy_pruned", on_miss="default",
                                 prune_configs_by={"early_config_prune": at_least_n})(_axpy)
axpy_triton = triton.autotune(configs=CONFIGS, key=["n"], do_bench=wall_bench,
                              prune_configs_by={"early_config_prune": at_least_n})(_axpy)


def grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path / 'contract.db'}"
    set_resolver(Resolver(Settings(db_url=url)))
    yield url
    set_resolver(None)


@pytest.fixture
def switch(db):
    autotuner.install()
    yield db
    autotuner.uninstall()
    for attr in ("_autotuner_adopted", "_autotuner_kept", "_autotuner_first_s"):
        axpy_triton.__dict__.pop(attr, None)
    axpy_triton.cache.clear()


def _launches(kernel, n, times, *, keywords):
    """`times` launches on new tensors, alternating keyword and positional calls; weak references to every tensor."""
    refs = []
    for i in range(times):
        x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
        alpha = 0.5 + i
        if keywords and i % 2 == 0:
            kernel[grid](x_ptr=x, y_ptr=y, out_ptr=out, n=n, alpha=alpha)
        else:
            kernel[grid](x, y, out, n, alpha)
        torch.testing.assert_close(out, alpha * x + y)
        refs += [weakref.ref(x), weakref.ref(y), weakref.ref(out)]
        del x, y, out
    gc.collect()
    return [r for r in refs if r() is not None]


def test_a_decorated_kernel_keeps_no_tensor_and_launches_keywords_directly(db):
    axpy.cache.clear()
    assert _launches(axpy, 100, 12, keywords=True) == []
    launchers = [hit.launcher for hit in axpy._hits.values()]
    assert len(launchers) == 2  # one per call signature: the positional calls' and the keyword calls'
    assert all(launcher.direct for launcher in launchers)  # both past Triton's binding
    assert all(v is None or not isinstance(v, torch.Tensor) for launcher in launchers for v in launcher._values)


def test_the_switch_keeps_no_tensor_of_a_keyword_launch(switch):
    assert _launches(axpy_triton, 100, 12, keywords=True) == []
    adopted = axpy_triton.__dict__["_autotuner_adopted"]
    assert isinstance(adopted, autotuner.decorator.Autotuned) and len(adopted._hits) == 2



@triton.jit
def _write_block(out_ptr, n, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.program_id(0), BLOCK)


write_block = autotuner.autotune(configs=CONFIGS, key=["n"], name="contract:write_block",
                                 on_miss="default")(_write_block)


def test_a_config_set_in_the_cache_is_the_one_launched_next(db):
    """Code that sets or clears `kernel.cache` (as it may Triton's) changes what the next launch runs, although
    each call signature keeps its launcher."""
    write_block.cache.clear()
    out = torch.zeros(1, dtype=torch.int32)
    for _ in range(2):
        write_block[(1,)](out, 10)
    (key,) = write_block.cache
    first = write_block.cache[key].kwargs["BLOCK"]
    assert out.item() == first and write_block.best_config.kwargs["BLOCK"] == first
    other = next(c for c in CONFIGS if c.kwargs["BLOCK"] != first)
    write_block.cache[key] = other
    write_block[(1,)](out, 10)
    assert out.item() == other.kwargs["BLOCK"] and write_block.best_config is other
    write_block.cache.update({key: CONFIGS[0]})
    write_block[(1,)](out, 10)
    assert out.item() == CONFIGS[0].kwargs["BLOCK"]
    write_block.cache.clear()  # resolved again, on its next launch, to what the miss policy gives
    write_block[(1,)](out, 10)
    assert out.item() == first and set(write_block.cache) == {key}
    write_block.cache = {key: other}  # a new dict set in its place
    write_block[(1,)](out, 10)
    assert out.item() == other.kwargs["BLOCK"]

def _descriptor_hook(nargs):  # as the Triton tutorial's attention sets its descriptors' block shapes
    for name in ("x_desc", "y_desc"):
        nargs[name].block_shape = [nargs["BLOCK"], 16]


@triton.jit
def _twice(x_desc, y_desc, BLOCK: tl.constexpr):
    off = tl.program_id(0) * BLOCK
    y_desc.store([off, 0], x_desc.load([off, 0]) * 2)


twice = autotuner.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=_descriptor_hook) for b in (16, 32)],
                           key=[], name="contract:twice", on_miss="default")(_twice)


def test_host_tensor_descriptors_launch_directly_and_are_not_kept(db):
    twice.cache.clear()
    refs = []
    for _ in range(6):
        x = torch.randn(64, 16)
        y = torch.empty_like(x)
        descs = [TensorDescriptor(t, [64, 16], [16, 1], [1, 1]) for t in (x, y)]
        twice[lambda meta: (64 // meta["BLOCK"],)](*descs)
        torch.testing.assert_close(y, 2 * x)
        refs += [weakref.ref(x), weakref.ref(y), *map(weakref.ref, descs)]
        del x, y, descs
    resolver()._join_background()  # the first launch's recording holds it until written, on its own thread
    gc.collect()
    assert [r for r in refs if r() is not None] == []
    launchers = [hit.launcher for hit in twice._hits.values()]
    assert len(launchers) == 1 and launchers[0].direct  # one signature: the block shape the hook set, not identity


@triton.jit
def _shifted(x_ptr, out_ptr, n, shift=0.0, y_ptr=None, BLOCK: tl.constexpr = 32):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask) + shift
    if y_ptr is not None:
        v += tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, v, mask=mask)


shifted = autotuner.autotune(configs=CONFIGS, key=["n"], name="contract:shifted", on_miss="default")(_shifted)


def test_a_tensor_given_by_keyword_after_a_default_is_not_kept(db):
    shifted.cache.clear()
    refs = []
    for _ in range(6):
        x, y, out = torch.randn(50), torch.randn(50), torch.empty(50)
        shifted[grid](x, out, 50, y_ptr=y)  # `shift` left to its default: y stays a keyword argument
        torch.testing.assert_close(out, x + y)
        refs += [weakref.ref(x), weakref.ref(y), weakref.ref(out)]
        del x, y, out
    gc.collect()
    assert [r for r in refs if r() is not None] == []
    assert len(shifted._hits) == 0  # such a launch goes through Triton's own binding, keeping nothing


def test_a_decorated_hit_that_repeats_is_tried_first_and_a_changing_scalar_stops_that(db):
    axpy.cache.clear()  # (drops the launchers and what is tried first)
    assert axpy._tries == [None, None]
    x, y = torch.randn(64), torch.randn(64)
    for _ in range(3):
        out = torch.empty(64)
        axpy[grid](x, y, out, 64, 2.0)
        torch.testing.assert_close(out, 2.0 * x + y)
    floats = axpy._hits[axpy._call_signature((x, y, out, 64, 2.0), {})]
    assert axpy._tries[0] is floats  # found twice in a row: tried before the call signature
    out = torch.empty(64)
    axpy[grid](x, y, out, 64, 2)  # an int alpha, equal to the float: another signature, another launcher
    torch.testing.assert_close(out, 2.0 * x + y)
    assert len(axpy._hits) == 2 and axpy._tries == [floats, None]
    for alpha in (0.5, 1.5, 2.5, 3.5):  # one signature, its scalar changing: its check turns the first away
        out = torch.empty(64)
        axpy[grid](x, y, out, 64, alpha)
        torch.testing.assert_close(out, alpha * x + y)
    assert floats.same is same_call.never and axpy._tries[0] is None and len(axpy._hits) == 2


def test_calls_in_a_fixed_cycle_of_shapes_are_each_tried_by_the_check_of_the_one_before(db, monkeypatch):
    axpy.cache.clear()
    shapes = (64, 32, 48)

    def call(n: int) -> None:
        x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
        axpy[grid](x, y, out, n, 2.0)
        torch.testing.assert_close(out, 2.0 * x + y)

    # the first round resolves each key (which drops the launches kept), the second keeps a launch for each, the
    # next two teach each hit, twice, the one that follows it
    for n in shapes * 4 + shapes[:1]:
        call(n)
    hits = {n: axpy._hits[axpy._call_signature((torch.randn(n), torch.randn(n), torch.empty(n), n, 2.0), {})]
            for n in shapes}
    signed: list = []
    real = axpy._call_signature
    monkeypatch.setattr(axpy, "_call_signature", lambda *a: signed.append(a) or real(*a))
    for n in shapes[1:] + shapes * 2:
        assert axpy._tries[0] is hits[n]  # the hit tried is this call's own
        call(n)
    assert signed == []  # no call built its signature: the check tried passed each one
    call(40)  # a shape out of the cycle: the check tried turns it away, its own key launches it
    assert len(signed) == 1 and all(h.same is not same_call.never for h in hits.values())


def test_a_repeated_keyword_call_is_tried_first_and_keeps_no_tensor(db):
    axpy.cache.clear()
    refs = []
    for _ in range(4):
        x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
        axpy[grid](x_ptr=x, y_ptr=y, out_ptr=out, n=64, alpha=2.0)
        torch.testing.assert_close(out, 2.0 * x + y)
        refs += [weakref.ref(x), weakref.ref(y), weakref.ref(out)]
        del x, y, out
    gc.collect()
    assert [r for r in refs if r() is not None] == []
    (kept,) = axpy._hits.values()
    assert axpy._tries[0] is kept and kept.same is not same_call.never
    x, out = torch.randn(32), torch.empty(32)  # another shape, by name: turned away, and launched right
    axpy[grid](x_ptr=x, y_ptr=x, out_ptr=out, n=32, alpha=2.0)
    torch.testing.assert_close(out, 3.0 * x)


def test_a_tried_hit_gives_its_grid_function_this_calls_arguments_in_a_dictionary_of_its_own(db):
    axpy.cache.clear()
    seen = []

    def recording(meta):
        seen.append(dict(meta))
        meta["n"] = -1  # what a grid function changes reaches no later call
        return (triton.cdiv(64, meta["BLOCK"]),)

    for _ in range(4):
        x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
        axpy[recording](x, y, out, 64, alpha=2.0)
        torch.testing.assert_close(out, 2.0 * x + y)
        got = seen[-1]
        assert all(got[k] is v for k, v in (("x_ptr", x), ("y_ptr", y), ("out_ptr", out)))  # this call's tensors
        assert got["n"] == 64 and got["alpha"] == 2.0 and got["BLOCK"] in (32, 64, 128)
    assert axpy._tries[0] is not None and axpy._tries[0].named is not None  # the last two were tried first
    assert all(list(s) == list(seen[-1]) for s in seen[-4:])  # each launch's (its first one's too): one order
    gc.collect()
    refs = [weakref.ref(x), weakref.ref(out)]
    del x, y, out, got
    seen.clear()
    gc.collect()
    assert [r for r in refs if r() is not None] == []  # what a hit keeps for its grid holds no tensor


def test_a_repeated_library_call_is_tried_first_and_a_misaligned_one_gets_its_own_launch(db):
    library.clear_cache()
    for _ in range(3):
        x = torch.randn(8, 32)
        torch.testing.assert_close(autotuner.softmax(x), torch.softmax(x, -1))
    state = library._LAST["softmax"]
    assert state[0] is not None and state[0] is state[1]
    buf = torch.randn(8 * 32 + 4)
    shifted = buf[1:257].view(8, 32)  # the same shape, strides and dtype, 4 bytes off 16-byte alignment
    for _ in range(2):
        torch.testing.assert_close(autotuner.softmax(shifted), torch.softmax(shifted, -1))
    assert len(library._HITS["softmax"]) == 2  # its own kept launch, not the aligned one's
    hits = library._HITS["softmax"]
    for rows in (4, 8) * 3:  # two keys in turn: each learns that the other follows it
        x = torch.randn(rows, 32)
        torch.testing.assert_close(autotuner.softmax(x), torch.softmax(x, -1))
    for rows in (4, 8) * 3:  # then each is tried after the other, and its check passes
        x = torch.randn(rows, 32)
        assert state[0] is hits[_library_key(x)]
        torch.testing.assert_close(autotuner.softmax(x), torch.softmax(x, -1))
        assert state[1] is hits[_library_key(x)]


def _library_key(x: torch.Tensor) -> tuple:
    """The key autotuner.softmax keeps x's launch under (its signature and alignment)."""
    (found,) = [k for k, hit in library._HITS["softmax"].items() if hit.same((x,))]
    return found


def test_library_calls_keep_no_tensor(db):
    refs = []
    for _ in range(4):
        x = torch.randn(8, 32)
        y = autotuner.softmax(x)
        torch.testing.assert_close(y, torch.softmax(x, -1))
        refs += [weakref.ref(x), weakref.ref(y)]
        del x, y
    gc.collect()
    assert [r for r in refs if r() is not None] == []


def test_a_launch_returns_what_triton_returns(db):
    axpy.cache.clear()
    x, y = torch.randn(64), torch.randn(64)
    ours = [axpy[grid](x, y, torch.empty(64), 64, 1.0), axpy[grid](x_ptr=x, y_ptr=y, out_ptr=torch.empty(64), n=64,
                                                                        alpha=1.0)]
    theirs = _axpy[(2,)](x, y, torch.empty(64), 64, 1.0, BLOCK=32)
    assert all(type(r) is type(theirs) for r in ours)


def _keys_64_8_64(kernel):
    seen = []
    for n in (64, 8, 64):
        x = torch.randn(n)
        kernel[grid](x, x, torch.empty(n), n, 1.0)
        seen.append(kernel.best_config)
    return seen


def test_best_config_is_the_last_launchs_as_under_triton(switch):
    set_resolver(Resolver(Settings(db_url=switch, on_miss="default")))  # each key launches its pruned list's first
    axpy_pruned.cache.clear()
    for kernel, tr in ((axpy_pruned, axpy_pruned), (axpy_triton, axpy_triton)):
        seen = _keys_64_8_64(kernel)
        key64 = (64, "torch.float32", "torch.float32", "torch.float32")
        assert seen[0] is seen[2] is tr.cache[key64], kernel
        assert seen[1] is not seen[0] and seen[1].kwargs["BLOCK"] == 32 and seen[0].kwargs["BLOCK"] == 64
        assert all(any(s is c for c in CONFIGS) for s in seen)  # the list's own objects, as Triton's cache holds


def test_triton_itself_agrees_on_best_config():
    """The same launches under Triton's own autotuner: what the test above holds autotuner to."""
    axpy_triton.cache.clear()
    seen = _keys_64_8_64(axpy_triton)
    assert seen[0] is seen[2] and seen[1].kwargs["BLOCK"] == 32 and seen[0].kwargs["BLOCK"] == 64
    axpy_triton.cache.clear()


def _recording_pruners(calls):
    def early(configs, nargs, **kwargs):
        calls.append(("early", tuple(nargs), tuple(kwargs)))
        return configs

    def perf_model(**kwargs):
        calls.append(("perf", tuple(sorted(kwargs))))
        return -kwargs["BLOCK"]

    return {"early_config_prune": early, "perf_model": perf_model, "top_k": 2}


def test_pruning_receives_exactly_what_triton_passes_for_a_keyword_launch(db):
    ours_calls, theirs_calls = [], []
    ours = autotuner.autotune(configs=CONFIGS, key=["n"], name="contract:pruned", on_miss="default",
                              prune_configs_by=_recording_pruners(ours_calls))(_axpy)
    theirs = triton.autotune(configs=CONFIGS, key=["n"], do_bench=wall_bench,
                             prune_configs_by=_recording_pruners(theirs_calls))(_axpy)
    for kernel in (ours, theirs):
        x = torch.randn(100)
        out = torch.empty(100)
        kernel[grid](x, y_ptr=x, out_ptr=out, n=100, alpha=2.0)
        torch.testing.assert_close(out, 3 * x)
    assert theirs_calls and set(ours_calls) == set(theirs_calls)
    assert ("early", ("x_ptr",), ("grid", "warmup", "y_ptr", "out_ptr", "n", "alpha")) in ours_calls


@pytest.mark.skipif(not hasattr(getattr(triton, "knobs", None), "autotuning")
                    or not hasattr(triton.knobs.autotuning, "listener"),
                    reason="this Triton has no autotuning listener (Triton 3.9 has)")
def test_the_autotuning_listener_is_told_as_triton_tells_it(db):
    heard = []
    kernel = autotuner.autotune(configs=CONFIGS, key=["n"], name="contract:listened", on_miss="tune")(_axpy)
    old = triton.knobs.autotuning.listener
    triton.knobs.autotuning.listener = lambda **kw: heard.append(kw)
    try:
        x = torch.randn(64)
        kernel[grid](x, x, torch.empty(64), 64, 1.0)
        kernel[grid](x, x, torch.empty(64), 64, 1.0)  # a hit: not told
        kernel.cache.clear()
        kernel[grid](x, x, torch.empty(64), 64, 1.0)  # from the database: told as Triton's disk cache hit
    finally:
        triton.knobs.autotuning.listener = old
    assert len(heard) == 2
    tuned, stored = heard
    assert tuned["cache_hit"] is False and tuned["duration"] > 0 and tuned["key"] == stored["key"]
    assert tuned["best_config"] is stored["best_config"] is kernel.best_config
    assert set(tuned["configs_timings"]) == set(CONFIGS) and kernel.bench_time == tuned["duration"]
    assert stored["cache_hit"] is True and stored["duration"] is None


def test_wrap_triton_and_triton_op_take_a_decorated_kernel(db):
    from torch.library import triton_op, wrap_triton

    axpy.cache.clear()
    assert isinstance(axpy, Autotuner)
    x, y = torch.randn(100), torch.randn(100)
    out = torch.empty(100)
    wrap_triton(axpy)[grid](x, y, out, 100, 2.0)
    torch.testing.assert_close(out, 2 * x + y)

    @triton_op("autotuner_test::axpy", mutates_args={})
    def op(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
        out = torch.empty_like(x)
        wrap_triton(axpy)[grid](x, y, out, x.numel(), alpha)
        return out

    torch.testing.assert_close(torch.ops.autotuner_test.axpy(x, y, 3.0), 3 * x + y)


def _trial_count(url):
    with session_scope(Store(url).engine) as s:
        return int(s.scalar(select(func.count()).select_from(Trial).join(TuningRun)
                            .where(TuningRun.op == "contract:fit")) or 0)


def test_a_config_no_longer_listed_is_never_launched_and_one_added_is_the_only_one_timed(db):
    def version(configs):
        return autotuner.autotune(configs=configs, key=["n"], name="contract:fit", on_miss="tune")(_axpy)

    x = torch.randn(256)
    first = version(CONFIGS)
    first[grid](x, x, torch.empty(256), 256, 1.0)
    winner = first.best_config
    assert first.sources[next(iter(first.cache))].startswith("tuned here") and _trial_count(db) == 3

    # the winner removed from the list: re-decided among the stored timings of the rest, nothing timed
    rest = [c for c in CONFIGS if c is not winner]
    fewer = version(rest)
    out = torch.empty(256)
    fewer[grid](x, x, out, 256, 1.0)
    torch.testing.assert_close(out, 2 * x)
    source = fewer.sources[next(iter(fewer.cache))]
    assert any(fewer.best_config is c for c in rest) and "re-decided" in source, source
    assert _trial_count(db) == 3
    with session_scope(Store(db).engine) as s:  # the fastest of the rest, by their stored times (a re-time first)
        rows = s.execute(select(Trial.config, Trial.median_ms, Trial.retimed_ms).join(TuningRun)
                         .where(TuningRun.op == "contract:fit")).all()
    fastest = min((retimed or ms, config) for config, ms, retimed in rows if config != config_dict(winner))[1]
    assert config_dict(fewer.best_config) == fastest

    # a config added: only it is timed
    more = version([*CONFIGS, triton.Config({"BLOCK": 256}, num_warps=4)])
    more[grid](x, x, torch.empty(256), 256, 1.0)
    assert _trial_count(db) == 4
    assert first.op.kernel_hash == fewer.op.kernel_hash == more.op.kernel_hash


KERNEL_MODULE = '''
import triton
import triton.language as tl
import autotuner

SCALE: tl.constexpr = {scale}


@triton.jit
def helper(x):
    return x * {helper}


@autotuner.autotune(configs=[
    triton.Config({{"BLOCK": 32}}),{extra}
], key=["n"])
@triton.jit
def kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, helper(tl.load(x_ptr + offs, mask=offs < n)) * SCALE, mask=offs < n)
'''


def _identity(tmp_path, name, **values):
    fields = {"scale": 2, "helper": 3, "extra": "", **values}
    path = tmp_path / f"{name}.py"
    path.write_text(KERNEL_MODULE.format(**fields))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        assert kernel_identity(module.kernel.fn) == kernel_identity(module.kernel.base_fn)
        return module.kernel.op.kernel_hash
    finally:
        del sys.modules[name]


def test_a_kernels_identity_is_its_code_not_its_decorators_arguments(tmp_path):
    base = _identity(tmp_path, "identity_base")
    assert _identity(tmp_path, "identity_more", extra='\n    triton.Config({"BLOCK": 64}),') == base
    assert _identity(tmp_path, "identity_helper", helper=4) != base  # a JIT function it calls
    assert _identity(tmp_path, "identity_scale", scale=5) != base  # a constexpr global it reads


def test_a_parse_another_thread_spoils_is_tried_again(tmp_path, monkeypatch):
    """CPython 3.11 shares one AST recursion counter between threads: a parse at the same moment as another
    thread's fails with a SystemError once (python/cpython#106905, seen in CI). The identity is taken again."""
    from search_spaces import kernel_identity as identity_module

    real_parse, calls = identity_module.ast.parse, []

    def spoiled_once(src, *args, **kwargs):
        calls.append(src)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=147, after=23)")
        return real_parse(src, *args, **kwargs)

    base = _identity(tmp_path, "identity_plain")
    monkeypatch.setattr(identity_module.ast, "parse", spoiled_once)
    assert _identity(tmp_path, "identity_spoiled") == base
    assert len(calls) >= 3  # the spoiled try, its second try, and the helper it calls


def test_an_unknown_autotuner_variable_is_named_with_the_closest_setting(caplog):
    with caplog.at_level("WARNING", logger="autotuner.base.settings"):
        assert unknown_variables({"AUTOTUNER_DB": "sqlite:///x.db", "AUTOTUNER_ON_MIS": "nearest",
                                  "AUTOTUNER_DB_URL": "sqlite:///y.db", "AUTOTUNER_TEST_PG_URL": "x"}) == \
            ["AUTOTUNER_DB", "AUTOTUNER_ON_MIS"]
    lines = [r.getMessage() for r in caplog.records]
    assert "autotuner: AUTOTUNER_DB is not a setting and is ignored; did you mean AUTOTUNER_DB_URL?" in lines
    assert any("AUTOTUNER_ON_MIS" in line and "AUTOTUNER_ON_MISS" in line for line in lines)


def test_the_switch_leaves_a_decorated_kernel_alone(switch):
    """A decorated kernel is an Autotuner to torch, but never one the switch covers again."""
    covered._register(axpy)
    assert "_autotuner_name" not in axpy.__dict__ and axpy not in set(covered._seen)
    assert type(axpy).run is autotuner.decorator.Autotuned.run


SCRIPT = '''
import sys

import triton
import triton.language as tl

from search_spaces.kernel_identity import kernel_identity

STEP: tl.constexpr = 1


@triton.jit
def kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    for i in range(2):
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + STEP * i, mask=offs < n)


if __name__ == "__main__":
    for n in map(int, sys.argv[1:]):  # module globals named like the kernel's parameter and locals
        offs, i, BLOCK = n, n + 1, n * 2
    print(kernel_identity(kernel))
'''


def test_globals_named_like_a_kernels_parameters_or_locals_are_not_its_identity(tmp_path):
    import subprocess

    (tmp_path / "mykern.py").write_text(SCRIPT)
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{__import__('os').getcwd()}"}

    def run(*argv: str) -> str:
        done = subprocess.run([sys.executable, str(tmp_path / "mykern.py"), *argv], capture_output=True,
                              text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    as_script = {run("1024"), run("512", "1024"), run("4096", "1000"), run("1000", "4096")}
    imported = subprocess.run([sys.executable, "-c", "import mykern; print(mykern.kernel_identity(mykern.kernel))"],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert imported.returncode == 0, imported.stderr
    assert as_script == {imported.stdout.strip()}  # argument order, and a script against an import
    # a global the kernel reads as a global still counts
    (tmp_path / "mykern.py").write_text(SCRIPT.replace("STEP: tl.constexpr = 1", "STEP: tl.constexpr = 2"))
    assert run("1024") not in as_script


def test_the_decorator_takes_what_triton_autotune_takes(db):
    """Every Config field and autotune argument Triton's own tests use: ir_override (as a Config argument and as a
    kwargs entry, which Triton's launch takes as a compile option), the deprecated warmup/rep/use_cuda_graph with
    Triton's DeprecationWarning, an early_config_prune leaving nothing raising Triton's AutotunerError, and hooks
    called with what Triton hands them (grid, warmup and every launch option)."""
    import warnings

    from triton.runtime.errors import AutotunerError

    given = autotuner.autotune(configs=[triton.Config({"BLOCK": 32}, ir_override="/tmp/never.ttgir")], key=["n"],
                               name="contract:ir_given")(_axpy)
    in_kwargs = autotuner.autotune(configs=[triton.Config({"BLOCK": 32, "ir_override": "/tmp/never.ttgir"})],
                                   key=["n"], name="contract:ir_kwargs")(_axpy)
    assert config_dict(given.configs[0])["ir_override"] == config_dict(in_kwargs.configs[0])["ir_override"]
    for deprecated in ({"warmup": 5}, {"rep": 10}, {"use_cuda_graph": True}):
        with pytest.warns(DeprecationWarning, match="deprecated"):
            autotuner.autotune(configs=CONFIGS, key=["n"], name="contract:old", **deprecated)(_axpy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autotuner.autotune(configs=CONFIGS, key=["n"], name="contract:new")(_axpy)

    def nothing(configs, nargs, **kwargs):
        return []

    pruned = autotuner.autotune(configs=CONFIGS, key=["n"], name="contract:none", on_miss="tune",
                                prune_configs_by={"early_config_prune": nothing})(_axpy)
    x = torch.randn(64)
    with pytest.raises(AutotunerError, match="No valid autotuner configs after pruning"):
        pruned[grid](x, x, torch.empty(64), 64, 1.0)

    seen: dict[str, set[str]] = {"autotuner": set(), "triton": set()}

    def hooked(side):
        def hook(nargs):
            seen[side] |= {k for k, v in nargs.items() if not isinstance(v, torch.Tensor)}
        return [triton.Config({"BLOCK": 32}, pre_hook=hook), triton.Config({"BLOCK": 64}, pre_hook=hook)]

    ours = autotuner.autotune(configs=hooked("autotuner"), key=["n"], name="contract:hooks", on_miss="tune",
                              do_bench=wall_bench)(_axpy)
    theirs = triton.autotune(configs=hooked("triton"), key=["n"], do_bench=wall_bench)(_axpy)
    for kernel in (ours, theirs, ours):  # a tuning launch, and a launch of a config tuned before
        kernel[grid](x, x, torch.empty(64), 64, 1.0)
    assert seen["autotuner"] == seen["triton"] and {"grid", "warmup", "num_ctas"} <= seen["triton"], seen


STATIC_PROBE = """
import json
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels import _direct, gelu
src = ASTSource(fn=gelu.gelu_kernel, signature={"x_ptr": "*fp16", "y_ptr": "*fp16", "n": "i32",
                "BLOCK_SIZE": "constexpr", "TANH": "constexpr"}, constexprs={"BLOCK_SIZE": 1024, "TANH": True})
compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
kernel = _direct.static_kernel(compiled)
out = {"keep": kernel["keep"], "name": kernel["name"]}
for name, taken in (("all", [0, 1, 2]), ("tensors", [0, 1])):
    warps, shared, types, kept, slots = _direct.static_values(kernel, ["x", "y", 4096, 1024, True], taken)
    out[name] = {"types": types, "kept": kept, "slots": slots, "warps": warps}
out["short"] = _direct.static_values(kernel, ["x", "y"], [0, 1])
print(json.dumps(out))
"""


def test_the_static_launch_passes_the_cubin_only_its_arguments_with_the_calls_in_their_places():
    """torch's static launcher takes the arguments the cubin takes (no constexprs), typed, plus Triton's scratch
    arguments: a real kernel compiled for a Hopper target (no GPU needed to compile) maps the bound values so, each
    call's own arguments into their slots and a value kept from the first call in its own."""
    import json
    import os
    import subprocess

    env = {**os.environ, "TRITON_INTERPRET": "0"}  # a compile for a GPU target, not the interpreter
    out = subprocess.run([sys.executable, "-c", STATIC_PROBE], capture_output=True, text=True, env=env, timeout=300,
                         cwd=str(Path(__file__).resolve().parents[2]))
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    scratch = len(found["all"]["types"]) - 3
    assert found["all"]["types"].startswith("OOi") and set(found["all"]["types"][3:]) <= {"O"}
    assert found["all"]["kept"] == [None] * (3 + scratch)  # the call's own arguments are never kept
    assert found["all"]["slots"] == [[0, 0], [1, 1], [2, 2]]
    assert found["tensors"]["kept"] == [None, None, 4096] + [None] * scratch  # n kept from the first call
    assert found["tensors"]["slots"] == [[0, 0], [1, 1]]
    assert found["all"]["warps"] == 4 and found["keep"] == [0, 1, 2] and found["name"] == "gelu_kernel"
    assert found["short"] is None  # bound values that do not cover the cubin's arguments: Triton's launcher


@triton.jit
def _scaled(x_ptr, other, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask), mask=mask)


@pytest.mark.parametrize("kept", [False, True], ids=["every-argument-the-calls", "one-kept-between-them"])
def test_a_bound_launcher_places_each_calls_arguments_and_steps_aside_for_hooks(kept, monkeypatch):
    """After its first call a launcher launches through its direct call (`Launcher.go`), never Triton's binding:
    each call's tensors and numbers in their places, with or without a value kept from the first call between them
    (None: a constexpr to Triton). A launch hook installed (a profiler's), or direct launches switched off, sends
    the call back through `Launcher.launch`."""
    from triton import knobs

    from kernels import _direct

    through = []
    original = _direct.Launcher.launch

    def counted(self, grid, args):
        through.append(grid)
        return original(self, grid, args)

    monkeypatch.setattr(_direct.Launcher, "launch", counted)
    launcher = _direct.Launcher(_scaled, (2,), {"BLOCK": 32})
    for i in range(4):
        x, out = torch.randn(64), torch.full((64,), float("nan"))
        launcher(x, None if kept else x, out, 64, 0.5 + i)
        torch.testing.assert_close(out, (0.5 + i) * x)
    assert through == [(2,)]  # the first call alone went through Triton
    assert launcher.direct and launcher.go != launcher._at_grid
    hook_calls = []
    knobs.runtime.launch_enter_hook.add(hook_calls.append)
    try:
        launcher(x, None if kept else x, torch.empty(64), 64, 1.0)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook_calls.append)
    monkeypatch.setattr(_direct, "DIRECT", False)
    launcher(x, None if kept else x, torch.empty(64), 64, 1.0)
    assert through == [(2,)] * 3


@pytest.mark.parametrize("kept", [False, True], ids=["every-argument-the-calls", "one-kept-between-them"])
def test_a_bound_launcher_gives_torchs_launcher_addresses(kept, monkeypatch):
    """A bound launcher, through its direct call (`go`: a kernel module's) or `Launcher.launch` (a decorated kernel's
    hit), hands torch's static launcher each call's tensors as their addresses and None as 0, so the launcher asks
    the driver nothing per pointer; numbers and values kept from the first call go as they are. The launcher is a
    recording stand-in here: the interpreter binds the arguments as a GPU would."""
    from kernels import _direct

    launcher = _direct.Launcher(_scaled, (2,), {"BLOCK": 32})
    x = torch.randn(64)
    launcher(x, None if kept else x, torch.empty(64), 64, 0.5)
    assert launcher.direct
    kernel = {"keep": [0, 1, 2, 3, 4], "types": "OOOif", "scratch": 0, "warps": 4, "shared": 0}
    found = _direct.static_values(kernel, launcher._values, [i for i, _ in launcher._slots])
    assert found is not None
    calls: list[tuple[Any, ...]] = []

    def record(function, g0, g1, g2, warps, shared, types, packed, stream):
        calls.append((function, (g0, g1, g2), types, packed))

    launcher._static = (record, "function", *found, _direct.addressed(found[2], found[4]))
    launcher._device = 0
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)
    go = _direct._direct_call(launcher, 5)
    other, out = torch.randn(64), torch.empty(64)
    expected = (x.data_ptr(), None if kept else other.data_ptr(), out.data_ptr(), 64, 1.5)
    go((x, None if kept else other, out, 64, 1.5))
    assert calls[-1] == ("function", (2, 1, 1), "OOOif", expected)
    launcher.launch((3,), (x, None if kept else other, out, 64, 1.5))
    assert calls[-1] == ("function", (3, 1, 1), "OOOif", expected)
    if not kept:
        go((x, None, out, 64, 1.5))  # a None in a tensor's place: address 0
        assert calls[-1][3] == (x.data_ptr(), 0, out.data_ptr(), 64, 1.5)


def test_a_decorated_hit_is_keyed_by_its_tensors_devices():
    """A decorated kernel's call signature holds each tensor's device: a tensor on another device is a new call
    signature (Triton's launch checks it), never a hit whose launcher would hand its address to the GPU."""
    from kernels._direct import call_signature

    x = torch.randn(4)
    assert call_signature(x) != call_signature(x.to("meta"))
    assert call_signature(x) == call_signature(torch.randn(4))
