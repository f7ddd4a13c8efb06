"""Probe: torch's static launcher given tensors (data_ptr() and cuPointerGetAttribute per pointer, in C++) against
given the pointers as ints."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch

import autotuner  # noqa: F401
from autotuner.engine.measure.timing import cpu_per_call_us, interleaved
from kernels import _direct
from kernels import matmul as km
from kernels import softmax as ks

seen = []
orig = _direct.Launcher._through_triton


def spy(self, grid, args):
    out = orig(self, grid, args)
    seen.append((self, args))
    return out


_direct.Launcher._through_triton = spy
x = torch.randn(64, 1024, device="cuda", dtype=torch.float16)
ks.prepare(x, {"BLOCK_N": 1024, "ROWS": 1, "num_warps": 4, "num_stages": 1})(x)
a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
km.prepare(a, a, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4, "num_stages": 2})(a, a, None)
torch.cuda.synchronize()
rows = {}
stream = torch._C._cuda_getCurrentRawStream
for name, (ln, args) in zip(("softmax", "matmul"), seen, strict=False):
    st = ln._static
    assert st is not None, name
    launch, fn, warps, shared, types, values, slots = st
    g = (*ln.grid, 1, 1)[:3]

    def place(call, values=values, slots=slots):
        packed = list(values)
        for slot, pos in slots:
            packed[slot] = call[pos]
        return tuple(packed)

    full = place(args)
    ints = tuple(v.data_ptr() if isinstance(v, torch.Tensor) else v for v in full)
    print(name, types, len(full), [type(v).__name__ for v in full])
    rows[f"{name} tensors"] = lambda launch=launch, fn=fn, w=warps, s=shared, t=types, p=full, g=g: \
        launch(fn, *g, w, s, t, p, stream(0))
    rows[f"{name} ints"] = lambda launch=launch, fn=fn, w=warps, s=shared, t=types, p=ints, g=g: \
        launch(fn, *g, w, s, t, p, stream(0))
    rows[f"{name} ints+data_ptr"] = lambda launch=launch, fn=fn, w=warps, s=shared, t=types, p=full, g=g: \
        launch(fn, *g, w, s, t, tuple([v.data_ptr() if isinstance(v, torch.Tensor) else v for v in p]), stream(0))
rows["torch.softmax"] = lambda: torch.softmax(x, -1)
res = interleaved(list(rows), 9, lambda k: cpu_per_call_us(rows[k], 400, 1, gpu=True))
for k, v in res.items():
    print(f"{k:28s} {sorted(v)[len(v) // 2]:.2f} us")
