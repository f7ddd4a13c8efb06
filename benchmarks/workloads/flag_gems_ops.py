"""FlagGems' own kernels (its LibTuner subclass chooses by its own run; plain @triton.autotune elsewhere) for a
few torch ops, called through flag_gems.use_gems(): mm, addmm, softmax, layer_norm, on bf16."""

import flag_gems
import torch
from _common import leaf, main


def make(seed):
    return {"a": leaf(4000, 4096, seed=seed), "b": leaf(4096, 4096, seed=seed + 1), "bias": leaf(4096, seed=seed + 2),
            "x": leaf(8192, 2048, seed=seed + 3), "w": leaf(2048, seed=seed + 4), "wb": leaf(2048, seed=seed + 5)}


def step(t):
    with torch.no_grad(), flag_gems.use_gems():
        return {"mm": torch.mm(t["a"], t["b"]), "addmm": torch.addmm(t["bias"], t["a"], t["b"]),
                "softmax": torch.softmax(t["x"], dim=-1),
                "layer_norm": torch.nn.functional.layer_norm(t["x"], (2048,), t["w"], t["wb"])}


main("flag_gems_ops", make, step)
