"""A model of a sweep's trials ranking configs between its points, served only where it beat the nearest point's winner
on the sweep's own points. More: docs/design/engine.md."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.store.interfaces import SweepStore
from autotuner.store.prediction import MODEL, NEAREST, Prediction
from autotuner.store.stored_best import versions
from search_spaces.contract import ProblemType
from search_spaces.space import config_key

PER_OCTAVE = 8
TREES = 64
SHORTLIST = 8  # each point's fastest configs: the candidates the model ranks
Times = Mapping[str, tuple[dict[str, Any], float | None]]  # a point's config_key -> (config, ms; None: failed)


def _numeric(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and value > 0:
        return math.log2(value)
    return 0.0


def features(dims: Sequence[float], config: Mapping[str, Any], params: Sequence[str]) -> list[float]:
    """log2 of each dimension, then of each parameter of `params` in `config` (0 where missing or not a number)."""
    return [math.log2(d) for d in dims] + [_numeric(config.get(p)) for p in params]


def _geomean(losses: Sequence[float]) -> float:
    return math.exp(sum(math.log1p(x) for x in losses) / len(losses)) - 1


class _Model:
    """An ExtraTrees model of log time over the given points' measured trials."""

    def __init__(self, dims: Sequence[Sequence[float]], times: Sequence[Times], params: Sequence[str]) -> None:
        from sklearn.ensemble import ExtraTreesRegressor

        rows = [(features(d, config, params), math.log(ms)) for d, t in zip(dims, times, strict=True)
                for config, ms in t.values() if ms is not None and ms > 0]
        self.params = params
        self.fit = ExtraTreesRegressor(n_estimators=TREES, random_state=0, n_jobs=-1).fit(
            [r[0] for r in rows], [r[1] for r in rows])

    def picks(self, positions: Sequence[Sequence[float]], configs: Sequence[Mapping[str, Any]]) -> list[int]:
        """The index of the config predicted fastest at each position (one prediction for all of them)."""
        predicted = self.fit.predict([features(d, c, self.params) for d in positions for c in configs])
        n = len(configs)
        return [min(range(n), key=lambda i: predicted[p * n + i]) for p in range(len(positions))]


def _fastest(times: Times) -> list[tuple[str, float]]:
    """A point's measured configs, (config_key, ms), fastest first."""
    return sorted(((k, ms) for k, (_, ms) in times.items() if ms is not None and ms > 0), key=lambda t: t[1])


def shortlist(times: Sequence[Times]) -> list[str]:
    """The configs among each point's SHORTLIST fastest, in first-seen order: what the model ranks (a config never
    near the front anywhere is not worth predicting, and fewer candidates keep a large space's sweep quick)."""
    keys: dict[str, None] = {}
    for t in times:
        keys.update(dict.fromkeys(k for k, _ in _fastest(t)[:SHORTLIST]))
    return list(keys)


def _best(times: Times) -> tuple[str, float] | None:
    fastest = _fastest(times)
    return fastest[0] if fastest else None


class Dimensioned(Protocol):
    def dims(self) -> tuple[float, ...]: ...


def predict(problems: Sequence[Dimensioned], times: Sequence[Times], *, kernel_hash: str,
            triton_version: str) -> Prediction | None:
    """The sweep's prediction from each point's measured times; None with fewer than three points, a point with no
    measured time, or no scikit-learn."""
    kept = list(zip(problems, times, strict=True))
    if len(kept) < 3 or any(_best(t) is None for t in times):
        return None
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return None
    dims = [[float(d) for d in p.dims()] for p, _ in kept]
    measured = [t for _, t in kept]
    configs: dict[str, dict[str, Any]] = {}
    for t in measured:
        for key, (config, ms) in t.items():
            if ms is not None:
                configs.setdefault(key, dict(config))
    params = sorted({k for c in configs.values() for k in c})
    model_losses: list[float] = []
    nearest_losses: list[float] = []
    for i in range(1, len(kept) - 1):
        own = _best(measured[i])
        assert own is not None
        rest = [j for j in range(len(kept)) if j != i]
        model = _Model([dims[j] for j in rest], [measured[j] for j in rest], params)
        keys = shortlist([measured[j] for j in rest])
        picked = keys[model.picks([dims[i]], [configs[k] for k in keys])[0]]
        ms = measured[i].get(picked, ({}, None))[1]
        if ms is not None:
            model_losses.append(ms / own[1] - 1)
        nearest = min(rest, key=lambda j: _distance(dims[i], dims[j]))
        winner = _best(measured[nearest])
        assert winner is not None
        ms = measured[i].get(winner[0], ({}, None))[1]
        if ms is not None:
            nearest_losses.append(ms / own[1] - 1)
    left_out = len(kept) - 2
    model_loss = _geomean(model_losses) if model_losses else None
    nearest_loss = _geomean(nearest_losses) if nearest_losses else None
    if 2 * len(model_losses) < left_out:
        chosen, why = NEAREST, (f"the model's picks were timed on only {len(model_losses)} of the {left_out} points "
                                "left out: not measured enough to serve")
    elif nearest_loss is not None and model_loss is not None and model_loss >= nearest_loss:
        chosen, why = NEAREST, f"the model lost {model_loss:+.1%} where nearest lost {nearest_loss:+.1%}"
    else:
        chosen, why = MODEL, f"the model lost {model_loss:+.1%} where nearest lost " + (
            f"{nearest_loss:+.1%}" if nearest_loss is not None else "an unmeasured amount")
    full = _Model(dims, measured, params)
    keys = shortlist(measured)
    octaves = max(_distance(dims[0], dims[-1]), 1.0)
    steps = max(2, math.ceil(octaves * PER_OCTAVE) + 1)
    picks = tuple(full.picks([_between(dims[0], dims[-1], s / (steps - 1)) for s in range(steps)],
                             [configs[k] for k in keys]))
    return Prediction(chosen=chosen, why=why, left_out=left_out, model_loss=model_loss,
                      model_worst=max(model_losses) if model_losses else None, measured=len(model_losses),
                      nearest_loss=nearest_loss, nearest_worst=max(nearest_losses) if nearest_losses else None,
                      configs=tuple(configs[k] for k in keys), picks=picks, kernel_hash=kernel_hash,
                      triton_version=triton_version)


def warm_up() -> threading.Thread:
    """Import scikit-learn on a thread (about a second) while a sweep tunes its points; join it before the
    process may end (a thread stopped inside an import at exit can abort the interpreter)."""
    def load() -> None:
        try:
            import sklearn.ensemble  # noqa: F401
        except ImportError:
            pass

    thread = threading.Thread(target=load, name="autotuner-predict-import", daemon=True)
    thread.start()
    return thread


def _distance(a: Sequence[float], b: Sequence[float]) -> float:
    return math.sqrt(sum(math.log2(x / y) ** 2 for x, y in zip(a, b, strict=True)))


def _between(a: Sequence[float], b: Sequence[float], t: float) -> list[float]:
    """The dimensions at position t from a (0) to b (1) on a log scale."""
    return [math.exp((1 - t) * math.log(x) + t * math.log(y)) for x, y in zip(a, b, strict=True)]


def point_times(trials: Times, cells: Sequence[Any], key: str) -> dict[str, tuple[dict[str, Any], float | None]]:
    """A point's measured times: its trials, and the other points' winners timed on it (cross timings)."""
    out = dict(trials)
    for c in cells:
        if c.on_key == key and c.ms is not None and config_key(c.config) not in out:
            out[config_key(c.config)] = (dict(c.config), c.ms)
    return out


def predict_sweep(store: SweepStore, op: Op, sweep_id: int, problems: Sequence[ProblemType], cells: Sequence[Any],
                  device: DeviceInfo) -> Prediction | None:
    """The sweep's prediction on `device` from its points' trials and cross timings (`cells`), stored with the
    sweep; None (nothing stored) where it cannot be made."""
    times = [point_times(store.trial_times(op=op, problem=p, device=device), cells, p.key) for p in problems]
    prediction = predict(problems, times, kernel_hash=op.kernel_hash, triton_version=versions()[0])
    if prediction is not None:
        store.save_sweep_prediction(sweep_id, device=device, prediction=prediction)
    return prediction
