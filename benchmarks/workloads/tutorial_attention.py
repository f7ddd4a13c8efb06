"""The Triton tutorial's fused attention (06-fused-attention.py: @triton.autotune over its TMA forward, a config
pre_hook that sets the descriptors' block shapes), forward and backward, causal, fp16, head_dim 64, 32 heads at
2048 and 4096 tokens (two keys). Batch 1: that version of the tutorial offsets each batch's rows as if there were one
(offset_y = off_z + off_h * N_CTX), so with more its forward leaves rows unwritten. The tutorial is not part of this repository: TUTORIAL_ATTENTION names the file
(default .whl/tutorial/fused_attention.py, carried to the GPU beside the wheels; RESULTS.md names its commit)."""

import importlib.util
import os
from pathlib import Path

from _common import leaf, main

path = Path(os.environ.get("TUTORIAL_ATTENTION", Path(__file__).resolve().parents[2] / ".whl/tutorial/fused_attention.py"))
spec = importlib.util.spec_from_file_location("fused_attention", path)
if spec is None or spec.loader is None:
    raise SystemExit(f"no tutorial at {path} (TUTORIAL_ATTENTION names it)")
tutorial = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tutorial)

import torch  # noqa: E402


def make(seed):
    return {n: [leaf(1, 32, n, 64, dtype=torch.float16, scale=0.5, seed=seed + s) for s in (1, 2, 3)]
            for n in (2048, 4096)}


def step(inputs):
    out = {}
    for n, (q, k, v) in inputs.items():
        for t in (q, k, v):
            t.grad = None
        o = tutorial.attention(q, k, v, True, 0.125)
        o.float().pow(2).mean().backward()
        out.update({f"o{n}": o, f"dq{n}": q.grad, f"dk{n}": k.grad, f"dv{n}": v.grad})
    return out


main("tutorial_attention", make, step)
