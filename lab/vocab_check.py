"""Every SYNC candidate of the softmax space on vocabulary-wide rows, the two-launch seed and a copy, each launch
timed alone (an investigation, kept in history only). Run on a GPU with the wheels on PYTHONPATH:
python3 lab/vocab_check.py."""
import os, sys, json
import torch
sys.path.insert(0, os.getcwd())
from autotuner.base.registry import get_op
from autotuner.base.device import current_device
from kernels import softmax as sm
from kernels._counters import zeroed_counters

FLUSH = torch.empty(128 * 2**20, dtype=torch.int32, device="cuda")
def timeit(fn, reps=60):
    fn(); torch.cuda.synchronize()
    ev = []
    for _ in range(reps):
        FLUSH.zero_()
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); ev.append((a, b))
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    return t[len(t) // 2] * 1000

op = get_op("softmax"); dev = current_device()
out = {}
for shape, dt in (("32x128256", "bfloat16"), ("8x151936", "float32"), ("4x262144", "bfloat16"), ("64x32000", "bfloat16"),
                  ("16x256000", "bfloat16"), ("1x128256", "float32")):
    p = op.parse_problem(shape, dt)
    x = op.make_inputs(p, "cuda")["x"]
    ref = torch.softmax(x.float(), -1)
    y = torch.empty_like(x)
    res = {"copy": timeit(lambda: y.copy_(x)), "torch.softmax": timeit(lambda: torch.softmax(x, -1))}
    cands = [c for c in op.space.candidates(p, dev) if c.get("SYNC")] + op.space.seeds(p, dev)[1:2]
    for c in cands:
        f = sm.prepare(x, c)
        z = f(x); torch.cuda.synchronize()
        err = (z.float() - ref).abs().max().item()
        left = 0
        t = timeit(lambda: f(x))
        z = f(x); torch.cuda.synchronize()
        err = max(err, (z.float() - ref).abs().max().item())
        res[f"s{c['SPLIT']} b{c['BLOCK_N']} w{c['num_warps']} st{c['num_stages']} sync{c.get('SYNC', 0)}" + (f" err {err:.1e}" if err > 2e-2 else "") + (f" LEFT {left}" if left else "")] = t
    out[f"{shape}:{dt}"] = res
    cp = res["copy"]
    print(f"\n## {shape}:{dt} copy {cp:.2f} us", flush=True)
    for k, v in sorted(res.items(), key=lambda kv: kv[1])[:8]:
        print(f"  {k:48s} {v:7.2f} us {cp / v:6.1%}")
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "vocab_check.json"), "w"), indent=1)
