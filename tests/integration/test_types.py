"""The code type-checks (mypy over every package, the benchmarks included: pyproject.toml's [tool.mypy]). A call
whose signature moved, in a module no other test runs (a benchmark, say), fails here instead of on a GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_errors(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
