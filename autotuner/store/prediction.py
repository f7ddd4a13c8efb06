"""A sweep's prediction as stored, per device, in the sweep's `points` JSON: for positions between its first and last
point, the config a model ranks first, and whether it beat the nearest point's winner. Serving reads configs from it,
never a model."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

MODEL, NEAREST = "model", "nearest"
MAX_PICKS = 4096


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """What a sweep's model picks along it, and how it measured against nearest leaving each point out in turn."""

    chosen: str  # MODEL: its picks are served between the points; NEAREST: they are not
    why: str  # why it was chosen, in words
    left_out: int  # inner points left out in turn
    model_loss: float | None  # geomean loss of the model's picks on them (None: too few measured)
    model_worst: float | None
    measured: int  # of its picks, how many were timed on their point
    nearest_loss: float | None  # the same for the nearest other point's winner
    nearest_worst: float | None
    configs: tuple[dict[str, Any], ...]
    picks: tuple[int, ...]  # a config's index at each position i / (len - 1) from the first point to the last
    kernel_hash: str
    triton_version: str

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "configs": [dict(c) for c in self.configs], "picks": list(self.picks)}

    @classmethod
    def from_json(cls, value: Any) -> Prediction | None:
        """A stored prediction, checked; None for anything malformed (a row written by hand is never trusted)."""
        if not isinstance(value, dict):
            return None
        try:
            configs = tuple(dict(c) for c in value["configs"])
            picks = tuple(int(i) for i in value["picks"])
            if not configs or not 2 <= len(picks) <= MAX_PICKS or any(not 0 <= i < len(configs) for i in picks) \
                    or value["chosen"] not in (MODEL, NEAREST):
                return None
            return cls(chosen=str(value["chosen"]), why=str(value["why"]), left_out=int(value["left_out"]),
                       model_loss=_loss(value["model_loss"]), model_worst=_loss(value["model_worst"]),
                       measured=int(value["measured"]), nearest_loss=_loss(value["nearest_loss"]),
                       nearest_worst=_loss(value["nearest_worst"]), configs=configs, picks=picks,
                       kernel_hash=str(value["kernel_hash"]), triton_version=str(value["triton_version"]))
        except (KeyError, TypeError, ValueError):
            return None

    def pick_at(self, t: float) -> dict[str, Any]:
        """The config picked nearest position t (0: the first point, 1: the last)."""
        return self.configs[self.picks[round(min(1.0, max(0.0, t)) * (len(self.picks) - 1))]]

    def basis(self, sweep_id: int) -> str:
        """How the expected regret of a pick was measured, in words."""
        def loss(value: float | None, worst: float | None) -> str:
            return "an unmeasured loss" if value is None or worst is None else f"{value:+.1%} (worst {worst:+.1%})"

        return (f"picked by a model of sweep {sweep_id}'s trials; leaving each of its {self.left_out} inner points "
                f"out in turn, its picks lost {loss(self.model_loss, self.model_worst)} geomean against "
                f"{loss(self.nearest_loss, self.nearest_worst)} for the nearest point's winner")


def _loss(value: Any) -> float | None:
    if value is None:
        return None
    loss = float(value)
    if not math.isfinite(loss) or loss < 0:
        raise ValueError(f"not a loss: {value!r}")
    return loss
