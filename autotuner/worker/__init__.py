"""`autotuner worker`: claim queued jobs from the database and run the engine on them (`loop.Worker`), through
database outages and lost leases.

May import: `autotuner.engine`, `autotuner.store`, `autotuner.base`, `db`, the ground floor.
"""

from autotuner.worker.loop import Worker

__all__ = ["Worker"]
