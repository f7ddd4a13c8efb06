"""GPU tier, two GPUs of one type: a decorated kernel's first tuning on the GPUs AUTOTUNER_GPUS allows
(autotuner.decorator.lanes). The second GPU measures configs on its own copy of the arguments, on its own device,
with hooks of its own; every config checks out against the reference, and the outputs equal Triton's own
autotuner's."""

from __future__ import annotations

import threading

import pytest
import torch
import triton
import triton.language as tl
from sqlalchemy import select

import autotuner
from autotuner.base.settings import Settings
from autotuner.decorator.engine_view import EngineView
from autotuner.launch.lookup import Resolver, set_resolver
from autotuner.store.database import Store
from db.engine import session_scope
from db.models import Trial


def _two_alike() -> bool:
    return torch.cuda.device_count() >= 2 and torch.cuda.get_device_name(0) == torch.cuda.get_device_name(1)


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or not _two_alike(),
                       reason="GPU tier: needs two CUDA devices of one type"),
]

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (128, 256, 512, 1024) for w in (2, 4, 8)]


@triton.jit
def _sum_into(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


ours = triton.autotune(CONFIGS, key=["n"], reset_to_zero=["out_ptr"])(_sum_into)
theirs = triton.autotune(CONFIGS, key=["n"], reset_to_zero=["out_ptr"])(_sum_into)


@pytest.fixture
def on_two(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'lanes.db'}"
    set_resolver(Resolver(Settings(db_url=url, gpus="0,1")))
    launches: list[tuple[str, int, int]] = []
    call = EngineView.call

    def watched(self, named, *args, **kwargs):
        launches.append((threading.current_thread().name, torch.cuda.current_device(), named["x_ptr"].device.index))
        return call(self, named, *args, **kwargs)

    monkeypatch.setattr(EngineView, "call", watched)
    autotuner.install()
    yield url, launches
    autotuner.uninstall()
    set_resolver(None)


def test_a_decorated_kernel_is_tuned_on_both_gpus(on_two):
    url, launches = on_two
    n = 3_000_001
    x = torch.randn(n, device="cuda:0")
    out = torch.zeros(1, device="cuda:0")
    ours[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    (source,) = ours.__dict__["_autotuner_adopted"].sources.values()
    assert "on 2 GPUs" in source, source
    with session_scope(Store(url).engine) as s:
        statuses = list(s.scalars(select(Trial.status)))
    assert len(statuses) == len(CONFIGS) and set(statuses) == {"ok"}
    # the second lane launched on cuda:1, on arguments there; the first on cuda:0
    assert {(cur, dev) for name, cur, dev in launches if name == "lane-1"} == {(1, 1)}
    assert {(cur, dev) for name, cur, dev in launches if name != "lane-1"} == {(0, 0)}
    autotuner.uninstall()
    expected = torch.zeros(1, device="cuda:0")
    theirs[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, expected, n)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-2)
    torch.testing.assert_close(out, x.sum().reshape(1), rtol=1e-4, atol=1e-2)
