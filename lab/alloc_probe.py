"""Probe: CPU us per output allocation on CUDA, each way."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch

import autotuner  # noqa: F401
from autotuner.engine.measure.timing import cpu_per_call_us, interleaved
from kernels import _direct

d = torch.device("cuda", 0)
shape, dt = (64, 1024), torch.float16
tmpl = torch.empty((), dtype=dt, device=d).expand(shape)
f = torch._C._dynamo.guards._empty_strided_cuda
rows = {"torch.empty": lambda: torch.empty(shape, dtype=dt, device=d),
        "empty_like(template)": lambda: torch.empty_like(tmpl),
        "_empty_strided_cuda": lambda: f(shape, (1024, 1), dt),
        "new_output (this tree)": lambda: _direct.new_output(shape, dt, d),
        "getDevice": lambda: torch._C._cuda_getDevice()}
res = interleaved(list(rows), 7, lambda k: cpu_per_call_us(rows[k], 2000, 1, gpu=True))
for k, v in res.items():
    print(f"{k:24s} {sorted(v)[len(v)//2]:.2f} us")
