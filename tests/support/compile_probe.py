"""Compiles one kernel for sm_90 through autotuner.launch.binary_cache in a process of its own (no GPU needed), as a
launching process would, and prints what it got as JSON: how often Triton's compile ran, the kernel's hash and
digests of its binary and PTX. tests/integration/test_binary_cache.py runs it; a process of its own keeps the compile clear
of the suite's TRITON_INTERPRET and of the interpreter's patches to triton.language.

    python tests/support/compile_probe.py KEPT_DIR KERNEL_FILE BLOCK NUM_WARPS [always_compile] [off] [async]

`async`: the compile is asked as Triton's AsyncCompileMode asks it, with Triton's cache-invalidating variables.
"""

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from autotuner.launch import binary_cache


def main() -> None:
    kept, kernel_file, block, warps, *flags = sys.argv[1:]
    spec = importlib.util.spec_from_file_location("kernel", kernel_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if "always_compile" in flags:
        triton.knobs.compilation.always_compile = True
    calls = []

    def counting(src, target=None, options=None, **kw):
        calls.append(1)
        return triton.compile(src, target=target, options=options, **kw)

    src = ASTSource(module.copy, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                    {(3,): int(block)}, {})
    compile_fn = binary_cache.cached_compile(counting, lambda: None if "off" in flags else Path(kept))
    kw = {}
    if "async" in flags:
        from triton.compiler.compiler import get_cache_invalidating_env_vars

        kw["_env_vars"] = get_cache_invalidating_env_vars()
    kernel = compile_fn(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": int(warps)}, **kw)
    print(json.dumps({"calls": len(calls), "hash": kernel.hash, "name": kernel.name,
                      "cubin": hashlib.sha256(kernel.asm["cubin"]).hexdigest(),
                      "ptx": hashlib.sha256(kernel.asm["ptx"].encode()).hexdigest(),
                      "metadata": json.loads(json.dumps(kernel.metadata._asdict(), default=str))}))


if __name__ == "__main__":
    main()
