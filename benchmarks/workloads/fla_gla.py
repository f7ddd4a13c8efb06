"""flash-linear-attention's chunked simple GLA (many @triton.autotune kernels, several through FLA's own Autotuner
subclass, `CachedAutotuner`, whose run calls Triton's): batch 2, 2048 tokens, 8 heads of 128. Forward only: FLA
0.6.0 refuses its gated backward on Hopper under Triton >= 3.4 and < 3.7.1 (it computes wrong results there, FLA
issue #640), which is what the GPU machine has."""

import torch
from _common import leaf, main
from fla.ops.simple_gla import chunk_simple_gla


def make(seed):
    q, k, v = (leaf(2, 2048, 8, 128, seed=seed + i) for i in (1, 2, 3))
    g = torch.nn.functional.logsigmoid(leaf(2, 2048, 8, dtype=torch.float32, seed=seed + 4)).detach()
    return q, k, v, g


def step(inputs):
    q, k, v, g = inputs
    with torch.no_grad():
        o, _ = chunk_simple_gla(q, k, v, g=g, scale=128 ** -0.5)
    return {"o": o}


main("fla_gla", make, step)
