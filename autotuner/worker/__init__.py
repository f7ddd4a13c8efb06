"""`autotuner worker`: claim queued jobs and run the engine on them (`loop.Worker`) through outages and lost leases, and
take `autotuner tune` commands typed on this host (`command_socket`, standard library only: a command uses it before
importing anything heavy).

May import: `autotuner.engine`, `autotuner.store`, `autotuner.base`, `db`, the ground floor."""

from typing import Any

__all__ = ["Worker"]


def __getattr__(name: str) -> Any:
    if name == "Worker":
        from autotuner.worker.loop import Worker

        return Worker
    raise AttributeError(f"module 'autotuner.worker' has no attribute {name!r}")
