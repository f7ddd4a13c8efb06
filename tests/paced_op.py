"""A plugin op whose configs take known wall-clock times: GELU, then a host-side pause to PAUSE_US.

On the interpreter the tuner times configs by wall clock, so the pause sets each config's time: the default
(100 ms), one 0.5% faster (a tie, within the tuner's DEFAULT_MARGIN) and one 30% faster (a real win).
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

DEFAULT_US, TIE_US, FAST_US = 100_000, 99_500, 70_000


def launch(inputs: Any, config: dict[str, Any]) -> torch.Tensor:
    """The kernel, then a pause until PAUSE_US after the start: the kernel's own jittery time is absorbed. With
    PACED_LOG set, each launch appends "pid start end" (wall-clock seconds) to that file."""
    started = time.time()
    deadline = time.perf_counter() + config["PAUSE_US"] / 1e6
    out = k_gelu.gelu(inputs["x"], {"BLOCK_SIZE": 32, "num_warps": 1, "num_stages": 1}, inputs["approximate"])
    time.sleep(max(0.0, deadline - time.perf_counter()))
    if os.environ.get("PACED_LOG"):
        with open(os.environ["PACED_LOG"], "a") as f:
            f.write(f"{os.getpid()} {started} {time.time()}\n")
    return out


# Enumerated in this order, so an exhaustive search of 2 trials measures the default and the tie only.
SPACE: Space[Any] = Space(
    params=(Param("PAUSE_US", (DEFAULT_US, TIE_US, FAST_US)), Param("num_warps", (1,)), Param("num_stages", (1,))),
    constraints=(),
    default_fn=lambda p, d: {"PAUSE_US": DEFAULT_US, "num_warps": 1, "num_stages": 1},
)

if "paced" not in op_names():  # gelu's declaration with this launcher and space
    register_op(dataclasses.replace(s_gelu.OP, name="paced", space=SPACE, launch=launch, sources=(launch,)))


# Many configs of known times (50-95 ms), for a job that runs long enough to be interrupted in the middle.
MANY: Space[Any] = Space(
    params=(Param("PAUSE_US", tuple(range(95_000, 45_000, -5_000))), Param("num_warps", (1,)),
            Param("num_stages", (1,))),
    constraints=(),
    default_fn=lambda p, d: {"PAUSE_US": 95_000, "num_warps": 1, "num_stages": 1},
)

if "paced_many" not in op_names():
    register_op(dataclasses.replace(s_gelu.OP, name="paced_many", space=MANY, launch=launch, sources=(launch,)))
