"""Where trial workers and compile-pool processes come from: a fork server that imported torch and Triton once.

A process of the `spawn` kind imports torch again (seconds each: benchmarks/RESULTS.md#behind-the-code), and a
tuning run starts a trial worker and a compile pool of up to 15 processes at once. The fork server imports torch
and Triton once, and each process is forked from it ready to work. Commands that tune (`autotuner tune`,
`autotuner worker`) call `start()` first thing, so the server imports while the command does its own imports. CUDA is never initialised
in the server (nothing it imports touches the device), so each child makes its own context, as with spawn.

A child of the server starts with the server's environment, which is the command's environment at `start()`;
`adopt(env)` gives it the parent's environment as it is when the child is made, as spawn would have.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing.context import ForkServerContext
from typing import cast

# Only these: the server must leave CUDA as it found it. Computing Triton's cache-key hash here as well (so that each
# child would inherit it instead of hashing libtriton itself, 0.7 s), in a thread during torch's import or after it,
# made every child's CUDA initialisation fail on an H100 with Triton 3.6 (benchmarks/RESULTS.md, session 22).
PRELOAD = ["torch", "triton", "triton.language"]

_started = False


def is_main_process() -> bool:
    return mp.parent_process() is None


def start() -> None:
    """Start the fork server (its imports run in the background); a no-op after the first call, and in a child."""
    global _started
    if _started or not is_main_process():
        return
    _started = True
    mp.set_forkserver_preload(PRELOAD)
    from multiprocessing import forkserver

    forkserver.ensure_running()


def context() -> ForkServerContext:
    """The context new processes come from (the fork server, started on first use if no command started it)."""
    start()
    return cast(ForkServerContext, mp.get_context("forkserver"))


_for_children: dict[str, str] = {}


def child_environment(extra: dict[str, str]) -> None:
    """Variables the children made from now on see besides this process's (autotuner.engine.compile_share)."""
    _for_children.clear()
    _for_children.update(extra)


def environment() -> dict[str, str]:
    """The environment a child should see: this process's, now, and what child_environment added."""
    return {**os.environ, **_for_children}


def adopt(env: dict[str, str]) -> None:
    """In a child: take the parent's environment (before importing anything that reads it)."""
    if env != os.environ:
        os.environ.clear()
        os.environ.update(env)


def host_share(configured: int, gpus: int) -> int:
    """Processes compiling ahead of timing for one GPU's worker: `configured` if set, else the CPU cores shared
    among the host's `gpus`, less two for each worker's own process and its trial worker: more compiling
    processes than cores slowed every worker's timing (benchmarks/RESULTS.md#behind-the-code)."""
    if configured:
        return configured
    return max(1, (os.cpu_count() or 2) // max(1, gpus) - 2)
