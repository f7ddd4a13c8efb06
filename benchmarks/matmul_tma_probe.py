"""Would TMA tiles help our matmul? A TMA kernel (tiles through host tensor descriptors, one program per tile
or a persistent grid of one program per SM) against torch.matmul (cuBLAS) and `kernels/matmul.py` with the
suite's tuned configs. This probe led to `kernels/matmul.py`'s TMA=1 path (one program per tile: the
persistent grid measured within 1-3% either way), which its "TMA" rows now call; it is kept for the
persistent comparison.

    python benchmarks/matmul_tma_probe.py            # on a Hopper GPU: one markdown table
    TRITON_INTERPRET=1 python benchmarks/matmul_tma_probe.py --check   # correctness only, small shapes
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from kernels.matmul import _grouped_tile, matmul  # noqa: E402


@triton.jit
def matmul_persistent_tma_kernel(a_desc, b_desc, c_desc, M, N, K,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                 GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr):
    """kernels/matmul.py's TMA kernel (no epilogue) on a persistent grid: each program loops over tiles."""
    for tile_id in range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N), PROGRAMS):
        pid_m, pid_n = _grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def matmul_tma(a: torch.Tensor, b: torch.Tensor, cfg: dict[str, int], persistent: bool) -> torch.Tensor:
    """One program per tile: kernels/matmul.py with TMA=1; persistent: one program per SM (all tiles in the
    interpreter)."""
    if not persistent:
        return matmul(a, b, {**cfg, "TMA": 1})
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    programs = min(tiles, torch.cuda.get_device_properties(a.device).multi_processor_count) if a.is_cuda else tiles
    matmul_persistent_tma_kernel[(programs,)](
        TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
        TensorDescriptor.from_tensor(c, [bm, bn]), M, N, K,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], PROGRAMS=programs,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return c


def cfg(bm: int, bn: int, bk: int, g: int, w: int, s: int) -> dict[str, int]:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g, "num_warps": w, "num_stages": s}


def check() -> None:
    """The TMA variants against torch in float32, small shapes (the interpreter on a CPU)."""
    device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    for (m, n, k), dtype in [((64, 96, 80), torch.float16), ((128, 64, 64), torch.float32)]:
        a = torch.randn(m, k, dtype=dtype, device=device)
        b = torch.randn(k, n, dtype=dtype, device=device)
        want = a.float() @ b.float()
        for persistent in (False, True):
            got = matmul_tma(a, b, cfg(32, 32, 32, 2, 4, 2), persistent).float()
            err = (got - want).abs().max().item()
            print(f"{m}x{n}x{k} {dtype} persistent={persistent}: max abs err {err:.3g}")
            assert torch.allclose(got, want, atol=5e-2, rtol=1e-2), err


def bench_problem(m: int, n: int, k: int, dtype: torch.dtype, ours_cfg: dict[str, int],
                  tma_cfgs: list[dict[str, int]]) -> None:
    from autotuner.timing import time_cuda

    a = torch.randn(m, k, dtype=dtype, device="cuda")
    b = torch.randn(k, n, dtype=dtype, device="cuda")
    want = a.float() @ b.float()
    problem = f"{m}x{n}x{k} {str(dtype)[6:]}"
    cands: dict[tuple[str, str], Callable[[], torch.Tensor]] = {
        ("cuBLAS", "-"): functools.partial(torch.matmul, a, b),
        ("ours (kernels/matmul.py)", str(ours_cfg)): functools.partial(matmul, a, b, ours_cfg),
    }
    for c in tma_cfgs:
        for persistent in (False, True):
            label = ("TMA persistent" if persistent else "TMA", str(c))
            fn = functools.partial(matmul_tma, a, b, c, persistent)
            try:
                got = fn().float()
            except Exception as exc:  # a config this Triton or GPU rejects (shared memory, say)
                print(f"| {problem} | {label[0]} | {c} | failed: {type(exc).__name__} | | |")
                continue
            if not torch.allclose(got, want, atol=0.5, rtol=2e-2):
                print(f"| {problem} | {label[0]} | {c} | wrong result | | |")
                continue
            cands[label] = fn
    rounds: dict[tuple[str, str], list[float]] = {key: [] for key in cands}
    for _ in range(3):
        for key, timed in cands.items():
            rounds[key].append(time_cuda(timed).median_ms)
    base = statistics.median(rounds[("cuBLAS", "-")])
    for (kind, c_str), times in rounds.items():
        ms = statistics.median(times)
        print(f"| {problem} | {kind} | {c_str} | {ms:.4f} | {2 * m * n * k / ms / 1e9:.0f} | {base / ms:.3f}x |",
              flush=True)


def bench() -> None:
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, Triton {triton.__version__}; "
          "ms, median of 3 interleaved rounds\n")
    tma_cfgs = [cfg(128, 256, 64, 8, 8, 3), cfg(128, 256, 64, 8, 8, 4), cfg(128, 128, 64, 8, 8, 4),
                cfg(128, 128, 64, 8, 4, 4), cfg(128, 256, 128, 8, 8, 2), cfg(256, 128, 64, 8, 8, 3)]
    print("| problem | kernel | config | ms | TFLOP/s | vs cuBLAS |\n|---|---|---|---|---|---|")
    bench_problem(4096, 4096, 4096, torch.float16, cfg(128, 256, 64, 8, 8, 3), tma_cfgs)
    bench_problem(8192, 8192, 8192, torch.bfloat16, cfg(128, 256, 64, 8, 8, 4), tma_cfgs)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="correctness only (works in the interpreter)")
    if ap.parse_args().check:
        check()
    else:
        check()
        bench()
