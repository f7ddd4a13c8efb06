"""Zeroed int32 counters for programs that meet across a launch (matmul's split-K tiles, softmax's SPLIT with
SYNC), kept per device and stream: every launch leaves them at zero, and launches on one stream never overlap, so
they are zeroed once, not per call, and one buffer serves every kernel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernels._torch import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

_COUNTERS: dict[tuple[str, int], torch.Tensor] = {}


def zeroed_counters(device: torch.device, count: int) -> torch.Tensor:
    """At least `count` int32 counters at zero on `device`, for the current stream."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    counters = _COUNTERS.get(key)
    if counters is None or counters.numel() < count:
        counters = torch.zeros(max(count, 1024), dtype=torch.int32, device=device)
        _COUNTERS[key] = counters
    return counters
