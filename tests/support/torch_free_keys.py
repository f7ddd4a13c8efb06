"""Run as a script by tests/integration/test_torch_free_compile.py, in a process of its own (TRITON_INTERPRET=0, so that
kernels compile rather than interpret): the built-in ops' configs launched as a compile-pool process launches them, for
an H100 this machine need not have, either without torch (`shapes`: autotuner.engine.measure.torch_free, through the
pool's own `_init` and `_compile`) or with torch's meta tensors (`meta`, torch imported first). Prints a JSON line per
Triton compile the launches ask for: the kernel, its ASTSource hash and options hash, and whether that binary was in
Triton's cache (TRITON_CACHE_DIR) already; then the trial worker's L2 flush kernel (autotuner.engine.measure.l2_flush). The launcher's C module is not built: it needs libcuda, which a machine
without a GPU lacks (the GPU tier builds it: tests/gpu/test_gpu_compile_pool.py).

    python tests/support/torch_free_keys.py shapes|meta|fallback

`fallback`: a plugin op whose module imports torch (tests/support/paced_op.py), in a process compiling without torch:
it sets up again with torch (its meta tensors) and compiles; prints whether torch is imported and the process still
compiles without it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("matmul", "512x512x512", "float16", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "TMA": 2,
                                          "SUBTILE": 1, "FLATTEN": 1, "num_warps": 8, "num_stages": 4}),
    ("matmul", "512x512x512", "bfloat16", {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "TMA": 1,
                                           "SPLIT_K": 3, "num_warps": 8, "num_stages": 3}),
    ("matmul", "100x200x300", "float32", {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4,
                                          "num_stages": 3}),
    ("softmax", "64x4100", "float16", {"BLOCK_N": 8192, "ROWS": 1, "HOLD16": 1, "num_warps": 8, "num_stages": 1}),
    ("softmax", "8x65536", "bfloat16", {"BLOCK_N": 8192, "ROWS": 1, "SPLIT": 8, "SYNC": 1, "num_warps": 4,
                                        "num_stages": 1}),
    ("layernorm", "64x5120", "bfloat16", {"BLOCK_N": 8192, "ROWS": 1, "num_warps": 8, "num_stages": 1}),
    ("gelu", "65536", "float32", {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1}),
    ("attention", "1x2x128x64", "float16", {"BLOCK_M": 64, "BLOCK_N": 64, "TMA": 1, "num_warps": 4,
                                            "num_stages": 2}),
]


def fallback() -> None:
    from autotuner.engine.measure import compile_pool, torch_free
    from autotuner.engine.measure.trial_process import WorkerSpec
    from kernels import _backend

    _backend.assume_properties(0, _backend.CudaProperties("NVIDIA H100 80GB HBM3", (9, 0), 132, 80 << 30, 232448))
    compile_pool._STATE["device"] = compile_pool.META
    torch_free.start(0)
    compile_pool.compile_only()
    compile_pool.prepare = _smem_only
    compile_pool._same_target = lambda index: True  # (torch's current device: there is none here)
    spec = WorkerSpec("paced", {"n": 4096, "dtype": "float32", "approximate": "tanh"}, ("tests.support.paced_op",), 0)
    result = compile_pool._compile(spec, {"PAUSE_US": 1000})
    print(json.dumps({"compiled": isinstance(result, float), "torch": "torch" in sys.modules,
                      "without torch": torch_free.active()}), flush=True)


def main(mode: str) -> None:
    from triton.runtime.jit import JITFunction

    from autotuner.base.registry import get_op
    from autotuner.engine.measure import compile_pool, torch_free
    from autotuner.engine.measure.trial_process import WorkerSpec
    from kernels import _backend

    _backend.assume_properties(0, _backend.CudaProperties("NVIDIA H100 80GB HBM3", (9, 0), 132, 80 << 30, 232448))
    if mode == "meta":
        import torch  # noqa: F401  (the kernels' torch from the start: meta tensors)
    for name, *_ in CASES:
        get_op(name)  # (the ops' modules, before the kernels' torch is switched)
    if mode == "shapes":
        assert torch_free.possible(), "torch is imported already"
    compile_pool._STATE["device"] = compile_pool.META
    if mode == "shapes":
        torch_free.start(0)
    else:  # the same driver, torch's meta tensors
        from triton.backends.compiler import GPUTarget
        from triton.runtime.driver import driver

        driver.set_active(torch_free._driver_class()(0, GPUTarget("cuda", 90, 32), (9, 0)))
        _backend.COMPILE_ONLY, _backend.META_DEVICE = True, 0
        compile_pool._same_target = lambda index: True  # (torch's current device: there is none here)
    compile_pool.compile_only()
    compile_pool.prepare = _smem_only  # (see the module's docstring)
    original = JITFunction._do_compile
    cache = Path(os.environ["TRITON_CACHE_DIR"])

    def do_compile(self: Any, key: Any, signature: Any, device: Any, constexprs: Any, options: Any, attrs: Any,
                   warmup: Any) -> Any:
        before = {p.parent.name for p in cache.rglob("*.cubin")}
        kernel = original(self, key, signature, device, constexprs, options, attrs, warmup)
        src = self.ASTSource(self, signature, constexprs, attrs)
        print(json.dumps({"kernel": self.__name__, "source": src.hash(), "options": options.hash(),
                          "cached": {p.parent.name for p in cache.rglob("*.cubin")} == before}), flush=True)
        return kernel

    JITFunction._do_compile = do_compile
    for name, shape, dtype, config in CASES:
        op = get_op(name)
        spec = WorkerSpec(name, asdict(op.parse_problem(shape, dtype)), (), 0)
        result = compile_pool._compile(spec, config)
        assert isinstance(result, float), f"{name} {shape} {config}: {result}"
    from triton.runtime.driver import driver

    driver.active.launcher_cls = lambda src, metadata: None  # (see the module's docstring)
    if mode == "meta":  # (a CUDA device to make current: none here; the driver compiles for device 0 anyway)
        import contextlib

        import torch

        torch.cuda.device = lambda index: contextlib.nullcontext()
    compile_pool._compile_flush(0)  # the trial worker's L2 flush, as the pool compiles it ahead
    print(json.dumps({"torch": "torch" in sys.modules}), flush=True)


def _smem_only(kernel: Any) -> None:
    from triton.runtime.errors import OutOfResources

    if kernel.metadata.shared > _backend_smem():
        raise OutOfResources(kernel.metadata.shared, _backend_smem(), "shared memory")


def _backend_smem() -> int:
    from kernels._backend import properties

    return properties(0).smem_per_block


if __name__ == "__main__":
    fallback() if sys.argv[1] == "fallback" else main(sys.argv[1])
