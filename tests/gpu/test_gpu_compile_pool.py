"""GPU tier: the compile pool compiles and loads each config without running it on the GPU (where the trial worker
times), and a config over the device's limits still fails there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: no CUDA device here"),
]

# In a process of its own: compile_only changes every Triton launch of the process it runs in.
SCRIPT = """
import torch
import triton
from autotuner.engine.compile_pool import compile_only
from kernels import softmax as k
from kernels._checks import poison_outputs

compile_only()
poison_outputs(True)  # new outputs start as NaN: a kernel that ran would have written them
x = torch.randn(64, 1000, device="cuda")
y = k.softmax(x, {"BLOCK_N": 1024, "ROWS": 1, "num_warps": 4, "num_stages": 1})
torch.cuda.synchronize()
print("untouched" if torch.isnan(y).all() else "ran")
wide = torch.randn(1024, 65536, device="cuda", dtype=torch.bfloat16)  # two 64k-element rows staged: 256 KiB
try:
    k.softmax(wide, {"BLOCK_N": 65536, "ROWS": 1, "num_warps": 16, "num_stages": 1, "PERSIST": 1})
    print("loaded")
except triton.runtime.autotuner.OutOfResources as exc:
    print("out of resources:", exc)
"""


def test_the_compile_pool_loads_kernels_without_running_them():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "untouched", out.stdout
    assert lines[1].startswith("out of resources") and "shared memory" in lines[1], out.stdout


LOCKED = """
import os, torch, triton, triton.language as tl
from autotuner.engine import compile_lock

compile_lock.install()

@triton.jit
def add_one(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1.0)

x = torch.zeros(128, device="cuda")
add_one[(1,)](x, BLOCK=128)
torch.cuda.synchronize()
locks = os.path.join(os.environ["TRITON_CACHE_DIR"], ".autotuner-compile-locks")
kept = sum(len(files) for _, _, files in os.walk(locks))
print(bool(getattr(add_one.compile, "_autotuner_locked", False)), x.sum().item(), kept)
"""


def test_a_kernel_first_launched_after_the_lock_is_installed_compiles_under_it(tmp_path):
    script = tmp_path / "locked.py"  # Triton reads a @jit function's source from its file: not `python -c`
    script.write_text(LOCKED)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "128.0", "1"], out.stdout
