"""Can a process that never imports torch compile a built-in op's configs for a GPU, through the op's own make_inputs
and prepare, into Triton's cache under the keys a torch process's launch then finds? Shape-only tensors stand in for
torch's meta tensors, a driver without torch for Triton's. Prints each config's compile key (ASTSource and options
hashes) and timings, then imports torch and compares with the meta path's keys.

    python lab/torchfree_compile_probe.py [--cc 90] [--sms 132] [--compile]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

T0 = time.perf_counter()
os.environ.setdefault("TRITON_INTERPRET", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = {
    "matmul": ("4096x4096x4096", "float16", [
        {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "TMA": 2, "SUBTILE": 1, "FLATTEN": 1,
         "num_warps": 8, "num_stages": 4},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "TMA": 1, "SPLIT_K": 2, "num_warps": 8,
         "num_stages": 3},
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
    ]),
    "softmax": ("1024x32768", "float16", [{"BLOCK_N": 32768, "ROWS": 1, "PERSIST": 1, "num_warps": 16,
                                           "num_stages": 1}]),
    "gelu": ("16777216", "float32", [{"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1}]),
}


class _DType:
    def __init__(self, name: str, itemsize: int, floating: bool) -> None:
        self.name, self.itemsize, self.is_floating_point = name, itemsize, floating

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    __str__ = __repr__


class _Device:
    def __init__(self, kind: str, index: int | None = None) -> None:
        self.type, self.index = kind, index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


class ShapeTensor:
    """A tensor's shape, strides, dtype and device, no memory: what Triton specializes a launch on."""

    def __init__(self, shape, dtype, strides=None) -> None:
        self.shape = tuple(int(s) for s in shape)
        if strides is None:
            strides, step = [], 1
            for d in reversed(self.shape):
                strides.append(step)
                step *= d
            strides = tuple(reversed(strides))
        self._strides = tuple(strides)
        self.dtype = dtype
        self.device = _Device("meta")

    def stride(self, dim=None):
        return self._strides if dim is None else self._strides[dim]

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self) -> int:
        return self.dtype.itemsize

    def data_ptr(self) -> int:
        return 0

    def is_contiguous(self) -> bool:
        return self._strides == ShapeTensor(self.shape, self.dtype)._strides

    def view(self, *shape):
        return self.reshape(*shape)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], tuple):
            shape = shape[0]
        shape = list(shape)
        if -1 in shape:
            known = 1
            for d in shape:
                if d != -1:
                    known *= d
            shape[shape.index(-1)] = self.numel() // known
        return ShapeTensor(shape, self.dtype)


class StandInTorch:
    """The names of torch that the ops' meta path reads."""

    Tensor = ShapeTensor
    float16 = _DType("float16", 2, True)
    bfloat16 = _DType("bfloat16", 2, True)
    float32 = _DType("float32", 4, True)
    int32 = _DType("int32", 4, False)
    int8 = _DType("int8", 1, False)
    Size = tuple
    _C = None

    class compiler:  # noqa: N801
        @staticmethod
        def is_compiling() -> bool:
            return False

    @staticmethod
    def device(kind, index=None):
        return _Device(kind, index)

    @staticmethod
    def empty(*shape, dtype=None, device=None):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return ShapeTensor(shape, dtype or StandInTorch.float32)

    @staticmethod
    def empty_strided(shape, strides, dtype=None, device=None):
        return ShapeTensor(shape, dtype or StandInTorch.float32, strides)

    zeros = empty

    def __getattr__(self, name):
        raise AttributeError(f"the stand-in torch has no {name!r}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", type=int, default=90)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--compile", action="store_true", help="compile too (not only the keys)")
    args = ap.parse_args()
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    t_triton = time.perf_counter()
    from autotuner.base.registry import get_op
    from kernels import _backend, _direct

    for op_name in CONFIGS:
        get_op(op_name)
    assert "torch" not in sys.modules, "the ops' modules imported torch"
    sys.meta_path.insert(0, _NoTorch())  # an import of torch from here on raises, with its traceback
    standin = StandInTorch()
    for name, module in list(sys.modules.items()):
        if (name.startswith("kernels") or name.startswith("search_spaces")) and hasattr(module, "torch"):
            module.torch = standin
    _backend.COMPILE_ONLY, _backend.META_DEVICE = True, 0
    _backend._PROPERTIES[0] = _backend.CudaProperties("probe", (args.cc // 10, args.cc % 10), args.sms, 80 << 30,
                                                      227 << 10)
    upcast = _backend.dot_needs_upcast
    for name, module in list(sys.modules.items()):  # (it imports torch to compare with torch.bfloat16)
        if name.startswith("kernels") and vars(module).get("dot_needs_upcast") is upcast:
            module.dot_needs_upcast = lambda dtype: False
    _direct.DIRECT = False
    target = GPUTarget("cuda", args.cc, 32)

    from triton.backends.nvidia import driver as nvdriver

    class ProbeDriver(nvdriver.CudaDriver):
        def __init__(self) -> None:  # Triton 3.6's asks torch for devices and streams
            self.launcher_cls = nvdriver.CudaLauncher

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_current_target(self):
            return target

        def get_device_capability(self, device=None):
            return (args.cc // 10, args.cc % 10)

    driver.set_active(ProbeDriver())
    captured = []
    original = JITFunction._do_compile

    def do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        src = self.ASTSource(self, signature, constexprs, attrs)
        captured.append((self.__name__, src.hash(), options.hash()))
        if not args.compile:
            raise _Captured()
        return original(self, key, signature, device, constexprs, options, attrs, warmup)

    JITFunction._do_compile = do_compile
    launch = JITFunction.run

    def run(self, *a, grid, warmup, **kw):
        return launch(self, *a, grid=grid, warmup=True, **kw)

    JITFunction.run = run

    t_ready = time.perf_counter()
    ours = []
    for op_name, (shape, dtype, configs) in CONFIGS.items():
        op = get_op(op_name)
        problem = op.parse_problem(shape, dtype)
        for cfg in configs:
            t = time.perf_counter()
            n = len(captured)
            try:
                op.run(op.make_inputs(problem, "meta"), cfg)
            except _Captured:
                pass
            ours.append((op_name, cfg, captured[n:], time.perf_counter() - t))
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _NoTorch)]
    print(f"process start to Triton imported {t_triton - T0:.2f} s, to ready {t_ready - T0:.2f} s, torch imported: no")
    for op_name, cfg, keys, s in ours:
        print(f"{op_name} {cfg}: {s:.2f} s, {[k[0] + ' ' + k[1][:12] + ' ' + k[2][:12] for k in keys]}")
    # the same through torch's meta tensors
    import torch

    for name, module in list(sys.modules.items()):
        if (name.startswith("kernels") or name.startswith("search_spaces")) and getattr(module, "torch", None) is standin:
            module.torch = torch
    _backend.dot_needs_upcast = lambda dtype: False
    captured.clear()
    same = True
    for op_name, cfg, keys, _ in ours:
        op = get_op(op_name)
        problem = op.parse_problem(*CONFIGS[op_name][:2])
        n = len(captured)
        args.compile = False
        try:
            op.run(op.make_inputs(problem, "meta"), cfg)
        except _Captured:
            pass
        theirs = captured[n:]
        if theirs != keys:
            same = False
            print(f"DIFFERENT {op_name} {cfg}: {theirs} against {keys}")
    print("every key the same as torch's meta path" if same else "keys differ")


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"{name} imported in the torch-free part")
        return None


class _Captured(Exception):
    pass


if __name__ == "__main__":
    main()
