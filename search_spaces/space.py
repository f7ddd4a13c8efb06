"""The generic machinery of a tuning space: parameters, constraints with reasons, candidates, defaults."""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from search_spaces.errors import AutotunerError

Config = dict[str, int]


class DeviceLimits(Protocol):
    """What constraints read from the device (autotuner.base.device.DeviceInfo provides it)."""

    @property
    def smem_per_block(self) -> int: ...

    @property
    def sm_count(self) -> int: ...


class ConfigError(AutotunerError, ValueError):
    """A config outside the space, or one that breaks a constraint."""


P = TypeVar("P", contravariant=True)  # a space for a problem type serves its subtypes too
Constraint = Callable[[Config, Any, DeviceLimits], "str | None"]


@dataclass(frozen=True)
class Param:
    name: str
    values: tuple[int, ...]
    implied: int | None = None  # the value a config that leaves this parameter out means (None: required)
    # (another parameter, its values): this one varies only where that one takes one of those values, and holds
    # its implied value elsewhere (a kernel variant's own option); the grid leaves the other combinations out
    only_with: tuple[str, tuple[int, ...]] | None = None


@dataclass(frozen=True)
class Rejection:
    config: Config
    reason: str  # every broken rule's message, joined by "; "
    rules: tuple[str, ...] = ()  # the rules it breaks: a constraint's name ("fits_smem"), "outside_space", ...


def rule_name(check: Callable[..., Any]) -> str:
    """A constraint's name in rejection counts: its function's name without leading underscores."""
    name = getattr(check, "__name__", type(check).__name__).lstrip("_")
    return "constraint" if not name or name.startswith("<") else name  # a lambda has no name of its own


def rejection_counts(rejected: list[Rejection]) -> dict[str, dict[str, Any]]:
    """How many configs broke each rule, with one message as an example: what a run keeps of its rejections
    (a config breaking two rules counts under both)."""
    counts: dict[str, dict[str, Any]] = {}
    for r in rejected:
        messages = r.reason.split("; ")
        for i, rule in enumerate(r.rules or ("constraint",)):
            entry = counts.setdefault(rule, {"count": 0, "example": messages[min(i, len(messages) - 1)]})
            entry["count"] += 1
    return counts


def counts_from_messages(messages: list[str]) -> dict[str, dict[str, Any]]:
    """Rejection counts from messages alone (rejections stored one row each before their rules were kept): keyed
    by the first reason with its numbers written as N. The same key as database migration 0005."""
    counts: dict[str, dict[str, Any]] = {}
    for message in messages:
        first = message.split("; ")[0]
        rule = re.sub(r"\d+(\.\d+)?", "N", first)[:200] or "constraint"
        counts.setdefault(rule, {"count": 0, "example": first})["count"] += 1
    return counts


@dataclass(frozen=True)
class Candidates:
    valid: list[Config]
    rejected: list[Rejection]


def config_key(config: Mapping[str, Any]) -> str:
    """One canonical string per config: sorted JSON."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Space(Generic[P]):
    """Parameters with candidate values, constraints `(config, problem, device) -> reason | None`, a default,
    and optionally seeds: configs that measured well before on some device, for a search to try early."""

    params: tuple[Param, ...]
    constraints: tuple[Constraint, ...]
    default_fn: Callable[[P, DeviceLimits], Config]
    notes: dict[str, str] = field(default_factory=dict)
    seeds_fn: Callable[[P, DeviceLimits], list[Config]] | None = None
    listed: tuple[Config, ...] = ()  # a space that is a list of configs (triton.autotune's): only these

    def __post_init__(self) -> None:
        free = {p.name for p in self.params if p.only_with is None}
        for p in self.params:
            if p.only_with is not None and (p.implied is None or p.only_with[0] not in free):
                raise ConfigError(f"parameter {p.name} varies only with {p.only_with[0]}: it needs an implied value, "
                                  "and that parameter must be one of the space's that vary everywhere")

    @classmethod
    def from_configs(cls, configs: list[Mapping[str, Any]],
                     constraints: tuple[Constraint, ...] = ()) -> Space[Any]:
        """The space of exactly these configs (a `@triton.autotune` config list); the first is the default."""
        if not configs:
            raise ConfigError("a config list needs at least one config")
        listed = tuple(dict(c) for c in configs)
        names = list(dict.fromkeys(k for c in listed for k in c))
        for i, c in enumerate(listed):
            missing = [n for n in names if n not in c]
            if missing:
                raise ConfigError(f"config {i} ({config_key(c)}) does not set {', '.join(missing)}; every config of "
                                  "a list must set the same parameters")
        params = tuple(Param(n, tuple(sorted({c[n] for c in listed}, key=_order))) for n in names)
        first = dict(listed[0])
        return cls(params=params, constraints=constraints, default_fn=lambda p, d: dict(first), listed=listed)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def grid(self) -> Iterator[Config]:
        """Every config of the space, before constraints (a new dict each)."""
        if self.listed:
            yield from (dict(c) for c in self.listed)
            return
        names = self.names
        for values in self._grid_values:
            yield dict(zip(names, values, strict=False))

    @functools.cached_property
    def _grid_values(self) -> tuple[tuple[Any, ...], ...]:
        """The grid's value tuples, made once: a sweep enumerates the space for every point."""
        at = {n: i for i, n in enumerate(self.names)}
        # (position, implied value, position of the parameter it varies with, that one's values where it varies)
        bound = [(at[p.name], p.implied, at[p.only_with[0]], frozenset(p.only_with[1]))
                 for p in self.params if p.only_with is not None]
        # The parameters before the first one a rule names vary freely: the rules are checked on the rest's
        # combinations once, and each free combination is joined to those that pass (the product's own order).
        first = min((min(i, j) for i, _, j, _ in bound), default=len(self.params))
        free = itertools.product(*(p.values for p in self.params[:first]))
        tail = [values for values in itertools.product(*(p.values for p in self.params[first:]))
                if not any(values[i - first] != implied and values[j - first] not in where
                           for i, implied, j, where in bound)]
        return tuple(head + values for head in free for values in tail)

    def violations(self, config: Mapping[str, Any], problem: P, device: DeviceLimits) -> list[str]:
        """Every reason this config cannot run on this problem and device (empty when it is valid)."""
        return [message for _, message in self.broken_rules(config, problem, device)]

    def outside(self, config: Mapping[str, Any], *, partial: bool = False) -> list[str]:
        """Why this config is not one of the space's (unknown or missing parameters, values outside their
        lists), whatever the problem and device; empty when it is. `partial`: a parameter left out is not missing
        (a stored config may leave one to the op to fill in)."""
        return [message for rule, message in self._outside(config) if not (partial and rule == "missing_parameter")]

    def _outside(self, config: Mapping[str, Any]) -> list[tuple[str, str]]:
        if not self.params:  # a generated kernel's space (a Helion kernel's): its generator checks its configs
            return []
        broken = []
        unknown = sorted(set(config) - set(self.names))
        if unknown:
            broken.append(("unknown_parameter",
                           f"unknown parameter(s) {', '.join(unknown)}; the space has {', '.join(self.names)}"))
        config = self.complete(config)
        for p in self.params:
            if p.name not in config:
                broken.append(("missing_parameter", f"{p.name} is missing"))
            elif config[p.name] not in p.values:
                broken.append(("outside_space",
                               f"{p.name}={config[p.name]!r} is outside the space; accepted: {list(p.values)}"))
        return broken

    def broken_rules(self, config: Mapping[str, Any], problem: P,
                     device: DeviceLimits) -> list[tuple[str, str]]:
        """Every rule this config breaks on this problem and device, as (rule, message); empty when valid."""
        broken = self._outside(config)
        config = self.complete(config)
        if broken or not self.params:
            return broken
        if self.listed:
            if dict(config) not in self.listed:
                return [("not_listed", f"config {config_key(config)} is not one of the {len(self.listed)} listed")]
            cfg = dict(config)
        else:
            cfg = {k: int(v) for k, v in config.items()}
        return self._constraints_broken(cfg, problem, device)

    @functools.cached_property
    def _named_constraints(self) -> tuple[tuple[str, Constraint], ...]:
        """Each constraint with its rule name, named once (enumerating a space checks every constraint on every
        config of its grid)."""
        return tuple((rule_name(check), check) for check in self.constraints)

    def _constraints_broken(self, cfg: Config, problem: P, device: DeviceLimits) -> list[tuple[str, str]]:
        return [(rule, reason) for rule, check in self._named_constraints if (reason := check(cfg, problem, device))]

    def validate(self, config: Mapping[str, Any], problem: P, device: DeviceLimits) -> Config:
        """Return the config as a plain dict, or raise ConfigError naming every broken rule."""
        reasons = self.violations(config, problem, device)
        if reasons:
            raise ConfigError(f"config {config_key(config)} is not valid for {problem}: " + "; ".join(reasons))
        config = self.complete(config)
        return {k: config[k] if self.listed else int(config[k]) for k in self.names}

    def complete(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config with every left-out parameter that has an implied value set to it."""
        return {**{p.name: p.implied for p in self.params if p.implied is not None}, **config}

    def enumerate(self, problem: P, device: DeviceLimits) -> Candidates:
        valid: list[Config] = []
        rejected: list[Rejection] = []
        for cfg in self.grid():  # complete and inside the space by construction: only the constraints to check
            broken = self._constraints_broken(cfg, problem, device)
            if broken:
                rejected.append(Rejection(cfg, "; ".join(m for _, m in broken), tuple(r for r, _ in broken)))
            else:
                valid.append(cfg)
        return Candidates(valid, rejected)

    def candidates(self, problem: P, device: DeviceLimits) -> list[Config]:
        """The valid configs for this problem on this device, after every constraint."""
        return self.enumerate(problem, device).valid

    def default(self, problem: P, device: DeviceLimits) -> Config:
        """The hand-written heuristic config; always valid (checked here)."""
        return self.validate(self.default_fn(problem, device), problem, device)

    def seeds(self, problem: P, device: DeviceLimits) -> list[Config]:
        """The seeds that are valid for this problem and device (the others are left out)."""
        seeds = self.seeds_fn(problem, device) if self.seeds_fn else []
        return [self.validate(c, problem, device) for c in seeds if not self.violations(c, problem, device)]


def _order(v: Any) -> tuple[str, Any]:
    """Sort key for parameter values of any type (ints, bools, strings) in one list."""
    return (type(v).__name__, v)


def tma_needs_hopper(c: Config, p: Any, d: DeviceLimits) -> str | None:
    """Constraint of spaces with a TMA parameter: TMA > 0 needs compute capability 9.0 (or the interpreter)."""
    cap = getattr(d, "capability", (9, 0))
    if c["TMA"] and not getattr(d, "is_interpreter", False) and cap[0] < 9:
        return f"TMA={c['TMA']} needs a Hopper or later GPU (compute capability 9.0), this one is {cap[0]}.{cap[1]}"
    return None


def hopper(d: DeviceLimits) -> bool:
    """A Hopper or later GPU (not the interpreter): where TMA configs can be seeds and defaults."""
    return not getattr(d, "is_interpreter", False) and getattr(d, "capability", (0, 0))[0] >= 9


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def pow2_range(lo: int, hi: int) -> tuple[int, ...]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return tuple(out)
