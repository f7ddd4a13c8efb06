"""A compile-pool process compiles without torch (autotuner.engine.measure.torch_free): what it compiles, through the pool's
own `_init` and `_compile`, for an H100 this machine need not have, is what a process launching on torch's meta tensors
asks for, under the same keys, and that process finds every binary in Triton's cache (tests/support/torch_free_keys.py,
each case in a process of its own: one never imports torch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels import _torch
from tests.support.torch_free_keys import CASES

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "torch_free_keys.py"


def _compiles(mode: str, cache: Path) -> list[dict]:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, str(SCRIPT), mode], env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_a_compile_process_without_torch_compiles_what_a_torch_process_finds(tmp_path):
    shapes = _compiles("shapes", tmp_path)
    meta = _compiles("meta", tmp_path)
    assert shapes[-1] == {"torch": False} and meta[-1] == {"torch": True}

    def keys(rows: list[dict]) -> list[tuple[str, str, str]]:
        return [(r["kernel"], r["source"], r["options"]) for r in rows[:-1]]

    compiled = len(CASES) + 1  # (and the trial worker's L2 flush)
    assert len(keys(shapes)) == compiled and keys(shapes) == keys(meta)
    assert keys(shapes)[-1][0] == "_read_evict_last"
    assert [r["cached"] for r in shapes[:-1]] == [False] * compiled  # compiled there
    assert [r["cached"] for r in meta[:-1]] == [True] * compiled  # and found here


def test_an_op_whose_module_needs_torch_is_compiled_with_it(tmp_path):
    """A plugin's module that imports torch (a decorated kernel's, say): the process takes torch and torch's meta
    tensors from then on, and compiles."""
    (result,) = _compiles("fallback", tmp_path)
    assert result == {"compiled": True, "torch": True, "without torch": False}


def test_shapes_are_refused_where_torch_is_imported():
    import torch  # noqa: F401

    with pytest.raises(RuntimeError, match="torch is imported"):
        _torch.use_shapes(True)
