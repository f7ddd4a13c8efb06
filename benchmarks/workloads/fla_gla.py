"""flash-linear-attention's chunked simple GLA (many @triton.autotune kernels, several through FLA's own
Autotuner subclass) forward and backward: batch 2, 2048 tokens, 8 heads of 128."""

import torch
from _common import leaf, run
from fla.ops.simple_gla import chunk_simple_gla

q, k, v = leaf(2, 2048, 8, 128, seed=1), leaf(2, 2048, 8, 128, seed=2), leaf(2, 2048, 8, 128, seed=3)
g = torch.nn.functional.logsigmoid(leaf(2, 2048, 8, dtype=torch.float32, seed=4)).detach().requires_grad_()


def step():
    for t in (q, k, v, g):
        t.grad = None
    o, _ = chunk_simple_gla(q, k, v, g=g, scale=128 ** -0.5)
    o.float().pow(2).mean().backward()
    return {"o": o, "dq": q.grad, "dk": k.grad, "dv": v.grad, "dg": g.grad}


run("fla_gla", step)
