"""The spaces' shared-memory bounds against what Triton gives the configs, compiled (not run) for GPUs this machine
need not have: a Triton upgrade that allocates more than a bound says is caught here, before a GPU compiles a
config only to refuse it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from autotuner.base.registry import get_op
from tests.support.devices import A100, H100

ROOT = Path(__file__).resolve().parents[2]


def _largest(configs: Iterable[dict[str, Any]], bound: Callable[[dict[str, Any]], int],
             kind: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """Of each kind of config, the one with the largest bound: the nearest to the limit."""
    best: dict[Any, dict[str, Any]] = {}
    for c in configs:
        k = kind(c)
        if k not in best or bound(c) > bound(best[k]):
            best[k] = c
    return list(best.values())


def _jobs() -> list[dict[str, Any]]:
    from search_spaces.attention import smem_bytes as attention_bytes
    from search_spaces.matmul import smem_bytes as matmul_bytes

    jobs = []
    matmul = get_op("matmul")
    # 4096^3: every kind of program but split-K's, which its tiles leave out; 1024x1024x16384: those
    for device, dtypes, shape in ((H100, ("float16", "float32"), "4096x4096x4096"), (A100, ("float16",), "4096x4096x4096"),
                                  (H100, ("float16",), "1024x1024x16384")):
        for dtype in dtypes:
            p = matmul.parse_problem(shape, dtype)
            valid = [c for c in matmul.space.enumerate(p, device).valid if p.K < 16384 or c["SPLIT_K"] > 1]
            for c in _largest(valid, lambda c, p=p, d=device: matmul_bytes(c, p, d.capability),
                              lambda c: (c["TMA"], c["SUBTILE"], c["FLATTEN"], c["num_warps"], c["BLOCK_M"],
                                         c["SPLIT_K"] > 1)):
                jobs.append({"op": "matmul", "config": c, "dtype": dtype, "capability": device.capability,
                             "bound": matmul_bytes(c, p, device.capability), "limit": device.smem_per_block})
    attention = get_op("attention")
    for causal in (False, True):
        p = attention.parse_problem("4x32x2048x128", "float16", causal=causal)
        for c in _largest(attention.space.enumerate(p, H100).valid, lambda c, p=p: attention_bytes(c, p),
                          lambda c: (c["TMA"], c["num_warps"])):
            jobs.append({"op": "attention", "config": c, "dtype": "float16", "head_dim": 128, "causal": causal,
                         "capability": (9, 0), "bound": attention_bytes(c, p), "limit": H100.smem_per_block})
    return jobs


@pytest.mark.timeout(900)
def test_the_shared_memory_bounds_hold_for_the_configs_nearest_the_limit(tmp_path):
    jobs = _jobs()
    # and the configs the H100s refused (the only failures of the whole-space landscapes): over the limit compiled,
    # as over the bound
    over = {"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1, "TMA": 2, "SUBTILE": 1,
            "TAIL_SPLIT": 0, "FLATTEN": 1, "DEVICE_DESC": 0, "num_warps": 8, "num_stages": 5}
    jobs.append({"op": "matmul", "config": over, "dtype": "float16", "capability": (9, 0), "refused": True})
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path / "triton"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # in two processes, half the configs each (the suite's other process is often waiting on a subprocess)
    errors = [tmp_path / f"compile{i}.err" for i in range(2)]
    compilers = []
    for i, err in enumerate(errors):
        with err.open("w") as stderr:  # (the process holds its own copy)
            compilers.append(subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "compile_for_target.py")], env=env,
                                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                              text=True))
        assert compilers[i].stdin is not None  # (each half written at once: a pipe holds its few kilobytes)
        compilers[i].stdin.write("".join(json.dumps(j) + "\n" for j in jobs[i::2]))
        compilers[i].stdin.close()
    results = []
    for compiler, err in zip(compilers, errors, strict=True):
        assert compiler.stdout is not None
        results += [json.loads(line) for line in compiler.stdout.read().splitlines()]
        assert compiler.wait(timeout=840) == 0, err.read_text()[-3000:]
    assert len(results) == len(jobs) > 40
    from search_spaces.matmul import smem_bytes

    for r in results:
        if r.get("refused"):
            assert r["shared"] > H100.smem_per_block, r
            assert smem_bytes(r["config"], get_op("matmul").parse_problem("4096x4096x4096"), (9, 0)) > H100.smem_per_block
        else:
            assert r["shared"] <= r["bound"] <= r["limit"], r
