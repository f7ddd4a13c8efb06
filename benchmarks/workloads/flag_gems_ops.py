"""FlagGems' own kernels (its LibTuner subclass chooses by its own run; plain @triton.autotune elsewhere) for a
few torch ops, called through flag_gems.use_gems(): mm, addmm, softmax, layer_norm, on bf16."""

import flag_gems
import torch
from _common import leaf, run

a, b = leaf(4000, 4096, seed=1), leaf(4096, 4096, seed=2)
bias = leaf(4096, seed=3)
x = leaf(8192, 2048, seed=4)
w, wb = leaf(2048, seed=5), leaf(2048, seed=6)


def step():
    with torch.no_grad(), flag_gems.use_gems():
        return {"mm": torch.mm(a, b), "addmm": torch.addmm(bias, a, b), "softmax": torch.softmax(x, dim=-1),
                "layer_norm": torch.nn.functional.layer_norm(x, (2048,), w, wb)}


run("flag_gems_ops", step)
