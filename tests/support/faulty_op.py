"""A plugin op for fault injection: its MODE parameter makes a trial succeed, crash, hang, hit an
(emulated) illegal memory access, return a wrong result, or fail to compile.

The worker process imports this module through `Settings.plugins`, exactly as a user's plugin would be.
On the interpreter there is no GPU to fault, so the illegal access is raised the way PyTorch surfaces
one (a RuntimeError carrying CUDA's message); the crash and the hang are real (the process exits, or
sleeps past the trial timeout).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import torch

from autotuner.base.registry import op_names, register_op
from kernels import gelu as k_gelu
from search_spaces import gelu as s_gelu
from search_spaces.space import Param, Space

OK, CRASH, HANG, ILLEGAL, WRONG, COMPILE = range(6)


class CompilationError(Exception):
    """Stands in for triton.compiler.errors.CompilationError (classified by name)."""


def launch(inputs: Any, config: dict[str, Any]) -> torch.Tensor:
    x, approximate = inputs["x"], inputs["approximate"]
    mode = config["MODE"]
    if mode == CRASH:
        os._exit(3)
    if mode == HANG:
        time.sleep(3600)
    if mode == ILLEGAL:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    if mode == COMPILE:
        raise CompilationError("at 3:4: unsupported operation")
    out = k_gelu.gelu(x, {"BLOCK_SIZE": config["BLOCK_SIZE"], "num_warps": 1, "num_stages": 1}, approximate)
    return out * 1.5 if mode == WRONG else out


def _only_ok_tiles(c: dict[str, int], p: Any, d: Any) -> str | None:
    return "faulty modes use BLOCK_SIZE=128" if c["MODE"] != OK and c["BLOCK_SIZE"] != 128 else None


SPACE: Space[Any] = Space(
    params=(Param("MODE", (OK, CRASH, HANG, ILLEGAL, WRONG, COMPILE)), Param("BLOCK_SIZE", (128, 256)),
            Param("num_warps", (1,)), Param("num_stages", (1,))),
    constraints=(_only_ok_tiles,),
    default_fn=lambda p, d: {"MODE": OK, "BLOCK_SIZE": 128, "num_warps": 1, "num_stages": 1},
)

if "faulty" not in op_names():  # gelu's declaration with this launcher and space
    register_op(dataclasses.replace(s_gelu.OP, name="faulty", space=SPACE, launch=launch, sources=(launch,)))


def _unbuildable(problem: Any, device: str) -> dict[str, Any]:
    """Inputs that can never be made: every tuning attempt of the `broken` op fails at setup."""
    raise RuntimeError(f"cannot allocate inputs for {problem.key} (injected failure)")


if "broken" not in op_names():
    register_op(dataclasses.replace(s_gelu.OP, name="broken", space=SPACE, launch=launch, make_inputs=_unbuildable,
                                    sources=(launch,)))


def _too_large(problem: Any, device: str) -> dict[str, Any]:
    """A real allocation far beyond any host's memory (the op declares no cost model, so nothing refused it
    earlier): the trial worker's setup meets the allocator's own out-of-memory error."""
    torch.empty(problem.n * 10**6, dtype=torch.uint8, device=device)
    raise AssertionError("the allocation above cannot succeed")


if "huge" not in op_names():
    register_op(dataclasses.replace(s_gelu.OP, name="huge", space=SPACE, launch=launch, make_inputs=_too_large,
                                    sources=(launch,), bytes_moved=None, elements=None))
