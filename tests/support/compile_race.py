"""One side of a compile race (tests/integration/test_compile_lock.py): compile a kernel for an H100 (sm_90; Triton compiles
for a GPU it does not have) through `triton.compiler.compile`, with or without autotuner's lock, at a wall-clock
moment given, and print how many times Triton's backend compiled it (its stages run only on a cache miss)."""

from __future__ import annotations

import json
import sys
import time

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource


@triton.jit
def _warm(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)


@triton.jit
def _raced(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, tl.exp(x) * 2.0 + tl.sin(x), mask=offs < n)


def main(start_at: float, lock: bool) -> None:
    from autotuner.engine.measure import compile_lock

    if lock:
        compile_lock.install()
    import triton.compiler as compiler

    compiled: list[str] = []
    add_stages = CUDABackend.add_stages

    def counted(self, stages, options, *args, **kwargs):  # (called on a cache miss only)
        compiled.append(sys.argv[1])
        return add_stages(self, stages, options, *args, **kwargs)

    CUDABackend.add_stages = counted
    target = GPUTarget("cuda", 90, 32)
    # Triton's installation hash, once per process, before the race
    compiler.compile(ASTSource(_warm, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 64}), target=target)
    compiled.clear()
    time.sleep(max(0.0, start_at - time.time()))
    src = ASTSource(_raced, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024})
    kernel = compiler.compile(src, target=target)
    print(json.dumps({"compiled": len(compiled), "done_at": time.time(), "cubin": len(kernel.asm["cubin"])}))


if __name__ == "__main__":
    main(float(sys.argv[2]), sys.argv[3] == "lock")
