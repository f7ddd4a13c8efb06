"""A plugin op whose configs take known wall-clock times: GELU, then a host-side pause to PAUSE_US.

On the interpreter the tuner times configs by wall clock, so the pause sets each config's time: the default
(100 ms), one 20% faster and one 50% faster. The gaps are wide so that a loaded machine, whose wall clock wanders
by milliseconds, still ranks them the same (a test's margin of 40% makes the first a tie and the second a win).
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

DEFAULT_US, TIE_US, FAST_US = 100_000, 80_000, 50_000


def launch(inputs: Any, config: dict[str, Any]) -> torch.Tensor:
    """The kernel, then a pause until PAUSE_US after the start: the kernel's own jittery time is absorbed. With
    PACED_LOG set, each launch appends "pid start end pause" (wall-clock seconds, then the config's PAUSE_US) to that
    file."""
    started = time.time()
    deadline = time.perf_counter() + config["PAUSE_US"] / 1e6
    out = k_gelu.gelu(inputs["x"], {"BLOCK_SIZE": 32, "num_warps": 1, "num_stages": 1}, inputs["approximate"])
    time.sleep(max(0.0, deadline - time.perf_counter()))
    if os.environ.get("PACED_LOG"):
        with open(os.environ["PACED_LOG"], "a") as f:
            f.write(f"{os.getpid()} {started} {time.time()} {config['PAUSE_US']}\n")
    return out


# Enumerated in this order, so an exhaustive search of 2 trials measures the default and the tie only.
SPACE: Space[Any] = Space(
    params=(Param("PAUSE_US", (DEFAULT_US, TIE_US, FAST_US)), Param("num_warps", (1,)), Param("num_stages", (1,))),
    constraints=(),
    default_fn=lambda p, d: {"PAUSE_US": DEFAULT_US, "num_warps": 1, "num_stages": 1},
)

if "paced" not in op_names():  # gelu's declaration with this launcher and space
    register_op(dataclasses.replace(s_gelu.OP, name="paced", space=SPACE, launch=launch, sources=(launch,)))


# Ten configs of known times, for a job that runs long enough to be interrupted in the middle: nine of 95-55 ms and
# one clear winner of 25 ms (a loaded machine's wall clock cannot make another config look faster).
MANY_US = (*range(95_000, 50_000, -5_000), 25_000)
MANY_FASTEST_US = min(MANY_US)
MANY: Space[Any] = Space(
    params=(Param("PAUSE_US", MANY_US), Param("num_warps", (1,)), Param("num_stages", (1,))),
    constraints=(),
    default_fn=lambda p, d: {"PAUSE_US": 95_000, "num_warps": 1, "num_stages": 1},
)

if "paced_many" not in op_names():
    register_op(dataclasses.replace(s_gelu.OP, name="paced_many", space=MANY, launch=launch, sources=(launch,)))


# Two configs whose times cross between swept points, for refinement: SIDE 0 is fast (FAST_US) up to CROSS elements
# and slow (SLOW_US) above, SIDE 1 the other way round; both are fast at CROSS itself. A sweep over 4, 8, 16 finds
# 4's and 8's winners each twice as slow on the other point; the midpoint 6 (= CROSS) serves both ends.
CROSS, FAST_SWEEP_US, SLOW_SWEEP_US = 6, 20_000, 40_000


def crossing_launch(inputs: Any, config: dict[str, Any]) -> torch.Tensor:
    n = inputs["x"].numel()
    fast = n <= CROSS if config["SIDE"] == 0 else n >= CROSS
    return launch(inputs, {**config, "PAUSE_US": FAST_SWEEP_US if fast else SLOW_SWEEP_US})


CROSSING: Space[Any] = Space(
    params=(Param("SIDE", (0, 1)), Param("num_warps", (1,)), Param("num_stages", (1,))),
    constraints=(),
    default_fn=lambda p, d: {"SIDE": 0, "num_warps": 1, "num_stages": 1},
)

if "paced_crossing" not in op_names():
    register_op(dataclasses.replace(s_gelu.OP, name="paced_crossing", space=CROSSING, launch=crossing_launch,
                                    sources=(launch, crossing_launch)))


# One config whose every launch pauses two seconds: a trial (a check, warm-up, repetitions) runs well past a time
# budget of a few seconds.
SLOW: Space[Any] = Space(
    params=(Param("PAUSE_US", (2_000_000,)), Param("num_warps", (1,)), Param("num_stages", (1,))),
    constraints=(),
    default_fn=lambda p, d: {"PAUSE_US": 2_000_000, "num_warps": 1, "num_stages": 1},
)

if "paced_slow" not in op_names():
    register_op(dataclasses.replace(s_gelu.OP, name="paced_slow", space=SLOW, launch=launch, sources=(launch,)))
