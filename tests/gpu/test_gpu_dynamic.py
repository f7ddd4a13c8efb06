"""GPU tier: shapes a workload meets. A sweep tuned and cross-timed on the GPU (CUDA-event timings in its cross
timings, a bucket answer reporting its measured regret), and a decorated kernel's new key launched under the
nearest policy with the nearest key's winner, correct, with nothing tuned on the launching thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import autotuner
from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.base.settings import Settings
from autotuner.decorator.configs import config_dict
from autotuner.launch.lookup import Resolver, resolver, set_resolver
from autotuner.launch.serving import answer_config
from autotuner.store.database import Store
from autotuner.store.resolution import Source

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: no CUDA device here"),
]
ROOT = Path(__file__).resolve().parents[2]


def test_a_sweep_on_the_gpu_cross_times_its_winners_and_serves_between_its_points(tmp_path):
    db = f"sqlite:///{tmp_path / 'sweep.db'}"
    out = subprocess.run([sys.executable, "-m", "autotuner", "tune", "softmax", "--shape", "1024-4096:pow2x2048",
                          "--trials", "8", "--db", db, "--json", "-q", "--refine-points", "0"],  # its points only
                         capture_output=True, text=True, cwd=ROOT,
                         timeout=900, env={**os.environ})
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert [p["problem"] for p in summary["points"]] == [f"{r}x2048:float16" for r in (1024, 2048, 4096)]
    cells = summary["cross_timings"]
    assert len(cells) == 7 and all(c["own_ms"] and c["own_ms"] > 0 for c in cells)
    op, device = get_op("softmax"), current_device()
    answer = answer_config(Store(db, create=False), op, op.parse_problem("1500x2048"), device)
    # between the points of a sweep that holds cross timings its rule serves, not the bucket (2048): the winner of
    # 1024 or 2048 expected to lose less there, or the sweep's model's pick, with the regret it was measured at
    points = ("1024x2048:float16", "2048x2048:float16")
    assert answer.source in (Source.NEAREST, Source.PREDICTED) and answer.expected_regret is not None
    if answer.source == Source.NEAREST:
        assert answer.from_problem in points and answer.regret_measured_on[0] in points
        assert answer.regret_measured_on[0] != answer.from_problem
    x = torch.randn(1500, 2048, device="cuda", dtype=torch.float16)
    set_resolver(Resolver(Settings(db_url=db, on_miss="nearest")))
    try:
        autotuner.clear_cache()
        torch.testing.assert_close(autotuner.softmax(x), torch.softmax(x.float(), -1).half(), atol=2e-3, rtol=0)
    finally:
        set_resolver(None)
        autotuner.clear_cache()


@triton.jit
def _scale(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


def test_a_new_key_under_the_nearest_policy_launches_the_nearest_winner_at_once(tmp_path):
    db = f"sqlite:///{tmp_path / 'near.db'}"
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((128, 1), (1024, 4), (4096, 8))]
    kernel = autotuner.autotune(configs=configs, key=["n"], name="tests.gpu:scale_near")(_scale)
    set_resolver(Resolver(Settings(db_url=db, on_miss="tune")))
    try:
        x = torch.randn(1 << 20, device="cuda")
        y = torch.empty_like(x)
        kernel[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, x.numel(), 3.0)  # tuned here: 1M
        tuned = config_dict(kernel.cache[next(iter(kernel.cache))])
        set_resolver(Resolver(Settings(db_url=db, on_miss="nearest")))
        n = 900_000
        kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n, 2.0)
        torch.testing.assert_close(y[:n], 2 * x[:n])
        key = (n, "torch.float32", "torch.float32")
        assert kernel.sources[key].startswith("nearest (n=1048576:float32's winner)")
        assert config_dict(kernel.cache[key]) == tuned
        resolver()._join_background()
        store = Store(db, create=False)
        assert len(store.runs(op="tests.gpu:scale_near")) == 1  # only the first key's tuning
        jobs, _ = store.jobs_page(state="queued", limit=5, offset=0)
        assert [j.shape for j in jobs] == ["n=900000"]
    finally:
        set_resolver(None)
