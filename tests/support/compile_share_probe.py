"""Compiles one kernel for sm_90 with Triton's own compile in a process of its own (no GPU needed), as a trial
worker or compile-pool process would under autotuner.engine.measure.compile_share's variables, and prints as JSON how
many times Triton's NVIDIA backend made a cubin, a digest of the kernel's cubin, its asm's kinds and its shared
memory. tests/integration/test_compile_share.py runs it with the environment a child would get.

    python tests/support/compile_share_probe.py KERNEL_FILE BLOCK
"""

import hashlib
import importlib.util
import json
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource


def main() -> None:
    kernel_file, block = sys.argv[1:]
    spec = importlib.util.spec_from_file_location("kernel", kernel_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = []
    make_cubin = CUDABackend.make_cubin

    def counting(self, *args, **kwargs):
        made.append(1)
        return make_cubin(self, *args, **kwargs)

    CUDABackend.make_cubin = counting
    src = ASTSource(module.copy, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                    {(3,): int(block)}, {})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    print(json.dumps({"made": len(made), "cubin": hashlib.sha256(kernel.asm["cubin"]).hexdigest(),
                      "asm": sorted(kernel.asm), "shared": kernel.metadata.shared}))


if __name__ == "__main__":
    main()
