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
from autotuner.engine.measure.compile_pool import compile_only
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
from autotuner.engine.measure import compile_lock

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


POOL = """
import ctypes, os, pathlib
from dataclasses import asdict
import torch
from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.engine.measure.compile_pool import CompilePool
from autotuner.engine.measure.trial_process import WorkerSpec


def context_made():  # run in the pool's process: has it made the device's CUDA context?
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuInit(0)
    flags, active = ctypes.c_uint(), ctypes.c_int()
    lib.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active))
    return bool(active.value)


def binaries():
    return sorted(p.name for p in pathlib.Path(os.environ["TRITON_CACHE_DIR"]).rglob("*.cubin"))


def main():  # (the pool's processes import this file as a module: nothing runs on import)
    op = get_op("softmax")
    problem = op.parse_problem("256x1000", "float16")
    config = op.space.default(problem, current_device(0))
    wide = op.parse_problem("1024x65536", "bfloat16")
    pool = CompilePool(WorkerSpec("softmax", asdict(problem), (), 0), 1, 0)
    pool.prestart()
    print("compiled" if isinstance(pool.submit(config).result(timeout=300), float) else "failed")
    too_big = {**op.space.default(wide, current_device(0)), "BLOCK_N": 65536, "ROWS": 1, "num_warps": 16,
               "num_stages": 1, "PERSIST": 1}
    print(pool.submit(too_big, WorkerSpec("softmax", asdict(wide), (), 0)).result(timeout=300))
    print("context in the pool:", pool._ensure().submit(context_made).result(timeout=60))
    before = binaries()
    x = op.make_inputs(problem, "cuda:0")
    op.run(x, config)  # this process's first launch of the config: Triton's cache has it from the pool
    torch.cuda.synchronize()
    print("new binaries:", len(set(binaries()) - set(before)), "of", len(before))
    try:
        op.run({**x, "x": torch.empty(256, 1000, dtype=torch.float16, device="meta")}, config)
        print("a meta tensor launched")
    except ValueError as exc:
        print("meta refused:", "CUDA tensors" in str(exc))


if __name__ == "__main__":
    main()
"""


def test_the_pool_compiles_on_meta_tensors_without_a_cuda_context(tmp_path):
    """A pool process makes no CUDA context (fifteen at once took seconds and half a GiB each): it compiles on meta
    inputs and checks the binary's shared memory against the device's; the trial worker's real tensors then find
    the same binary in Triton's cache. Outside a pool, a launch on meta tensors is refused."""
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "compiled", out.stdout
    assert "out_of_resources" in lines[1] and "shared memory" in lines[1], out.stdout
    assert lines[2] == "context in the pool: False", out.stdout
    assert lines[3].startswith("new binaries: 0 of ") and lines[3] != "new binaries: 0 of 0", out.stdout
    assert lines[4] == "meta refused: True", out.stdout


FLUSH = """
import os, pathlib, threading, torch
from autotuner.engine.measure import l2_flush

def files():
    return sorted(str(p) for p in pathlib.Path(os.environ["TRITON_CACHE_DIR"]).rglob("*") if p.is_file())

thread = threading.Thread(target=l2_flush.compile_ahead, args=(0,))
thread.start()
torch.ones(1, device="cuda:0")  # the context, made meanwhile on the main thread (as a trial worker's warm-up does)
thread.join()
ahead = files()
l2_flush.l2_flusher(torch.device("cuda", 0))()
torch.cuda.synchronize()
print(sum(p.endswith(".cubin") for p in ahead), len(set(files()) - set(ahead)))
"""


def test_the_l2_flush_compiled_ahead_is_the_binary_the_first_flush_launches(tmp_path):
    """A trial worker compiles its L2 flush's kernel and builds its launcher on a thread while its CUDA context is
    made: the first flush then finds both in Triton's cache and adds nothing to it."""
    out = subprocess.run([sys.executable, "-c", FLUSH], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0"], out.stdout


POOL_FLUSH = """
import os, pathlib
from autotuner.engine.measure.compile_pool import CompilePool

pool = CompilePool(None, 2, 0)
for task in pool.prestart():  # (its processes spawned without torch; one compiles the trial worker's L2 flush)
    task.result(240)
pool.close()
print("torch in the parent:", "torch" in __import__("sys").modules)
"""

FLUSH_AFTER = """
import os, pathlib, torch
from autotuner.engine.measure import l2_flush

def files():
    return sorted(str(p) for p in pathlib.Path(os.environ["TRITON_CACHE_DIR"]).rglob("*") if p.is_file())

before = files()
l2_flush.l2_flusher(torch.device("cuda", 0))()
torch.cuda.synchronize()
print(sum(p.endswith(".cubin") for p in before), len(set(files()) - set(before)), *sorted(set(files()) - set(before)))
"""


def test_the_compile_pool_compiles_the_trial_workers_l2_flush_without_torch(tmp_path):
    """A prestarted pool (new interpreters that never import torch) compiles the L2 flush as the command starts, and
    builds Triton's C module over the driver: the trial worker's first flush then finds the binary, its launcher and
    that module in Triton's cache and adds nothing to it."""
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    pool = subprocess.run([sys.executable, "-c", POOL_FLUSH], capture_output=True, text=True, timeout=300, env=env)
    assert pool.returncode == 0, pool.stderr
    assert pool.stdout.strip() == "torch in the parent: False", pool.stdout
    out = subprocess.run([sys.executable, "-c", FLUSH_AFTER], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0"], out.stdout
