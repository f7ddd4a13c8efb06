"""State for programs that meet across a launch, kept per device and stream (launches on one stream never overlap),
so it is set up once, not per call: zeroed int32 counters (matmul's split-K tiles), which every launch leaves at zero,
so one buffer serves every kernel; and words that rows' programs exchange (softmax's SPLIT with SYNC), which no
launch resets: each leaves its words carrying its sense bit and the next uses the other (kernels/softmax.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernels._torch import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

_COUNTERS: dict[tuple[str, int], torch.Tensor] = {}
_OUTGROWN: list[torch.Tensor] = []


def zeroed_counters(device: torch.device, count: int) -> torch.Tensor:
    """At least `count` int32 counters at zero on `device`, for the current stream."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    counters = _COUNTERS.get(key)
    if counters is None or counters.numel() < count:
        if counters is not None:  # outgrown, yet kept: a CUDA graph that captured a launch keeps using it
            _OUTGROWN.append(counters)
        counters = torch.zeros(max(count, 1024), dtype=torch.int32, device=device)
        _COUNTERS[key] = counters
    return counters


# Never dropped: a CUDA graph that captured a launch keeps writing its layout's words. A layout is (rows, split) of
# a SYNC launch, its rows fewer than twice the SMs (the space's bound for SPLIT), so a process keeps a few thousand.
_WORDS: dict[tuple[str, int, int, int], torch.Tensor] = {}


def row_words(device: torch.device, rows: int, split: int) -> torch.Tensor:
    """`split` int64 words per row, zero when made, for one layout (rows, split) on `device`'s current stream: a
    (row, part) program finds its own word where the last launch of this layout left it, which a launch of another
    layout would not."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream, rows, split)
    words = _WORDS.get(key)
    if words is None:
        words = _WORDS[key] = torch.zeros(rows * split, dtype=torch.int64, device=device)
    return words
