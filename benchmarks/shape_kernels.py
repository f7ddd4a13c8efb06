"""Kernels written the way libraries write them (not ours; their config lists not tuned for this), for the
dynamic-shape benchmarks (refine_regret.py, dynamic_shapes.py): a tiled bf16 matmul with a 12-config list (run at
N = K = 4096, and at N = 1024, K = 256 where the best config changes sharply with M), and an RMSNorm over rows of
4096 with ROWS rows per program (16 configs). Each comes plain (`triton.jit`), under `triton.autotune`, and under
`autotuner.autotune` (importable by name, so `autotuner tune` and the workers reach it:
AUTOTUNER_KERNEL_MODULES=benchmarks.shape_kernels).

    launch = Launcher(KERNELS["small_k"])
    launch(mm_autotuned, 300)          # one call at M = 300 through the kernel given
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

import autotuner

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def rms_rows_kernel(x_ptr, w_ptr, y_ptr, M, N, stride, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + rows[:, None] * stride + cols[None, :], (x * rstd[:, None] * w[None, :]).to(y_ptr.dtype.element_ty),
             mask=mask)


MATMUL_CONFIGS = [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, num_warps=w, num_stages=s)
                  for bm, bn, w, s in ((16, 64, 4, 4), (16, 128, 4, 4), (32, 64, 4, 4), (32, 128, 4, 4),
                                       (32, 256, 8, 3), (64, 64, 4, 4), (64, 128, 4, 4), (64, 256, 8, 3),
                                       (128, 64, 4, 4), (128, 128, 8, 3), (128, 256, 8, 3), (256, 128, 8, 3))]
ROWS_CONFIGS = [dict(ROWS=r, num_warps=w) for r in (1, 2, 4, 8) for w in (2, 4, 8, 16)]


def triton_configs(configs: list[dict[str, int]]) -> list[triton.Config]:
    return [triton.Config({k: v for k, v in c.items() if k not in ("num_warps", "num_stages")},
                          num_warps=c["num_warps"], num_stages=c.get("num_stages", 3)) for c in configs]


# under autotuner.autotune, as a library would declare them under triton.autotune
mm_autotuned = autotuner.autotune(configs=triton_configs(MATMUL_CONFIGS), key=["M", "N", "K"],
                                  name="benchmarks.shape_kernels:mm_autotuned")(matmul_kernel)
rms_autotuned = autotuner.autotune(configs=triton_configs(ROWS_CONFIGS), key=["M", "N"],
                                   name="benchmarks.shape_kernels:rms_autotuned")(rms_rows_kernel)

KERNELS: dict[str, dict[str, Any]] = {
    "lib_matmul": dict(kind="matmul", n=4096, k=4096, low=16, high=4096, configs=MATMUL_CONFIGS,
                       name="benchmarks.shape_kernels:mm_autotuned", plain=matmul_kernel),
    "small_k": dict(kind="matmul", n=1024, k=256, low=16, high=4096, configs=MATMUL_CONFIGS,
                    name="benchmarks.shape_kernels:mm_autotuned", plain=matmul_kernel),
    "rms_rows": dict(kind="rows", n=4096, k=None, low=256, high=65536, configs=ROWS_CONFIGS,
                     name="benchmarks.shape_kernels:rms_autotuned", plain=rms_rows_kernel),
}




def small_for_the_interpreter() -> None:
    """The same kernels and lists at sizes Triton's interpreter runs in seconds: to try a benchmark's steps."""
    for spec in KERNELS.values():
        spec.update(n=32, k=32 if spec["k"] else None, low=16, high=64)


def decorated(spec: dict[str, Any]) -> Any:
    return mm_autotuned if spec["kind"] == "matmul" else rms_autotuned


def sweep_shape(spec: dict[str, Any]) -> str:
    """The key a sweep of the kernel names: `M=low-high:pow2` and the fixed values."""
    fixed = f"N={spec['n']},K={spec['k']}" if spec["kind"] == "matmul" else f"N={spec['n']}"
    return f"M={spec['low']}-{spec['high']}:pow2,{fixed}"


class Launcher:
    """One call of a kernel at a given M (its tensors kept for the last M launched), with a config's values given
    (a plain kernel) or chosen by the kernel's autotuner."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        g = torch.Generator(device="cpu").manual_seed(0)
        n, k = spec["n"], spec["k"]
        self.b = torch.randn((k, n), generator=g).to(DEVICE, DTYPE) if spec["kind"] == "matmul" else None
        self.w = torch.randn(n, generator=g).to(DEVICE, DTYPE)

    @functools.lru_cache(maxsize=2)  # noqa: B019 - one benchmark's launcher, the last M's tensors only
    def tensors(self, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        n, k = self.spec["n"], self.spec["k"]
        if self.spec["kind"] == "matmul":
            return torch.randn((m, k), device=DEVICE, dtype=DTYPE), torch.empty((m, n), device=DEVICE, dtype=DTYPE)
        return torch.randn((m, n), device=DEVICE, dtype=DTYPE), torch.empty((m, n), device=DEVICE, dtype=DTYPE)

    def __call__(self, kernel: Any, m: int, **config: Any) -> None:
        x, y = self.tensors(m)
        n = self.spec["n"]
        if self.spec["kind"] == "matmul":
            b, k = self.b, self.spec["k"]
            assert b is not None
            kernel[lambda meta: (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))](
                x, b, y, m, n, k, x.stride(0), x.stride(1), b.stride(0), b.stride(1), y.stride(0), y.stride(1),
                **config)
        else:
            kernel[lambda meta: (triton.cdiv(m, meta["ROWS"]),)](
                x, self.w, y, m, n, x.stride(0), 1e-6, BLOCK_N=triton.next_power_of_2(n), **config)

    def time(self, m: int, config: dict[str, int], rep: float = 20.0) -> float:
        """The plain kernel's median time at M with this config, in milliseconds: launches replayed from a CUDA
        graph (triton.testing.do_bench_cudagraph), so that a kernel of a few microseconds is timed on the GPU, not
        with the CPU's launch gaps that timing each launch between events takes in (they made such landscapes
        swing 2x between neighbouring M); the wall clock in the interpreter."""
        fn = functools.partial(self, self.spec["plain"], m, **config)
        if DEVICE == "cpu":
            from autotuner.engine.measure.timing import time_wall

            return time_wall(fn).median_ms
        self.tensors(m)  # made before the graph is captured
        return float(triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median"))
