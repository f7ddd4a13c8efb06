"""Emptying the GPU's L2 between timed launches, whatever ran before. A plain zero-fill of twice the L2 (as `do_bench`)
leaves lines held with evict_last priority (torch.compile's loads) in place; reading the buffer with evict_last first
displaces them, then the fill leaves the L2 full of the buffer's lines. Checked by tests/gpu/test_gpu_timing.py."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import triton
import triton.language as tl

from kernels import _torch

if TYPE_CHECKING:
    import torch
else:
    torch = _torch.lazy(__name__)  # (a compile process without torch compiles the flush on shape-only tensors)

BLOCK = 4096
NUM_WARPS = 8  # (the flush's launch and its compile ahead: one binary)
# Triton specializes an integer argument on its divisibility by 16 and its width alone: every buffer's size is a
# multiple of 16 that fits in 32 bits, so a compile ahead with this one makes the binary every flush launches.
ANY_SIZE = (256 << 20) // 4
_BUFFERS: dict[str, torch.Tensor] = {}
_FLUSHES: dict[str, Callable[[], None]] = {}


@triton.jit
def _read_evict_last(buf_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(buf_ptr + offs, mask=offs < n, other=0, eviction_policy="evict_last")
    tl.store(sums_ptr + tl.program_id(0), tl.sum(v))  # a use of the loads, so they are not removed


def _elements(device: torch.device) -> int:
    """The flush buffer's int32 elements on `device`: twice the L2, at least 256 MiB."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
    return max(2 * l2, 256 << 20) // 4


def _grid(n: int) -> tuple[int]:
    return (triton.cdiv(n, BLOCK),)


def flush_buffer(device: torch.device) -> torch.Tensor:
    """The buffer a flush goes through (one per device)."""
    key = str(device)
    if key not in _BUFFERS:
        _BUFFERS[key] = torch.empty(_elements(device), dtype=torch.int32, device=device)
    return _BUFFERS[key]


def compile_ahead(index: int) -> None:
    """Compile the flush's kernel for CUDA device `index` and build its launcher without running it (on meta tensors,
    or shape-only ones in a process without torch), into Triton's cache: a compile-pool process does it as the
    command starts, a trial worker (finding it there, or compiling it) while its CUDA context is made, and its first
    flush only loads it."""
    from triton.runtime.driver import driver

    grid = _grid(ANY_SIZE)
    meta = [torch.empty(size, dtype=torch.int32, device="meta") for size in (ANY_SIZE, grid[0])]
    # (a thread's current device is its own; a process without torch compiles for its one device)
    with torch.cuda.device(index) if _torch.imported() else contextlib.nullcontext():
        kernel = _read_evict_last.warmup(*meta, ANY_SIZE, BLOCK=BLOCK, num_warps=NUM_WARPS, grid=grid)
    driver.active.launcher_cls(kernel.src, kernel.metadata)  # (a C module, built into Triton's cache)


def l2_flusher(device: torch.device) -> Callable[[], None]:
    """A function that empties `device`'s L2 (queued on the current stream): an evict_last read of the flush
    buffer, then a zero-fill of it."""
    key = str(device)
    if key not in _FLUSHES:
        buf = flush_buffer(device)
        n = buf.numel()
        grid = _grid(n)
        sums = torch.empty(grid[0], dtype=torch.int32, device=device)

        def flush() -> None:
            _read_evict_last[grid](buf, sums, n, BLOCK=BLOCK, num_warps=NUM_WARPS)
            buf.zero_()

        _FLUSHES[key] = flush
    return _FLUSHES[key]


def release() -> None:
    """Drop the flush buffers (a process that tuned in passing, a launching one, holds no memory for them)."""
    _FLUSHES.clear()
    _BUFFERS.clear()
