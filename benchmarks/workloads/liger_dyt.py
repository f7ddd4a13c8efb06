"""liger-kernel's DyT (two @triton.autotune kernels: 18 configs forward, 18 backward with reset_to_zero) on a
Llama-sized activation, forward and backward."""

from _common import leaf, run
from liger_kernel.ops.dyt import LigerDyTFunction

x = leaf(4096, 4096)
alpha = leaf(1, dtype=__import__("torch").float32, seed=1)
gamma, beta = leaf(4096, seed=2), leaf(4096, seed=3)


def step():
    for t in (x, alpha, gamma, beta):
        t.grad = None
    y = LigerDyTFunction.apply(x, alpha, gamma, beta)
    y.float().pow(2).mean().backward()
    return {"y": y, "dx": x.grad, "dalpha": alpha.grad, "dgamma": gamma.grad, "dbeta": beta.grad}


run("liger_dyt", step)
