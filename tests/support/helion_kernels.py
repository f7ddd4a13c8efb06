"""Helion kernels as their authors write them (this module never imports autotuner), for tests/integration/
test_helion.py. Run as a script under `python -m autotuner run`: `tune ROWS COLS` searches (a few random configs, few
enough for Triton's interpreter) then launches; `call ROWS COLS` only launches."""

from __future__ import annotations

import sys

import helion
import helion.language as hl
import torch


@helion.kernel()
def add_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


def main(argv: list[str]) -> int:
    what, rows, cols = argv[0], int(argv[1]), int(argv[2])
    torch.manual_seed(0)
    x, y = torch.randn(rows, cols), torch.randn(rows, cols)
    if what == "tune":
        add_rows.autotune((x, y), count=3)
    out = add_rows(x, y)
    print("matches" if torch.allclose(out, x + y) else "differs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
