"""Does a problem fit on a device? Checked before a run starts, so an impossible problem is refused naming the limit. A
run holds the inputs, output, float32 reference and torch's output at once: about `FOOTPRINT` times the bytes moved (on
the interpreter, within the host's memory)."""

from __future__ import annotations

import os

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from search_spaces.contract import ProblemType
from search_spaces.problem import ProblemError

FOOTPRINT = 4.0


class ProblemTooLarge(ProblemError):
    """A problem whose inputs would not fit in the device's memory."""


def host_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX host
        return 0


def memory_limit(device: DeviceInfo) -> int:
    return device.total_memory if device.total_memory > 0 else host_memory()


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def check_indexable(op: Op, problem: ProblemType) -> None:
    """Raise ProblemTooLarge when one of the problem's tensors has more elements than 32-bit offsets reach (as
    TunableOp.check_problem does at every door; kept for problems made otherwise)."""
    try:
        op.check_problem(problem)
    except ProblemError as exc:
        raise ProblemTooLarge(str(exc)) from None


def _check_memory(op: Op, problem: ProblemType, limit: int, where: str) -> None:
    if op.bytes_moved is None or limit <= 0:
        return  # no cost model, or no limit known: nothing to check against
    need = FOOTPRINT * op.bytes_moved(problem)
    if need > limit:
        raise ProblemTooLarge(
            f"{op.name} {problem.key} needs about {_size(need)} to tune (inputs, output and the float32 "
            f"reference), more than {where}: {_size(limit)}; choose a smaller shape")


def check_fits(op: Op, problem: ProblemType, device: DeviceInfo, cap_bytes: int | None = None) -> None:
    """Raise ProblemTooLarge naming the need and the limit when tuning `problem` would not fit on `device`, or
    its tensors are beyond the kernels' index range."""
    check_indexable(op, problem)
    limit = memory_limit(device)
    where = "this host's memory (the interpreter)" if device.is_interpreter else f"{device.key}'s memory"
    if cap_bytes is not None and (limit <= 0 or cap_bytes < limit):
        limit, where = cap_bytes, "the configured cap (AUTOTUNER_MAX_PROBLEM_BYTES)"
    _check_memory(op, problem, limit, where)


def check_queueable(op: Op, problem: ProblemType, device_memory: list[int], cap_bytes: int | None = None) -> None:
    """What the service checks before queueing a job for any worker: the index range, and the memory of the
    largest device the database knows (or the configured cap, if smaller or no device is known yet)."""
    check_indexable(op, problem)
    largest = max(device_memory, default=0)
    if cap_bytes is not None and (largest <= 0 or cap_bytes < largest):
        _check_memory(op, problem, cap_bytes, "the configured cap (AUTOTUNER_MAX_PROBLEM_BYTES)")
    else:
        _check_memory(op, problem, largest, "the memory of the largest device this service knows")
