"""`AutotunerError`: the root of every exception autotuner raises, so that a caller can catch all of them at once.
Each also keeps the builtin it always derived from (a bad shape is still a ValueError, a store that is away still
a RuntimeError). It sits on the ground floor so that every room, the database layer included, can derive from it.

Triton's own `AutotunerError` (triton.runtime.errors), which `autotuner.autotune` raises where Triton's autotuner
does, is Triton's type, not one of these. A worker's `JobLost` and `StopWorker` are not either: they interrupt a
job's work as Ctrl-C would, and `except Exception` must not catch them.
"""


class AutotunerError(Exception):
    """The root of autotuner's exceptions."""
