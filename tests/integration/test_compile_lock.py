"""Processes compiling the same binary into one Triton cache at once (workers on one host): with
autotuner.engine.measure.compile_lock, one compiles and the others wait and load it. Real Triton compiles for sm_90, which
Triton makes without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from autotuner.engine.measure.compile_lock import held

ROOT = Path(__file__).resolve().parents[2]


def _race(cache: Path, lock: bool, n: int = 3) -> list[dict]:
    start_at = time.time() + 8.0  # after every process has imported Triton and hashed it
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "TRITON_INTERPRET": "0"}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.support.compile_race", str(i), repr(start_at),
                               "lock" if lock else "plain"], cwd=ROOT, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(n)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_processes_racing_to_compile_one_binary_compile_it_once(tmp_path):
    results = _race(tmp_path / "cache", lock=True)
    assert sum(r["compiled"] for r in results) == 1  # one compiled; the others found it in Triton's cache
    assert len({r["cubin"] for r in results}) == 1 and results[0]["cubin"] > 0
    assert any((tmp_path / "cache" / ".autotuner-compile-locks").rglob("*"))
    # without the lock the same race compiles it in (nearly) every process
    assert sum(r["compiled"] for r in _race(tmp_path / "plain", lock=False)) >= 2


def test_a_lock_is_waited_for_and_a_wait_can_run_out(tmp_path):
    path = tmp_path / "locks" / "k"
    with held(path) as first:
        assert first
        t0 = time.monotonic()
        with held(path, wait_s=0.3) as second:
            assert not second and time.monotonic() - t0 >= 0.3
    with held(path, wait_s=0.0) as again:  # released on leaving
        assert again
    blocked = tmp_path / "file"
    blocked.write_text("")
    with held(blocked / "k") as unwritable:  # a folder that cannot be made: goes on without the lock
        assert not unwritable
