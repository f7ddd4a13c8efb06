"""The project's search over a Helion kernel's config space, as one of Helion's own searches (a `BaseSearch`, so
Helion compiles, checks and times every config exactly as in its own searches; only the choice of configs is ours).

The `tpe` strategy of engine/search/tpe.py, carried to a space that is not a finite list: Helion's flat config spec
(block sizes, warps, stages, enumerations, permutations, lists of them) is a product too large to enumerate, so
- the knobs that shape the kernel (EXPLORED: tile sizes, loop order, warps, stages, indexing, program ids), each
  fragment of them with finitely many values, are the dimensions of Optuna's multivariate TPE (its values'
  indices), which proposes the first EXPLORE_FRACTION of the budget, Helion's default config first; the finer knobs
  (unrolling, per-loop stages and buffering, eviction policies, ...) keep their defaults there, as a random pick of
  them mostly costs compile time (a register-starved or slow-to-compile config) for nothing;
- the rest climbs from the best configs over Helion's own neighbour moves (each fragment's `pattern_neighbors`),
  the moves ordered by the engine's additive model of the times measured so far (engine/search/tpe.py), so a
  small budget goes to the moves the measurements favour;
- configs go to Helion in batches of BATCH, which Helion compiles in parallel.

Registered as HELION_AUTOTUNER=AutotunerTPE while autotuner is installed; `autotuner tune --strategy tpe` and workers
run it on a Helion kernel (helion_miss.search). Budget: `count` configs benchmarked."""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import random
from collections.abc import Sequence
from typing import Any

NAME = "AutotunerTPE"  # its name in helion.autotuner.search_algorithms (HELION_AUTOTUNER)
DEFAULT_COUNT = 64  # configs benchmarked when no count is given (a tune's default budget, contract.DEFAULT_TRIALS)
EXPLORE_FRACTION = 0.3  # of the budget proposed by TPE before the climb (as engine/search/tpe.py)
BATCH = max(4, min(16, os.cpu_count() or 4))  # configs handed to Helion at once: it compiles them in parallel (a
# process per core), then the batch's measurements are learned before the next is chosen
MAX_PERMUTATION = 4  # a permutation of up to this many items is a dimension (24 values); a longer one is climbed only
EXPLORED = ("block_sizes", "loop_orders", "l2_groupings", "reduction_loops", "num_warps", "num_stages", "indexing",
            "pid_type")  # the config keys TPE proposes (Helion's names); every key moves in the climb


def _values(fragment: Any) -> list[Any] | None:
    """A fragment's values in order, where it has few enough to be a TPE dimension; None otherwise (it keeps its
    default while TPE proposes, and moves only in the climb)."""
    from helion.autotuner.config_fragment import (
        BooleanFragment,
        EnumFragment,
        IntegerFragment,
        PermutationFragment,
        PowerOfTwoFragment,
    )

    if isinstance(fragment, PowerOfTwoFragment):  # (block sizes and warps included)
        return [1 << e for e in range(fragment.low.bit_length() - 1, fragment.high.bit_length())]
    if isinstance(fragment, IntegerFragment):
        return list(range(fragment.low, fragment.high + 1))
    if isinstance(fragment, EnumFragment):
        active = getattr(fragment, "search_choices", None)  # (Helion 1.5: a subset searched)
        return list(active if active else fragment.choices)
    if isinstance(fragment, BooleanFragment):
        return [False, True]
    if isinstance(fragment, PermutationFragment) and fragment.length <= MAX_PERMUTATION:
        return [list(p) for p in itertools.permutations(range(fragment.length))]
    return None


class _Dims:
    """The flat spec as TPE's dimensions: (flat index, position in a list fragment or None, values)."""

    def __init__(self, flat_spec: Sequence[Any], explored: set[int] | None = None) -> None:
        from helion.autotuner.config_fragment import ListOf

        self.dims: list[tuple[int, int | None, list[Any]]] = []
        for i, fragment in enumerate(flat_spec):
            if explored is not None and i not in explored:
                continue
            if isinstance(fragment, ListOf):
                inner = _values(fragment.inner)
                self.dims += [(i, j, inner) for j in range(fragment.length) if inner is not None and len(inner) > 1]
            elif (values := _values(fragment)) is not None and len(values) > 1:
                self.dims.append((i, None, values))

    def name(self, d: int) -> str:
        i, j, _ = self.dims[d]
        return f"f{i}" if j is None else f"f{i}_{j}"

    def indices(self, flat: Sequence[Any]) -> dict[str, int]:
        """Each dimension's value index in a flat config (a value off the list, which Helion's normalisation can
        write, left out)."""
        out: dict[str, int] = {}
        for d, (i, j, values) in enumerate(self.dims):
            value = flat[i] if j is None else flat[i][j]
            if value in values:
                out[self.name(d)] = values.index(value)
        return out

    def apply(self, base: Sequence[Any], idx: dict[str, Any]) -> list[Any]:
        flat = [list(v) if isinstance(v, list) else v for v in base]
        for d, (i, j, values) in enumerate(self.dims):
            if (name := self.name(d)) in idx:
                value = values[int(idx[name])]
                if j is None:
                    flat[i] = list(value) if isinstance(value, list) else value
                else:
                    flat[i][j] = value
        return flat


# Helion's benchmark statuses as a trial's (db.models.TRIAL_STATUSES); any other failure is a compile error
_STATUS = {"timeout": "timeout", "accuracy_error": "wrong_result"}


def _key(config: Any) -> str:
    return json.dumps(config.config, sort_keys=True, default=repr)


@functools.cache
def search_class() -> type:
    """The search as a subclass of Helion's PopulationBasedSearch (for its config generation), made once Helion is
    imported."""
    import optuna
    from helion.autotuner.base_search import PopulationBasedSearch

    from autotuner.engine.search.tpe import additive_model

    class AutotunerTPE(PopulationBasedSearch):  # type: ignore[misc,valid-type]
        """Optuna TPE over Helion's config space, then a model-ordered climb (the module's docstring)."""

        label = "tpe"  # what a kept run names as its strategy (helion_cache.record)

        def __init__(self, kernel: Any, args: Sequence[object], count: int = DEFAULT_COUNT, seed: int = 0) -> None:
            super().__init__(kernel, args)
            self.count = max(1, int(count))
            self.rng = random.Random(seed)
            self.dims = _Dims(self.config_gen.flat_spec, _explored(self.config_gen))
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            self.dists: dict[str, optuna.distributions.BaseDistribution] = {}
            for d, (i, _, values) in enumerate(self.dims.dims):  # each dimension: its values' indices
                self.dists[self.dims.name(d)] = (
                    optuna.distributions.CategoricalDistribution(list(range(len(values))))
                    if _unordered(self.config_gen.flat_spec[i])
                    else optuna.distributions.IntDistribution(0, len(values) - 1))
            self.study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(
                seed=seed, multivariate=True, n_startup_trials=8, n_ei_candidates=64))
            self.times: dict[str, float] = {}  # normalised config's key -> ms (inf: failed)
            self.flats: dict[str, list[Any]] = {}  # -> its flat values
            self.configs: dict[str, Any] = {}  # -> its Config
            self.statuses: dict[str, str] = {}  # -> its trial status (db.models.TRIAL_STATUSES)

        @classmethod
        def get_kwargs_from_profile(cls, profile: Any, settings: Any) -> dict[str, object]:
            return {}  # the count is the caller's (a job's budget) or DEFAULT_COUNT, not Helion's effort profile

        # -- the search -------------------------------------------------------------------------------------
        def _autotune(self) -> Any:
            explore = max(1, math.ceil(EXPLORE_FRACTION * self.count))
            self._measure([self.config_gen.default_flat()])
            tries = 0
            while len(self.times) < explore and tries < 20 * self.count:
                want = min(BATCH, explore - len(self.times))
                batch = [self._ask() for _ in range(want)]
                tries += want
                self._measure(batch)
            while len(self.times) < self.count and tries < 20 * self.count:
                want = min(BATCH, self.count - len(self.times))
                batch = self._climb(want) or [self._random_flat() for _ in range(want)]
                tries += want
                self._measure(batch)
            ok = [(ms, key) for key, ms in self.times.items() if math.isfinite(ms)]
            if not ok:
                raise RuntimeError(f"none of {len(self.times)} configs compiled and passed Helion's checks")
            return self.configs[min(ok)[1]]

        def _ask(self) -> list[Any]:
            trial = self.study.ask(self.dists)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)  # the real result arrives via _learn
            return self.dims.apply(self.config_gen.default_flat(), trial.params)

        def _random_flat(self) -> list[Any]:
            return [f.random() for f in self.config_gen.flat_spec]

        def _measure(self, flats: Sequence[list[Any]]) -> None:
            """Benchmark the configs not measured yet (Helion's normalisation can make two flats one config)."""
            fresh: dict[str, tuple[Any, list[Any]]] = {}
            for flat in flats:
                try:
                    config = self.config_gen.unflatten(flat)
                except Exception:  # noqa: BLE001 - a combination Helion refuses: proposed again, not measured
                    continue
                key = _key(config)
                if key not in self.times and key not in fresh:
                    fresh[key] = (config, flat)
            if not fresh:
                return
            try:
                results = [(r.perf, r.status) for r in self.benchmark_batch([c for c, _ in fresh.values()])]
            except Exception:  # noqa: BLE001 - an error Helion raises for one config (ptxas out of registers): each
                # config of the batch alone, the ones that raise failed trials, as any tuner's failed configs are
                results = [self._alone(config) for config, _ in fresh.values()]
            for (key, (config, flat)), (perf, status) in zip(fresh.items(), results, strict=True):
                ms = float(perf) if perf is not None else math.inf
                ok = math.isfinite(ms) and ms > 0
                self.statuses[key] = "ok" if ok else _STATUS.get(str(status), "compile_error")
                self._learn(key, config, flat, ms if ok else math.inf)

        def _alone(self, config: Any) -> tuple[float, str]:
            try:
                result = self.benchmark_batch([config])[0]
            except Exception as exc:  # noqa: BLE001 - said, and a failed trial
                self.log.warning(f"autotuner: a config failed: {type(exc).__name__}: {str(exc)[:300]}")
                return math.inf, "error"
            return result.perf, result.status

        def trials(self) -> list[tuple[dict[str, Any], str, float | None]]:
            """Every config measured: (config, trial status, ms or None), what a kept run stores."""
            return [(json.loads(self.configs[k].to_json()), self.statuses[k],
                     ms if math.isfinite(ms) else None) for k, ms in self.times.items()]

        def _learn(self, key: str, config: Any, flat: list[Any], ms: float) -> None:
            try:
                flat = self.config_gen.flatten(config)  # what ran, after Helion's normalisation
            except Exception:  # noqa: BLE001 - learned as asked
                pass
            self.times[key], self.flats[key], self.configs[key] = ms, flat, config
            ok = [t for t in self.times.values() if math.isfinite(t)]
            value = ms if math.isfinite(ms) else (2.0 * max(ok) if ok else 1e9)  # a failure: worse than any time
            idx = self.dims.indices(flat)
            self.study.add_trial(optuna.trial.create_trial(
                params=idx, distributions={n: self.dists[n] for n in idx}, value=value))

        # -- the climb ----------------------------------------------------------------------------------------
        def _climb(self, n: int) -> list[list[Any]]:
            """Up to n fresh moves: one fragment of the best config moved to a neighbouring value (Helion's
            `pattern_neighbors`), then of the runners-up, each start's moves ordered by the model."""
            ranked = sorted((ms, key) for key, ms in self.times.items() if math.isfinite(ms))
            model = self._model()
            out: list[list[Any]] = []
            seen: set[str] = set()
            for _, key in ranked[:4]:
                moves = [m for m in self._moves(self.flats[key]) if self._fresh(m, seen)]
                moves.sort(key=model)
                out += moves[:n - len(out)]
                if len(out) >= n:
                    break
            return out

        def _fresh(self, flat: list[Any], seen: set[str]) -> bool:
            key = json.dumps(flat, default=repr)
            if key in seen:
                return False
            seen.add(key)
            try:
                return _key(self.config_gen.unflatten(flat)) not in self.times
            except Exception:  # noqa: BLE001 - a move Helion refuses
                return False

        def _moves(self, flat: list[Any]) -> list[list[Any]]:
            out = []
            for i, fragment in enumerate(self.config_gen.flat_spec):
                try:
                    neighbours = fragment.pattern_neighbors(flat[i])
                except Exception:  # noqa: BLE001 - a value off the fragment's own list: not moved
                    continue
                for value in neighbours:
                    out.append([*flat[:i], value, *flat[i + 1:]])
            self.rng.shuffle(out)  # (the model's ties in a seeded order)
            return out

        def _model(self) -> Any:
            """Predicted log time of a flat config: the engine's additive model over which value each dimension
            holds, fitted on the configs that ran."""
            rows = [(self.dims.indices(self.flats[k]), math.log(ms)) for k, ms in self.times.items()
                    if math.isfinite(ms)]
            predict = additive_model(rows)
            return lambda flat: predict(self.dims.indices(flat))

    return AutotunerTPE


def _explored(config_gen: Any) -> set[int] | None:
    """The flat indices of the EXPLORED keys (None, all of them, where Helion's generation names no keys)."""
    layout = getattr(config_gen, "_key_to_flat_indices", None)
    if not isinstance(layout, dict):
        return None
    return {i for key, (indices, _) in layout.items() if key in EXPLORED for i in indices}


def _unordered(fragment: Any) -> bool:
    """Whether a fragment's values have no order for TPE to use (choices, booleans, permutations, lists of them)."""
    from helion.autotuner.config_fragment import BaseIntegerFragment, ListOf

    inner = fragment.inner if isinstance(fragment, ListOf) else fragment
    return not isinstance(inner, BaseIntegerFragment)


def register() -> None:
    """The search under NAME in Helion's search_algorithms (Helion imported)."""
    from helion.autotuner import search_algorithms

    search_algorithms[NAME] = search_class()


def unregister() -> None:
    from helion.autotuner import search_algorithms

    search_algorithms.pop(NAME, None)
