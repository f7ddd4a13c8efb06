"""`AutotunerError`: the root of every exception autotuner raises, each keeping the builtin it derived from (a bad shape
is still a ValueError). On the ground floor so every room, `db` included, derives from it. Not under it: Triton's own
`AutotunerError`, and a worker's `JobLost` and `StopWorker`, which interrupt a job as Ctrl-C would."""


class AutotunerError(Exception):
    """The root of autotuner's exceptions."""
