"""How to search one problem (`Plan`), and what a plan decides before the search: the device, the further GPUs
measuring with it, and how many processes compile ahead.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotuner.base.device import DeviceInfo, current_device
from autotuner.base.registry import Op
from autotuner.base.settings import Settings
from autotuner.engine.measure.live import host_compile_workers
from autotuner.engine.search.strategies import StrategyLike
from kernels._backend import cuda_device_count, interpreting
from search_spaces.contract import ProblemType
from search_spaces.space import Config

SEARCH_SHARE = 0.75  # of the time left under a deadline when the search starts; the re-time and the record take the rest
# A config replaces the default only when its re-time beats the default's by more than this fraction: a config a
# hair ahead of the default in one timing is as often behind it in the next.
DEFAULT_MARGIN = 0.01


def compile_workers(settings: Settings, device: DeviceInfo, op: Op, problem: ProblemType, gpus: int = 1) -> int:
    """The host's share (`host_compile_workers`; for a problem measured on `gpus` GPUs, their shares, and the
    core each further GPU's worker process would have had: one command drives them all), and no more than half
    the device's memory holds copies of the inputs (each process launches the kernel on its own)."""
    if device.is_interpreter:
        return 0  # the interpreter has nothing to compile
    n = host_compile_workers(settings)
    if not settings.compile_workers:
        n = n * gpus + (gpus - 1)
    if not settings.compile_workers and op.bytes_moved is not None and device.total_memory > 0:
        n = min(n, max(1, int(device.total_memory / 2 // max(1.0, op.bytes_moved(problem)))))
    return n


def plan_device(plan: Plan) -> int | None:
    """The problem's CUDA device under `plan.gpus` (its first), or None: the current one (or the interpreter)."""
    return plan.gpus[0] if plan.gpus and not interpreting() else None


def more_devices(device: DeviceInfo, gpus: tuple[int, ...]) -> list[int | None]:
    """The devices of `gpus` other than the problem's `device` (which must be the first), each checked to be of
    the same type (a config's time must not depend on which GPU measured it); on the interpreter, one more CPU
    process per further entry."""
    if len(gpus) <= 1:
        return []
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"--gpus names a device twice: {','.join(map(str, gpus))}")
    if device.is_interpreter:
        return [None] * (len(gpus) - 1)
    count = cuda_device_count()
    missing = [g for g in gpus if not 0 <= g < count]
    if missing:
        raise ValueError(f"--gpus: no CUDA device {missing[0]} here (this host shows {count}: 0-{count - 1})")
    if gpus[0] != device.index:
        raise ValueError(f"the problem's device {device.torch_device} must come first in --gpus, got {','.join(map(str, gpus))}")
    others: list[int | None] = []
    for g in gpus[1:]:
        other = current_device(g)
        if other.key != device.key:
            raise ValueError(f"--gpus: cuda:{g} is {other.key}, the problem's device is {device.key}; every config's "
                             "time must come from one device type")
        others.append(g)
    return others


@dataclass(frozen=True, kw_only=True)
class Plan:
    """How to search one problem."""

    strategy: StrategyLike = "tpe"  # a registered name (autotuner.engine.search.strategies: tpe, random, exhaustive, a
    # plugin's), or through the Python API an Optuna sampler or a function making a Search
    trials: int | None = None  # configs to measure; default: up to 64 (with no time budget)
    time_budget_s: float | None = None  # seconds of searching, counted from the search phase's start
    deadline: float | None = None  # time.monotonic() by which the whole command ends (`--time-budget`): the search
    # gets SEARCH_SHARE of what is left when it starts, the re-time the rest, in whole rounds
    seed: int = 0
    candidates: tuple[Config, ...] | None = None  # only these of the space's valid configs (a pruned config list)
    first: tuple[Config, ...] = ()  # measured right after the default, before the nearest winners and the search's
    # own: the configs fastest on a sweep's points either side (autotuner.store.regret.bracketing_configs)
    reuse: bool = False  # configs measured before (same kernel hash and Triton version) count as measured: only
    # the others are timed, the winner is chosen among all, and there is no re-time (autotuner.autotune kernels,
    # so that adding a config to a list times only that one)
    margin: float = DEFAULT_MARGIN  # a config replaces the default only when its re-time is faster by more than
    # this fraction of the default's
    gpus: tuple[int, ...] = ()  # CUDA devices measuring this problem's configs at once, the first being the
    # problem's device (baseline and re-time); empty: the device alone. On the interpreter: that many processes

    def __post_init__(self) -> None:
        if not 0.0 <= self.margin < 1.0:
            raise ValueError(f"the margin is a fraction of the default's time, 0 or more and below 1; got {self.margin}")
