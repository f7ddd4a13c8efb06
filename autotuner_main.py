"""The `autotuner` command's entry point, kept free of heavy imports.

`autotuner tune` on a machine with an NVIDIA GPU needs a trial worker process and a pool of compile processes,
and each of them, like this process, spends seconds importing torch (about 5 s each on an H100 host). Started
from here, before this process imports anything heavy, those imports run side by side instead of one after
the other: the processes wait, torch imported, for the problem they are given (autotuner.runner.adopt_warm,
autotuner.compile_pool.CompilePool). Every other command starts nothing extra.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _gpus() -> int:
    """NVIDIA GPUs this process may use, without importing torch (0 where there is none)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        return len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()])
    except OSError:
        return 0


def warm_imports() -> None:
    """What every trial or compile process imports before it is told its problem."""
    import torch  # noqa: F401
    import triton  # noqa: F401

    import autotuner.compile_pool  # noqa: F401
    import autotuner.registry  # noqa: F401
    import autotuner.runner  # noqa: F401


def _noop() -> None:
    return None


def _warm_trial_worker(conn: Any) -> None:
    """A trial worker started early: imports first, then the problem from the parent, then as any other."""
    from autotuner.runner import die_with_parent

    die_with_parent()
    warm_imports()
    try:
        spec = conn.recv()
    except EOFError:
        return  # never adopted
    if spec is None:
        return
    from autotuner.runner import _worker_main

    _worker_main(conn, spec)


def _start_warm() -> dict[str, Any]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    gpus = max(1, _gpus())
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_warm_trial_worker, args=(child,), daemon=True)
    proc.start()
    child.close()
    workers = int(os.environ.get("AUTOTUNER_COMPILE_WORKERS") or 0) or max(1, ((os.cpu_count() or 2) - 2) // gpus)
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=warm_imports)
    for _ in range(workers):
        pool.submit(_noop)  # start every process now (a pool starts them as work arrives)
    return {"trial": (proc, parent), "pool": pool, "pool_workers": workers}


def main() -> None:
    argv = sys.argv[1:]
    warm = None
    if argv[:1] == ["tune"] and not {"-h", "--help"} & set(argv) and _gpus() > 0 \
            and not os.environ.get("TRITON_INTERPRET"):
        warm = _start_warm()
    from autotuner import runner
    from autotuner.cli import main as cli_main

    if warm is not None:
        runner.WARM.update(warm)
    cli_main()


if __name__ == "__main__":
    main()
