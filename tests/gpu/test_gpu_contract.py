"""GPU tier: what a training loop relies on (tests/integration/test_triton_contract.py holds the same in the interpreter). Memory
allocated does not grow over many launches on new tensors, keyword arguments included, under the decorator, the
switch and the library calls; a launch returns the compiled kernel as Triton's does; torch's `wrap_triton` and
`torch.compile` take a decorated kernel."""

from __future__ import annotations

import gc

import pytest
import torch
import triton
import triton.language as tl

import autotuner
from autotuner.base.settings import Settings
from autotuner.launch.lookup import Resolver, set_resolver

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: no CUDA device here"),
]

CONFIGS = [triton.Config({"BLOCK": 256}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)]
MIB = 2**20


@triton.jit
def _scale(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)


scale = autotuner.autotune(configs=CONFIGS, key=["n"], name="gpu_contract:scale")(_scale)
scale_triton = triton.autotune(configs=CONFIGS, key=["n"])(_scale)


def grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


@pytest.fixture
def db(tmp_path):
    set_resolver(Resolver(Settings(db_url=f"sqlite:///{tmp_path / 'g.db'}")))
    yield
    set_resolver(None)


def _growth(launch, calls=300):
    """Memory allocated after `calls` launches on new 8 MiB tensors, less after the first 10 (MiB)."""
    n = 2 * MIB  # 2M float32: 8 MiB
    after = {}
    for i in range(calls):
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        launch(x, y, n, i % 2 == 0)
        if i == 9 or i == calls - 1:
            del x, y
            gc.collect()
            torch.cuda.synchronize()
            after[i] = torch.cuda.memory_allocated()
    return (after[calls - 1] - after[9]) / MIB


def _by_keyword_or_not(kernel):
    def launch(x, y, n, keywords):
        if keywords:
            return kernel[grid](x_ptr=x, y_ptr=y, n=n, alpha=2.0)
        return kernel[grid](x, y, n, 2.0)

    return launch


def test_a_decorated_kernel_holds_no_memory_over_many_launches(db):
    assert abs(_growth(_by_keyword_or_not(scale))) <= 1.0
    launchers = [hit.launcher for hit in scale._hits.values()]  # one per call signature: by keyword, positional
    assert len(launchers) == 2 and all(launcher.direct for launcher in launchers)


def test_the_switch_holds_no_memory_over_many_launches(db):
    autotuner.install()
    try:
        assert abs(_growth(_by_keyword_or_not(scale_triton))) <= 1.0
    finally:
        autotuner.uninstall()


def test_library_calls_hold_no_memory_over_many_calls(db):
    def launch(x, y, n, _):
        autotuner.softmax(x.view(2048, 1024))

    assert abs(_growth(launch)) <= 1.0


def test_a_launch_returns_the_compiled_kernel_as_triton_does(db):
    x = torch.randn(4096, device="cuda")
    y = torch.empty_like(x)
    theirs = scale_triton[grid](x_ptr=x, y_ptr=y, n=4096, alpha=1.0)
    for _ in range(3):  # the first (the miss), then direct launches; by keyword and not
        ours = [scale[grid](x_ptr=x, y_ptr=y, n=4096, alpha=1.0), scale[grid](x, y, 4096, 1.0)]
        assert all(type(r) is type(theirs) and r is not None for r in ours)


def test_wrap_triton_and_torch_compile_take_a_decorated_kernel(db):
    from torch.library import wrap_triton

    x = torch.randn(4096, device="cuda")

    def f(x):
        y = torch.empty_like(x)
        wrap_triton(scale)[grid](x, y, x.numel(), 3.0)
        return y

    torch.testing.assert_close(f(x), 3 * x)

    def g(x):
        y = torch.empty_like(x)
        scale[grid](x, y, x.numel(), 3.0)
        return y + 1

    torch.testing.assert_close(torch.compile(g, fullgraph=True)(x), 3 * x + 1)
