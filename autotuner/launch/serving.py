"""What the service answers, independent of HTTP. `GET /config` resolves as a library launch does, minus the remote
step; device limits come from the database, and "current" is judged against the caller's kernel hash and Triton version
when it sends them."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op, UnknownOpError, get_op
from autotuner.store.interfaces import Storage
from autotuner.store.regret import expected_regret
from autotuner.store.resolution import FALLBACKS, Source, has_torch_op, resolve
from autotuner.store.rows import DeviceRow
from search_spaces.contract import ProblemType
from search_spaces.errors import AutotunerError
from search_spaces.problem import ProblemError, parse_dtype


class InputError(AutotunerError, ValueError):
    """A request value that is not accepted: names the field and what is accepted (a 422)."""

    def __init__(self, field: str, message: str, location: str = "query") -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.location = location  # query or body


class NoSuchProblem(InputError):
    """Values each valid alone that name nothing: an op's problem of another shape or with another op's option,
    or a device the database does not know (a 404)."""


class CannotRun(InputError):
    """A problem the request's schema admits that this service cannot run: beyond the kernels' 32-bit offsets,
    more than every known device's memory or the configured cap, or heads that do not group (a 409). A schema
    bounds each dimension, not their product or how two values divide, so these are refused after it."""


class AmbiguousDevice(InputError):
    """No device named, and the database knows several (a 300 listing them)."""

    def __init__(self, field: str, message: str, devices: list[str]) -> None:
        super().__init__(field, message)
        self.devices = devices


@dataclass(frozen=True, kw_only=True)
class ConfigAnswer:
    op: str
    problem: dict[str, Any]
    problem_key: str
    device: str
    config: dict[str, Any]
    source: Source
    median_ms: float | None
    default_ms: float | None
    speedup_vs_default: float | None
    torch_ms: float | None
    stale: bool
    stale_reason: str | None
    tuned_at: datetime | None
    from_problem: str | None
    result_id: int | None
    timing_problem: str | None  # the problem median_ms, default_ms, torch_ms and the speedup were measured on
    expected_regret: float | None = None  # a bucket or nearest answer: its loss against the problem's own winner,
    # measured by a sweep's cross timings on `regret_measured_on` (autotuner.store.regret)
    regret_measured_on: tuple[str, ...] = ()
    regret_basis: str | None = None  # how expected_regret was found, or that it was not measured
    launches_torch: bool = False  # the op's library call launches torch's op for this answer, not the config
    # (Resolution.launches_torch: its tune timed torch's op faster)


def device_info(row: DeviceRow) -> DeviceInfo:
    major, _, minor = row.capability.partition(".")
    return DeviceInfo(row.name, (int(major or 0), int(minor or 0)), row.sm_count, row.total_memory,
                      row.smem_per_block, "")


def op_named(op_name: str) -> Op:
    try:
        return get_op(op_name)
    except UnknownOpError as exc:
        raise InputError("op", str(exc)) from None


def default_dtype(op: Op) -> str:
    """The dtype a lookup naming none, of a shape never tuned, means: float16 for the built-in ops; a decorated
    kernel's key then holds no dtype."""
    return "" if op.kind == "kernel" else "float16"


def parse_request(op_name: str, shape: str, dtype: str, options: dict[str, Any]) -> tuple[Op, ProblemType]:
    """The op and problem a request names. InputError names a value no op accepts; NoSuchProblem names one this
    op does not take (a shape of another op's form, a dtype or option it lacks)."""
    op = op_named(op_name)
    if op.dtypes:  # a decorated kernel's dtypes are those of its tensor arguments, checked by its problem type
        try:
            parse_dtype(dtype, op.dtypes)
        except ProblemError as exc:
            raise NoSuchProblem("dtype", str(exc)) from None
    given = {k: v for k, v in options.items() if v is not None}
    for name in given:
        if name not in op.option_names:
            accepted = ", ".join(op.option_names) or "none"
            raise NoSuchProblem(name, f"{op.name} takes no option {name}; accepted: {accepted}")
    try:
        return op, op.parse_problem(shape, dtype, **given)
    except ValueError as exc:  # ProblemError: a shape of another form, an option value this op lacks
        message = str(exc)
        field = next((n for n in given if n in message), "shape")
        raise NoSuchProblem(field, message) from None


def _stored_problems(store: Storage, op: Op) -> list[ProblemType]:
    out = []
    for row in store.results(op=op.name):
        try:
            out.append(op.problem_from_dict(row.problem))
        except (TypeError, ValueError):  # stored by another version of the op
            continue
    return out


def tuned_dtype(store: Storage, op: Op, shape: str, options: dict[str, Any],
                advice: str = "name one with dtype=", builtin: bool = False) -> str | None:
    """The dtype a decorated kernel's lookup naming none means: the one this shape (else the kernel) was tuned in; None
    where nothing is, and for a built-in op unless `builtin`. Several: NoSuchProblem listing them."""
    if op.kind != "kernel" and not builtin:
        return None
    try:
        probe = op.parse_problem(shape, op.dtypes[0] if op.dtypes else "", **options)
    except ValueError:
        return None  # the request's own parse names what is wrong
    stored = _stored_problems(store, op)
    for candidates in ([p for p in stored if p.shape == probe.shape], stored if op.kind == "kernel" else []):
        dtypes = sorted({p.dtype for p in candidates})
        if len(dtypes) == 1:
            return dtypes[0]
        if len(dtypes) > 1:
            raise NoSuchProblem("dtype", f"{op.name} is tuned in {', '.join(dtypes)}: {advice}")
    return None


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else "null"


def check_key_types(store: Storage, op: Op, problem: ProblemType) -> None:
    """A decorated kernel's key values of the kinds its tuned keys hold (a number where every tuned key has a
    number); NoSuchProblem naming the first that is not."""
    if op.kind != "kernel":
        return
    kinds: dict[str, set[str]] = {}
    for p in _stored_problems(store, op):
        for name, value in getattr(p, "values", ()):
            kinds.setdefault(name, set()).add(_kind(value))
    for name, value in getattr(problem, "values", ()):
        seen = kinds.get(name)
        if seen and _kind(value) not in seen:
            raise NoSuchProblem("shape", f"{name}={value!r} is {_kind(value)}; every tuned key of {op.name} has "
                                         f"{' or '.join(sorted(seen))} there")


def pick_device(store: Storage, key: str | None) -> DeviceInfo:
    """The device a request means: the one named, or the only one the database knows."""
    devices = [device_info(d) for d in store.devices()]
    if key is None:
        if len(devices) == 1:
            return devices[0]
        if not devices:
            raise NoSuchProblem("device", "the database knows no device yet: nothing has been tuned")
        raise AmbiguousDevice("device", f"name a device: the database knows {len(devices)}",
                              [d.key for d in devices])
    for d in devices:
        if d.key == key:
            return d
    known = ", ".join(repr(d.key) for d in devices) or "none yet (tune something first)"
    raise NoSuchProblem("device", f"unknown device {key!r}; known: {known}")


def answer_config(store: Storage, op: Op, problem: ProblemType, device: DeviceInfo, *, fallback: str = "nearest",
                  kernel_hash: str | None = None, triton_version: str | None = None) -> ConfigAnswer:
    """The config to launch `problem` with on `device` (autotuner.launch.lookup.resolve, as a library launch resolves
    it, minus the service step); NotFound when `fallback` is "none" and nothing exact."""
    if fallback not in FALLBACKS:
        raise InputError("fallback", f"unknown fallback {fallback!r}; accepted: {', '.join(FALLBACKS)}")
    res = resolve(op, problem, device, store=store, fallback=fallback, kernel_hash=kernel_hash,
                  triton_version=triton_version)
    row = res.row
    speedup = None
    if row is not None and row.default_ms is not None and measured(row.default_ms) and measured(row.median_ms):
        speedup = row.default_ms / row.median_ms  # times that are times (measured: finite and positive)
    regret = expected_regret(store, op, problem, res.from_problem, device, kernel_hash, triton_version) \
        if res.source.regretted and res.from_problem else None
    pick = res.pick
    return ConfigAnswer(
        op=op.name, problem=dataclasses.asdict(problem), problem_key=problem.key, device=device.key,
        config=res.config, source=res.source, median_ms=measured(row.median_ms if row else None),
        default_ms=measured(row.default_ms if row else None),
        speedup_vs_default=round(speedup, 3) if speedup is not None else None,
        torch_ms=measured(row.torch_ms if row else None), stale=res.stale is not None,
        stale_reason=res.stale.stale_reason if res.stale else None, tuned_at=row.updated_at if row else None,
        from_problem=res.from_problem, result_id=row.id if row else None,
        timing_problem=row.problem_key if row else None,
        expected_regret=round(regret.loss, 4) if regret else
        round(pick.prediction.model_loss, 4) if pick is not None and pick.prediction.model_loss is not None else None,
        regret_measured_on=regret.measured_on if regret else (),
        regret_basis=pick.prediction.basis(pick.sweep_id) if pick is not None else
        regret_basis(res.source, res.from_problem, regret),
        launches_torch=res.launches_torch and has_torch_op(op))


def regret_basis(source: Source, from_problem: str | None, regret: Any) -> str | None:
    """How a bucket or nearest answer's expected regret was found, or that it was not measured."""
    if not source.regretted:
        return None
    if regret is None:
        return "not measured: no sweep's cross timings bracket this problem"
    if regret.measured_loss <= 0:  # one config wins both ends: what lies between was never timed
        return (f"{from_problem}'s winner loses nothing on {regret.measured_on[0]} (measured), so 0 is expected; "
                "nothing between the two points was timed, and a kernel's time can still dip between them")
    return (f"interpolated on a log scale: {from_problem}'s winner loses {regret.measured_loss:+.1%} on "
            f"{regret.measured_on[0]} (measured); this problem lies {regret.position:.0%} of the way there")


def measured(ms: float | None, digits: int = 4) -> float | None:
    """A measured time as answered: four significant digits (run-to-run noise is about 1%); None for a time that
    is not one (a row written by hand: zero, negative, infinite or NaN)."""
    if ms is None or not math.isfinite(ms) or ms <= 0:
        return None
    return round(ms, digits - 1 - math.floor(math.log10(ms)))
