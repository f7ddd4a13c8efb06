"""Probe: split-K counts that make whole waves (tiles x split a multiple of the SMs) on K-heavy matmuls."""
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch

import autotuner  # noqa: F401
from autotuner.engine.measure.timing import interleaved, time_cuda
from kernels import matmul as km

sms = torch.cuda.get_device_properties(0).multi_processor_count
problems = [(768, 1536, 32768, torch.bfloat16), (1536, 768, 24576, torch.float16), (1024, 1024, 16384, torch.float16),
            (512, 1024, 32768, torch.bfloat16)]
rows = []
for M, N, K, dt in problems:
    a = torch.randn(M, K, device="cuda", dtype=dt)
    b = torch.randn(K, N, device="cuda", dtype=dt)
    ref = torch.matmul(a, b).float()
    fns = {"cublas": lambda: torch.matmul(a, b)}
    for bm, bn in ((128, 256), (128, 128)):
        tiles = math.ceil(M / bm) * math.ceil(N / bn)
        for s in range(1, 17):
            if K // s < 512:
                continue
            cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": s, "TMA": 1,
                   "num_warps": 8, "num_stages": 4}
            try:
                out = km.matmul(a, b, cfg)
                torch.cuda.synchronize()
                err = (out.float() - ref).abs().max().item() / ref.abs().max().item()
            except Exception as e:
                print("fail", M, N, K, cfg, type(e).__name__, str(e)[:100]); continue
            if err > 2e-2:
                print("WRONG", M, N, K, bm, bn, s, err); continue
            fns[f"{bm}x{bn} s{s}"] = (lambda cfg=cfg: km.matmul(a, b, cfg))
    res = interleaved(list(fns), 3, lambda k: time_cuda(fns[k], 10, 50).median_ms)
    med = {k: sorted(v)[len(v) // 2] for k, v in res.items() if v}
    base = med["cublas"]
    print(f"== {M}x{N}x{K} {dt}: cuBLAS {base:.4f} ms, {sms} SMs")
    for k, v in sorted(med.items(), key=lambda kv: kv[1])[:14]:
        fill = ""
        if k != "cublas":
            t, s = k.split(" s")
            bm, bn = map(int, t.split("x")); s = int(s)
            progs = math.ceil(M / bm) * math.ceil(N / bn) * s
            fill = f"programs {progs:4d} waves {progs / sms:5.2f} fill {progs / (math.ceil(progs / sms) * sms):.2f}"
        print(f"  {k:14s} {v:.4f} ms  {base / v:.3f}x  {fill}")
    rows.append({"problem": f"{M}x{N}x{K} {dt}", "ms": med})
json.dump(rows, open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/split_probe.json", "w"), indent=1)
