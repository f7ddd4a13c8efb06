"""GPU tier: autotuner.install() on kernels written for Triton alone. Their configs are compiled ahead on threads
(Triton's AsyncCompileMode) before any is timed, a config's pre_hook applied first; the outputs equal Triton's own
autotuner's, its @triton.heuristics beneath the decorator sees each config."""

from __future__ import annotations

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

HOOKED: list[int] = []


def _mark(nargs):
    HOOKED.append(nargs["BLOCK"])


CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w, pre_hook=_mark if b == 256 else None)
           for b in (128, 256, 512, 1024) for w in (4, 8)]


@triton.jit
def _axpy_body(x_ptr, y_ptr, out_ptr, n, a, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        x, y = tl.load(x_ptr + offs), tl.load(y_ptr + offs)
        tl.store(out_ptr + offs, a * x + y)
    else:
        mask = offs < n
        x, y = tl.load(x_ptr + offs, mask=mask), tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, a * x + y, mask=mask)


def _even(a):
    return a["n"] % a["BLOCK"] == 0


axpy = triton.autotune(CONFIGS, key=["n"])(triton.heuristics({"EVEN": _even})(_axpy_body))
# the same kernel, left to Triton's own autotuner (uninstalled before it is launched)
axpy_triton = triton.autotune(CONFIGS, key=["n"])(triton.heuristics({"EVEN": _even})(_axpy_body))


@pytest.fixture
def covered(tmp_path):
    set_resolver(Resolver(Settings(db_url=f"sqlite:///{tmp_path / 'g.db'}")))
    autotuner.install()
    yield
    autotuner.uninstall()
    set_resolver(None)


def test_configs_compile_ahead_and_the_outputs_equal_tritons(covered):
    n = 1_000_003
    x, y = (torch.randn(n, device="cuda") for _ in range(2))
    out = torch.empty_like(x)
    HOOKED.clear()
    axpy[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, out, n, 3.0)
    adopted = axpy.__dict__["_autotuner_adopted"]
    (source,) = adopted.sources.values()
    assert source.startswith("tuned here") and f"{len(CONFIGS)} compiled ahead" in source, source
    assert HOOKED and set(HOOKED) == {256}  # the hooked configs' pre_hook ran, for compiling and timing
    assert any(axpy.best_config is c for c in CONFIGS)
    autotuner.uninstall()
    expected = torch.empty_like(x)
    axpy_triton[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, expected, n, 3.0)
    assert torch.equal(out, expected)
    torch.testing.assert_close(out, 3.0 * x + y)
