"""Where an attention library call's kept launch goes on a GPU: the output, the four host descriptors (Triton's
checked constructor, and built without its checks), the launcher's call with them ready, and the whole kept launch;
TMA=1 (host descriptors, Triton's launcher) and TMA=0 (pointers, torch's static launcher) at 1x2x128x64 fp16."""

from __future__ import annotations

import functools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

import autotuner  # noqa: E402, F401
from autotuner.engine.measure.timing import cpu_per_call_us, interleaved  # noqa: E402
from kernels import _direct  # noqa: E402
from kernels import attention as k_attention  # noqa: E402

FIELDS = [f for f in TensorDescriptor.__dataclass_fields__.values()]


def unchecked(base, shape, strides, block_shape):
    d = object.__new__(TensorDescriptor)
    for f in FIELDS:
        if f.default is not f.default_factory:  # (dataclasses.MISSING for both where there is none)
            setattr(d, f.name, f.default)
    d.base, d.shape, d.strides, d.block_shape = base, shape, strides, block_shape
    return d


def unchecked_four(q, o):
    B, H, S, D = q.shape
    return [unchecked(t, [B * H * S, D], [t.stride(2), 1], [64, D]) for t in (q, q, q, o)]


def main() -> None:
    q = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.float16)
    rows = {}
    for tma in (1, 0):
        cfg = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "TMA": tma, "PERSIST": 0}
        launch = k_attention.prepare(q, q, q, cfg)
        launch(q, q, q)
        launcher = next(c.cell_contents for c in launch.__closure__ if isinstance(c.cell_contents, _direct.Launcher))
        scalars = next(c.cell_contents for c in launch.__closure__
                       if isinstance(c.cell_contents, tuple) and len(c.cell_contents) > 10)
        o = torch.empty_like(q)
        descs = k_attention._host_descriptors(cfg, q, q, q, o) if tma else None
        args = (q, q, q, o, *(descs or (q, q, q, o)), *scalars)
        launcher(*args)
        torch.cuda.synchronize()
        print(f"TMA={tma}: static launch {'yes' if launcher._static is not None else 'no'}", flush=True)
        rows[f"TMA={tma} kept launch"] = lambda launch=launch: launch(q, q, q)
        rows[f"TMA={tma} launcher, arguments ready"] = lambda launcher=launcher, args=args: launcher(*args)
        if tma:
            rows["4 descriptors, checked"] = functools.partial(k_attention._host_descriptors, cfg, q, q, q, o)
            rows["4 descriptors, unchecked"] = functools.partial(unchecked_four, q, o)
    rows["new_output"] = lambda: _direct.new_output(q.shape, q.dtype, q.device)
    rows["torch sdpa"] = lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q)
    samples = interleaved(list(rows), 7, lambda name: cpu_per_call_us(rows[name], 400, 1, gpu=True))
    print("\n| part | us per call |\n|---|---|")
    for name, s in samples.items():
        print(f"| {name} | {statistics.median(s):.1f} |")


if __name__ == "__main__":
    main()
