"""liger-kernel's DyT (two @triton.autotune kernels: 18 configs forward, 18 backward with reset_to_zero) on a
Llama-sized activation, forward and backward."""

from _common import leaf, main
from liger_kernel.ops.dyt import LigerDyTFunction


def make(seed):
    return (leaf(4096, 4096, seed=seed), leaf(1, dtype=__import__("torch").float32, seed=seed + 1),
            leaf(4096, seed=seed + 2), leaf(4096, seed=seed + 3))


def step(inputs):
    x, alpha, gamma, beta = inputs
    for t in inputs:
        t.grad = None
    y = LigerDyTFunction.apply(x, alpha, gamma, beta)
    y.float().pow(2).mean().backward()
    return {"y": y, "dx": x.grad, "dalpha": alpha.grad, "dgamma": gamma.grad, "dbeta": beta.grad}


main("liger_dyt", make, step)
