"""Which config a launch uses when the caller gives none, for library calls, decorated kernels and `GET /config` alike:
ordered steps (`STEPS`), the first to answer wins; its `Source` says whether it is final or one to ask again later.
More: docs/design/store.md."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.store.interfaces import ResultReader
from autotuner.store.regret import Pick, inside_refined_sweep, predicted_pick, prefer_measured
from autotuner.store.stored_best import StoredBest
from search_spaces.contract import ProblemType
from search_spaces.errors import AutotunerError

FALLBACKS = ("nearest", "default", "none")


class Source(str, enum.Enum):
    """Where an answer came from (a str: JSON, the metrics' labels and `show` print its value), declared once: the
    HTTP schema's choices, whether a launching process keeps the answer (`final`), whether it is another problem's
    winner served here with an expected regret (`regretted`), and the words `show` says it in (`summary`)."""

    EXACT = "exact"
    BUCKET = "bucket"
    PREDICTED = "predicted"
    NEAREST = "nearest"
    DEFAULT = "default"

    def __str__(self) -> str:
        return self.value

    @property
    def final(self) -> bool:
        """An answer a launching process keeps; it asks again after the others."""
        return self in (Source.EXACT, Source.BUCKET)

    @property
    def regretted(self) -> bool:
        """Another problem's winner: served with what it is expected to lose here."""
        return self in (Source.BUCKET, Source.NEAREST)

    def summary(self, problem: str, device: str, from_problem: str | None, stale_reason: str | None,
                basis: str | None) -> str:
        """The answer in a sentence: where its config comes from, and whose times it carries."""
        stale = f" (a stale exact result was not used: {stale_reason})" if stale_reason else ""
        return {
            Source.EXACT: f"tuned for this problem on {device}",
            Source.BUCKET: f"no tuned result for {problem} itself{stale}; this is the result tuned for its bucket's "
                           f"representative, {from_problem}, and its times below were measured on that problem",
            Source.PREDICTED: f"no tuned result for {problem}{stale}; this config was picked by a model of a sweep's "
                              f"trials between its points, served because it beat the nearest point's winner there: "
                              f"{basis}",
            Source.NEAREST: f"no tuned result for {problem}{stale}; this is the best config of the nearest tuned "
                            f"problem, {from_problem}, and its times below were measured on that problem, not this "
                            "one",
            Source.DEFAULT: f"nothing tuned applies to {problem} on {device}{stale}; this is the space default",
        }[self]


FINAL = frozenset(s for s in Source if s.final)  # answers a launching process keeps; the others it asks again
TORCH_MARGIN = 0.02  # torch's op serves a library call only where its tune timed it this much faster or more:
# within it the two are a tie of run-to-run noise (about 1%), and the tuned kernel serves


def torch_faster(torch_ms: float | None, best_ms: float | None) -> bool:
    """Whether torch's op ran more than TORCH_MARGIN faster than the best config, both times being times (finite
    and positive: a row written by hand may hold anything)."""
    if torch_ms is None or best_ms is None or not (math.isfinite(torch_ms) and math.isfinite(best_ms)):
        return False
    return 0 < torch_ms < best_ms * (1 - TORCH_MARGIN)


def has_torch_op(op: Op) -> bool:
    """Whether `op`'s library call can launch torch's op instead of a config (`LibraryCall.torch_op`)."""
    return op.library is not None and op.library.torch_op is not None


AnsweredBy = Literal["database", "service", "nearest", "default"]


class NotFound(AutotunerError, LookupError):
    def __init__(self, message: str, stale: StoredBest | None = None) -> None:
        super().__init__(message)
        self.stale = stale  # an exact result of another kernel hash or Triton version, not served


@dataclass(frozen=True, kw_only=True)
class Resolution:
    config: dict[str, Any]
    source: Source
    step: AnsweredBy  # where the answer came from: the database, the service, nearest or the default
    reason: str
    trace: tuple[str, ...] = field(default_factory=tuple)
    row: StoredBest | None = None  # the stored result whose times come with the answer (exact or nearest)
    from_problem: str | None = None
    stale: StoredBest | None = None  # an exact result that was not served: another kernel hash or Triton
    median_ms: float | None = None  # for an exact answer from the service, which sends no row
    torch_ms: float | None = None  # the same answer's torch time, from the service
    between_points: bool = False  # served by a refined or predicting sweep's rule: its bucket's result would not
    pick: Pick | None = None  # a predicted answer: the sweep's model's pick, and what it was measured at

    @property
    def final(self) -> bool:
        """An answer to keep: tuned for this problem (or its bucket's representative), not one to ask again for."""
        return self.source in FINAL

    @property
    def launches_torch(self) -> bool:
        """Whether a library call launches torch's own op (the op's baseline) instead of `config`: a final answer
        whose tune timed torch's op more than TORCH_MARGIN faster than its best config. Times a GPU measured only:
        an interpreter's tune stores no torch time (its wall-clock is no GPU's speed)."""
        if not self.final:
            return False
        if self.row is not None:
            return torch_faster(self.row.torch_ms, self.row.median_ms)
        return torch_faster(self.torch_ms, self.median_ms)


class Asker(Protocol):
    """The remote service a launching process asks (autotuner.launch.service_client.Service)."""

    def ask(self, op: Op, problem: ProblemType, device: DeviceInfo) -> tuple[Resolution | None, str]: ...


@dataclass
class Query:
    """One resolution's question, and what its steps learnt on the way (the trace, a stale exact result, the
    refined sweep the problem lies in)."""

    op: Op
    problem: ProblemType
    device: DeviceInfo
    store: ResultReader | None
    store_error: str | None
    service: Asker | None
    fallback: str
    kernel_hash: str | None
    triton_version: str | None
    trace: list[str] = field(default_factory=list)
    stale: StoredBest | None = None
    inside: tuple[str, str] | None = None

    def answer(self, config: dict[str, Any], source: Source, step: AnsweredBy, reason: str, **more: Any) -> Resolution:
        return Resolution(config=config, source=source, step=step, reason=reason, trace=tuple(self.trace),
                          stale=self.stale, **more)

    def valid(self, config: dict[str, Any]) -> bool:
        return not self.op.space.violations(config, self.problem, self.device)


def exact(q: Query) -> Resolution | None:
    if q.store is None:
        q.trace.append(f"database: unavailable ({q.store_error})")
        return None
    best = q.store.best(op=q.op, problem=q.problem, device=q.device, kernel_hash=q.kernel_hash,
                        triton_version=q.triton_version)
    # a row this op cannot launch (imported or written by hand) is never served; a decorated kernel's stored winner
    # is judged by the kernel itself (its list, pruning and constraints: decorator.miss)
    broken = q.op.space.outside(best.config) if best is not None and not best.stale and q.op.kind != "kernel" else []
    if broken:
        q.trace.append(f"database: the stored config is not valid here ({'; '.join(broken)[:200]})")
        best = None
    if best is not None and not best.stale:
        q.trace.append("database: exact")
        return q.answer(best.config, Source.EXACT, "database", f"tuned {q.problem.key} on {q.device.key}", row=best,
                        from_problem=q.problem.key)
    q.stale = best
    q.trace.append(f"database: stale result ignored ({best.stale_reason})" if best
                   else "database: no result for this problem")
    return None


def predicted(q: Query) -> Resolution | None:
    if q.store is None or q.fallback != "nearest":
        return None
    pick = predicted_pick(q.store, q.op, q.problem, q.device, q.kernel_hash, q.triton_version)
    if pick is None:
        return None
    if not q.valid(pick.config):
        q.trace.append(f"database: sweep {pick.sweep_id}'s predicted pick is not valid here")
        return None
    q.trace.append(f"database: the pick of sweep {pick.sweep_id}'s model ({pick.prediction.why})")
    return q.answer(pick.config, Source.PREDICTED, "database", f"picked by the model of sweep {pick.sweep_id}'s "
                    "trials", between_points=True, pick=pick)


def bucket(q: Query) -> Resolution | None:
    rep = q.problem.bucket()
    if q.store is None or rep == q.problem:
        return None
    if q.fallback == "nearest":
        q.inside = inside_refined_sweep(q.store, q.op, q.problem, q.device, q.kernel_hash, q.triton_version)
    if q.inside is not None:
        q.trace.append(f"database: between swept points {q.inside[0]} and {q.inside[1]} of a refined sweep: its "
                       "rule, not the bucket")
        return None
    held = q.store.best(op=q.op, problem=rep, device=q.device, kernel_hash=q.kernel_hash,
                        triton_version=q.triton_version)
    if held is not None and not held.stale and q.valid(held.config):
        q.trace.append(f"database: {rep.key}, this problem's bucket")
        return q.answer(held.config, Source.BUCKET, "database",
                        f"tuned for {rep.key}, the representative of this problem's bucket", row=held,
                        from_problem=rep.key)
    q.trace.append(f"database: nothing current for its bucket {rep.key}")
    return None


def service(q: Query) -> Resolution | None:
    if q.service is None:
        return None
    remote, note = q.service.ask(q.op, q.problem, q.device)
    q.trace.append(note)
    if remote is None:
        return None
    return q.answer(remote.config, remote.source, "service", remote.reason, from_problem=q.problem.key,
                    median_ms=remote.median_ms, torch_ms=remote.torch_ms)


def give_up(q: Query) -> Resolution | None:
    if q.fallback == "none":
        why = f"only a stale result ({q.stale.stale_reason})" if q.stale else "no tuned result"
        raise NotFound(f"{why} for {q.op.name} {q.problem.key} on {q.device.key}", q.stale)
    return None


def nearest(q: Query) -> Resolution | None:
    if q.fallback != "nearest" or q.store is None:
        return None
    ranked = q.store.nearest(op=q.op, problem=q.problem, device=q.device, kernel_hash=q.kernel_hash,
                             triton_version=q.triton_version)
    for other, row in prefer_measured(q.store, q.op, q.problem, q.device, ranked, q.kernel_hash, q.triton_version):
        if q.valid(row.config):
            q.trace.append(f"nearest: {other.key}")
            return q.answer(row.config, Source.NEAREST, "nearest",
                            f"best config of the nearest tuned problem {other.key}", row=row,
                            from_problem=other.key, between_points=q.inside is not None)
        q.trace.append(f"nearest: {other.key}'s config is not valid here")
    return None


def default(q: Query) -> Resolution:
    q.trace.append("default: the space's heuristic")
    return q.answer(q.op.space.default(q.problem, q.device), Source.DEFAULT, "default", "no tuned result to use")


@dataclass(frozen=True)
class Step:
    """A resolution step as it describes itself: its name, the sources it may answer with (each of which says
    whether it is final, whether it is regretted, and how `show` words it), what it does, and the function that
    answers or passes (None)."""

    name: str
    sources: tuple[Source, ...]
    does: str
    ask: Callable[[Query], Resolution | None]

    def __call__(self, q: Query) -> Resolution | None:
        return self.ask(q)


STEPS: tuple[Step, ...] = (
    Step("exact", (Source.EXACT,), "the current result tuned for this problem on this device", exact),
    Step("predicted", (Source.PREDICTED,), "between a sweep's points, its model's pick where it beat nearest", predicted),
    Step("bucket", (Source.BUCKET,), "the result of the problem's bucket's representative", bucket),
    Step("service", (Source.EXACT, Source.BUCKET), "the service's exact answer (AUTOTUNER_URL)", service),
    Step("give_up", (), "fallback=none: stop here, nothing exact is known", give_up),
    Step("nearest", (Source.NEAREST,), "the winner of the nearest tuned problem (fallback=nearest)", nearest),
    Step("default", (Source.DEFAULT,), "the space's default config", default),
)
WARM_STEPS = tuple(s for s in STEPS if s.name in ("exact", "predicted", "bucket", "nearest"))  # a tuning's warm
# start asks these (no service, no default)


def warm_start(op: Op, problem: ProblemType, device: DeviceInfo, store: ResultReader) -> list[dict[str, Any]]:
    """The configs a tuning of `problem` measures first: each of `WARM_STEPS`' answer (an exact result, else the
    stale one it remembered; a sweep model's pick; the bucket's result; the nearest problem's winner), in their
    order, without repeats."""
    configs: list[dict[str, Any]] = []
    for step in WARM_STEPS:
        q = Query(op, problem, device, store, None, None, "nearest", None, None)
        answer = step(q)
        for config in (answer.config if answer is not None else None, q.stale.config if q.stale else None):
            if config is not None and config not in configs:
                configs.append(dict(config))
    return configs


def resolve(op: Op, problem: ProblemType, device: DeviceInfo, *, store: ResultReader | None,
            store_error: str | None = None, service: Asker | None = None, fallback: str = "nearest",
            kernel_hash: str | None = None, triton_version: str | None = None) -> Resolution:
    """The config to launch `problem` with on `device`, and where it came from: the first of `STEPS` to answer.
    NotFound when `fallback` is "none" and nothing exact is known."""
    if fallback not in FALLBACKS:
        raise ValueError(f"unknown fallback {fallback!r}; accepted: {', '.join(FALLBACKS)}")
    q = Query(op, problem, device, store, store_error, service, fallback, kernel_hash, triton_version)
    for step in STEPS:
        answer = step(q)
        if answer is not None:
            return answer
    raise AssertionError("the default step always answers")  # pragma: no cover
