"""flash-linear-attention's l2norm, forward and backward (FLA's kernels launched with every argument by keyword,
some through its CachedAutotuner) on 8 MiB activations: 4096 rows of 1024 bf16."""

from _common import leaf, main
from fla.modules.norm.l2norm import l2norm


def make(seed):
    return leaf(4096, 1024, seed=seed)


def step(x):
    x.grad = None
    y = l2norm(x)
    y.float().pow(2).mean().backward()
    return {"y": y, "dx": x.grad}


main("fla_l2norm", make, step)
