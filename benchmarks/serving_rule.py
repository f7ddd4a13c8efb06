"""Which swept point's winner to serve between two points, measured on held-back keys: the rule before session 31
(the winner that lost less on the other point) against the interval rule (each winner's loss on the other point,
scaled by the key's position between the two on a log scale: autotuner.store.regret).

One GPU pass times every config of a matmul kernel written as a library writes one (12 configs, bf16, N = K =
4096, `triton.testing.do_bench`) on every M: the swept points (powers of two, 16..4096) and keys held back between
them. From that landscape, offline: each point's winner; each winner's loss on its neighbours (the cross timing);
each rule's choice for every held-back key; and the choice's regret against that key's own best. Prints a table.

    python benchmarks/serving_rule.py [--out DIR]      # on a GPU
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl

N = K = 4096
POINTS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
HELD_BACK = [20, 24, 28, 40, 48, 56, 80, 96, 112, 160, 192, 224, 300, 384, 448, 600, 768, 896, 1200, 1536, 1792,
             2400, 3072, 3584]
CONFIGS = [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, num_warps=w, num_stages=s)
           for bm, bn, w, s in ((16, 64, 4, 4), (16, 128, 4, 4), (32, 64, 4, 4), (32, 128, 4, 4), (32, 256, 8, 3),
                                (64, 64, 4, 4), (64, 128, 4, 4), (64, 256, 8, 3), (128, 64, 4, 4), (128, 128, 8, 3),
                                (128, 256, 8, 3), (256, 128, 8, 3))]


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
    c = acc.to(tl.bfloat16)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def time_config(m: int, config: dict, a: torch.Tensor, b: torch.Tensor) -> float:
    c = torch.empty((m, N), device="cuda", dtype=torch.bfloat16)
    meta = {k: v for k, v in config.items() if k.startswith("BLOCK")}
    grid = (triton.cdiv(m, config["BLOCK_M"]), triton.cdiv(N, config["BLOCK_N"]))

    def run() -> None:
        matmul_kernel[grid](a, b, c, m, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                            c.stride(1), num_warps=config["num_warps"], num_stages=config["num_stages"], **meta)

    run()
    return float(triton.testing.do_bench(run, warmup=10, rep=40))


def old_rule(m: int, lo: int, hi: int, loss: dict) -> int:
    """The point whose winner to serve before: the nearest (log scale), unless the other's winner lost less on the
    nearest than the nearest's lost on it."""
    near, far = (lo, hi) if math.log(m / lo) <= math.log(hi / m) else (hi, lo)
    return far if loss[(far, near)] < loss[(near, far)] else near


def new_rule(m: int, lo: int, hi: int, loss: dict) -> int:
    t = math.log(m / lo) / math.log(hi / lo)  # 0 at lo, 1 at hi
    return lo if t * loss[(lo, hi)] <= (1 - t) * loss[(hi, lo)] else hi


def nearest(m: int, lo: int, hi: int, loss: dict) -> int:
    return lo if math.log(m / lo) <= math.log(hi / m) else hi


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    b = torch.randn((K, N), device="cuda", dtype=torch.bfloat16)
    times: dict[int, list[float]] = {}
    for m in sorted({*POINTS, *HELD_BACK}):
        a = torch.randn((m, K), device="cuda", dtype=torch.bfloat16)
        times[m] = [time_config(m, c, a, b) for c in CONFIGS]
    Path(args.out, "serving_rule_landscape.json").write_text(json.dumps({"configs": CONFIGS, "times": times}))
    winner = {p: min(range(len(CONFIGS)), key=lambda i: times[p][i]) for p in POINTS}
    loss = {(p, q): times[q][winner[p]] / times[q][winner[q]] - 1 for p, q in zip(POINTS, POINTS[1:], strict=False)}
    loss |= {(q, p): times[p][winner[q]] / times[p][winner[p]] - 1 for p, q in zip(POINTS, POINTS[1:], strict=False)}
    rows: list[tuple[int, int, int, list[str]]] = []
    regrets: dict[str, list[float]] = {"nearest": [], "old rule": [], "interval rule": []}
    for m in HELD_BACK:
        lo = max(p for p in POINTS if p < m)
        hi = min(p for p in POINTS if p > m)
        best = min(times[m])
        cells: list[str] = []
        for name, rule in (("nearest", nearest), ("old rule", old_rule), ("interval rule", new_rule)):
            served = rule(m, lo, hi, loss)
            regret = times[m][winner[served]] / best - 1
            regrets[name].append(regret)
            cells.append(f"{served}: {regret:+.1%}")
        rows.append((m, lo, hi, cells))
    print("\n| M | between | nearest | old rule | interval rule |")
    print("| --- | --- | --- | --- | --- |")
    for m, lo, hi, shown in rows:
        print(f"| {m} | {lo}-{hi} | " + " | ".join(shown) + " |")
    print("\n| rule | regret geomean | worst |")
    print("| --- | --- | --- |")
    for name, rs in regrets.items():
        geo = math.exp(statistics.fmean(math.log1p(r) for r in rs)) - 1
        print(f"| {name} | {geo:+.2%} | {max(rs):+.1%} |")
    print("\nneighbours' losses: " + ", ".join(f"{p}->{q} {v:+.1%}" for (p, q), v in sorted(loss.items())))


if __name__ == "__main__":
    main()
