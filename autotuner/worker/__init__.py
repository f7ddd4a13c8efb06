"""`autotuner worker`: claim queued jobs from the database and run the engine on them (`loop.Worker`), through
database outages and lost leases; and take `autotuner tune` commands typed on the same host (`command_socket`).

May import: `autotuner.engine`, `autotuner.store`, `autotuner.base`, `db`, the ground floor. `command_socket` imports only
the standard library (and platformdirs): a command uses it before importing anything heavy, so `Worker` loads on
first use.
"""

from typing import Any

__all__ = ["Worker"]


def __getattr__(name: str) -> Any:
    if name == "Worker":
        from autotuner.worker.loop import Worker

        return Worker
    raise AttributeError(f"module 'autotuner.worker' has no attribute {name!r}")
