"""A small block under torch.compile, as a user writes it (this module never imports autotuner), for
tests/integration/test_inductor_cache.py: prints whether the compiled output matches eager, and Inductor's counters
(its FX graph cache's hits and misses among them) as JSON."""

from __future__ import annotations

import json

import torch
from torch._dynamo.utils import counters


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w).softmax(-1)


if __name__ == "__main__":
    torch.manual_seed(0)
    x, w = torch.randn(16, 32), torch.randn(32, 32)
    out = torch.compile(block)(x, w)
    print(json.dumps({"matches": bool(torch.allclose(out, block(x, w), atol=1e-5)),
                      "inductor": dict(counters["inductor"])}))
