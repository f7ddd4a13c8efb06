"""Investigation (to be deleted once written down): attention's seed configs with and without WS=1, against SDPA."""
import functools, statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch
from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.engine.timing import time_cuda

op = get_op("attention")
dev = current_device()
for shape, dtype, causal in [("4x32x2048x128", "float16", True), ("4x32x2048x128", "float16", False),
                             ("1x16x8192x64", "bfloat16", True), ("8x16x4096x64", "bfloat16", True)]:
    p = op.parse_problem(shape, dtype, causal=causal)
    inputs = op.make_inputs(p, dev.torch_device)
    ref = op.reference(inputs)
    runs = {"sdpa": functools.partial(op.baseline, inputs)}
    for i, c in enumerate(op.space.seeds(p, dev)):
        for ws in (0, 1):
            cfg = {**c, "WS": ws}
            name = f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']} WS{ws}"
            try:
                r = op.check(op.run(inputs, cfg), ref, p)
                torch.cuda.synchronize()
            except Exception as exc:
                print(shape, causal, name, "FAILED", type(exc).__name__, str(exc)[:200], flush=True)
                continue
            if not r.ok:
                print(shape, causal, name, "WRONG", r.message, flush=True)
                continue
            runs[name] = functools.partial(op.run, inputs, cfg)
    t = {k: [] for k in runs}
    for _ in range(3):
        for k, fn in runs.items():
            t[k].append(time_cuda(fn).median_ms)
    sd = statistics.median(t["sdpa"])
    print(f"{shape} {dtype} causal={causal}: sdpa {sd:.4f} ms; " + "; ".join(
        f"{k} {sd / statistics.median(v):.3f}x" for k, v in t.items() if k != "sdpa"), flush=True)
