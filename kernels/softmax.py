"""Row-wise softmax over the last dimension of x[..., n_cols], any column count. More: docs/design/kernels.md."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import triton
import triton.language as tl

from kernels._backend import interpreting, sm_count
from kernels._checks import (
    check_config,
    check_last_dim_contiguous,
    check_pow2,
    check_same_device,
    check_tensor,
)
from kernels._counters import row_words
from kernels._direct import Launcher, new_output  # (_checks.new_output, allocating faster)
from kernels._rows import TAIL as _TAIL
from kernels._rows import held, hold16_unsupported, hold_consts, load_tile, row_layout, row_offsets, store_tile
from kernels._torch import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

DTYPES = ("float16", "bfloat16", "float32")
PARAMS = ("BLOCK_N", "ROWS")
# PERSIST 0: a program per ROWS rows; k: k programs per SM walking the row blocks. SPLIT: programs per row.
# SYNC=1: a SPLIT row's programs wait for each other in one launch (0: two launches).
# HOLD16=1: a 16-bit row held whole is kept as loaded and its outputs' exponentials computed again (kernels/_rows.py).
OPTIONAL = {"PERSIST": 0, "SPLIT": 1, "SYNC": 0, "HOLD16": 0}
LOG2E = tl.constexpr(1.4426950408889634)
TAIL = tl.constexpr(_TAIL)
# Polls of a row's words before a SYNC program reads the rest of its row itself. A poll is a load from the L2;
# when the whole grid is on the GPU the row-mates publish within the kernel's own time (the space keeps SYNC to
# grids the SMs hold at once). Where it is not (SMs held by another stream's kernels, such as a collective's, or a
# kernel with more registers than the space's estimate), a wave of programs waits up to this many polls, each a
# round trip to the L2, and the result is the same (benchmarks/RESULTS.md).
SPIN_LIMIT = 256
# How deep the PERSIST row loop is pipelined. Fixed rather than a choice: only three stages paid, and a best config
# that needed PERSIST, three stages and the whole row at once was a needle no search found (benchmarks/suite.py).
PERSIST_STAGES = 3
SPLITS = (1, 2, 4, 8, 16, 32, 64)  # the programs a row may be cut over (SPLIT)


@triton.jit
def _exp2_less(x, m):
    """2^(x log2(e) - m) in float32 for a [ROWS, n] tile x and the rows' m (a max in base 2): one FMA and an exp2."""
    return tl.exp2(tl.fma(x.to(tl.float32), LOG2E, -m[:, None]))


@triton.jit
def _softmax_out(x, e, m_out, inv, HOLD16: tl.constexpr, OPAQUE: tl.constexpr):
    """A tile's outputs in float32: its exponentials e times the sum's inverse, or (HOLD16, the tile x held as
    loaded) computed again from x as 2^(x log2(e) - m_out), m_out the row's max plus log2 of its sum (base 2)."""
    if HOLD16:
        return _exp2_less(held(x, OPAQUE), m_out)
    else:
        return e * inv


@triton.jit
def _online(m, s, x):
    """The running max m and sum s of exp(x - m) of each row, with a [ROWS, n] tile x more."""
    x = x.to(tl.float32)
    m_new = tl.maximum(m, tl.max(x, axis=1))
    # Rows past the end stay at -inf; keep them finite so no NaN is produced (they are never stored).
    m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
    return m_new, s * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe[:, None]), axis=1)


@triton.jit
def _softmax_rows(x_ptr, y_ptr, rows, n_rows, n_cols, n_body, stride_xm, stride_ym, BLOCK_N: tl.constexpr,
                  ROWS: tl.constexpr, SINGLE_PASS: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr,
                  A_COLS_IN: tl.constexpr, ROWS_IN: tl.constexpr, ALIGN: tl.constexpr, HAS_TAIL: tl.constexpr,
                  HOLD16: tl.constexpr, OPAQUE: tl.constexpr):
    row_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    x_row = x_ptr + row_offsets(rows, stride_xm, ALIGN)[:, None]
    y_row = y_ptr + row_offsets(rows, stride_ym, ALIGN)[:, None]
    t_cols = n_body + tl.arange(0, TAIL)  # the row's last n_cols - n_body columns (kernels/_rows.py)
    t_mask = row_ok[:, None] & (t_cols[None, :] < n_cols)
    if SINGLE_PASS:  # the row held whole: tile A, and tile B and the tail's where there are any (kernels/_rows.py)
        a_cols = tl.arange(0, BLOCK_A)
        a_mask = row_ok[:, None] & (a_cols[None, :] < n_body)
        a_masked: tl.constexpr = not (A_COLS_IN and ROWS_IN)
        x = load_tile(x_row + a_cols[None, :], a_mask, -float("inf"), a_masked)
        # The max taken in the input's dtype is exact (of 16-bit pairs, where the tile is held as loaded).
        m = tl.max(held(x, OPAQUE and HOLD16), axis=1)
        if BLOCK_B > 0:
            b_cols = BLOCK_A + tl.arange(0, BLOCK_B)
            b_mask = row_ok[:, None] & (b_cols[None, :] < n_body)
            x_b = tl.load(x_row + b_cols[None, :], mask=b_mask, other=-float("inf"))
            m = tl.maximum(m, tl.max(held(x_b, OPAQUE and HOLD16), axis=1))
        if HAS_TAIL:
            x_t = tl.load(x_row + t_cols[None, :], mask=t_mask, other=-float("inf"))
            m = tl.maximum(m, tl.max(x_t, axis=1))
        m = m.to(tl.float32) * LOG2E
        e = _exp2_less(x, m)
        s = tl.sum(e, axis=1)
        if BLOCK_B > 0:
            e_b = _exp2_less(x_b, m)
            s += tl.sum(e_b, axis=1)
        if HAS_TAIL:
            e_t = _exp2_less(x_t, m)
            s += tl.sum(e_t, axis=1)
        inv = (1.0 / s)[:, None]  # a row all -inf comes out NaN, as torch's does
        m_out = m + tl.log2(s)
        y = _softmax_out(x, e, m_out, inv, HOLD16, OPAQUE)
        store_tile(y_row + a_cols[None, :], y.to(y_ptr.dtype.element_ty), a_mask, a_masked)
        if BLOCK_B > 0:
            y_b = _softmax_out(x_b, e_b, m_out, inv, HOLD16, OPAQUE)
            tl.store(y_row + b_cols[None, :], y_b.to(y_ptr.dtype.element_ty), mask=b_mask)
        if HAS_TAIL:  # a tile of TAIL columns may hold one element per thread: not through the packed move
            y_t = _softmax_out(x_t, e_t, m_out, inv, HOLD16, False)
            tl.store(y_row + t_cols[None, :], y_t.to(y_ptr.dtype.element_ty), mask=t_mask)
    else:
        m = tl.full((ROWS,), -float("inf"), tl.float32)
        s = tl.zeros((ROWS,), tl.float32)
        for start in range(0, n_body, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_body)
            m, s = _online(m, s, tl.load(x_row + c[None, :], mask=mask, other=-float("inf")))
        if HAS_TAIL:
            m, s = _online(m, s, tl.load(x_row + t_cols[None, :], mask=t_mask, other=-float("inf")))
        m_safe = tl.where(m == -float("inf"), 0.0, m)
        inv = 1.0 / s
        for start in range(0, n_body, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_body)
            x = tl.load(x_row + c[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            y = tl.exp(x - m_safe[:, None]) * inv[:, None]
            tl.store(y_row + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
        if HAS_TAIL:
            x_t = tl.load(x_row + t_cols[None, :], mask=t_mask, other=-float("inf")).to(tl.float32)
            tl.store(y_row + t_cols[None, :], (tl.exp(x_t - m_safe[:, None]) * inv[:, None]).to(y_ptr.dtype.element_ty),
                     mask=t_mask)


@triton.jit
def softmax_kernel(
    x_ptr, y_ptr,
    n_rows, n_cols, n_body,
    stride_xm, stride_ym,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, SINGLE_PASS: tl.constexpr, PERSISTENT: tl.constexpr,
    STAGES: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, A_COLS_IN: tl.constexpr,
    ROWS_IN: tl.constexpr, ALIGN: tl.constexpr, HAS_TAIL: tl.constexpr, HOLD16: tl.constexpr,
    OPAQUE: tl.constexpr,
):
    if PERSISTENT:  # a grid of a few programs per SM, each walking row blocks, the next block's loads in flight
        for block in tl.range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0), num_stages=STAGES):
            _softmax_rows(x_ptr, y_ptr, block * ROWS + tl.arange(0, ROWS), n_rows, n_cols, n_body, stride_xm,
                          stride_ym, BLOCK_N, ROWS, SINGLE_PASS, BLOCK_A, BLOCK_B, A_COLS_IN, ROWS_IN, ALIGN,
                          HAS_TAIL, HOLD16, OPAQUE)
    else:
        _softmax_rows(x_ptr, y_ptr, tl.program_id(0) * ROWS + tl.arange(0, ROWS), n_rows, n_cols, n_body,
                      stride_xm, stride_ym, BLOCK_N, ROWS, SINGLE_PASS, BLOCK_A, BLOCK_B, A_COLS_IN, ROWS_IN, ALIGN,
                      HAS_TAIL, HOLD16, OPAQUE)


@triton.jit
def _chunk(n_cols, CHUNK, SPLIT: tl.constexpr, REVERSED: tl.constexpr):
    """This program's row and its chunk's columns [start, end); REVERSED takes the (row, chunk) pairs from the last."""
    row = tl.program_id(0)
    part = tl.program_id(1)
    if REVERSED:
        row = tl.num_programs(0) - 1 - row
        part = SPLIT - 1 - part
    start = part * CHUNK
    return row, start, tl.minimum(start + CHUNK, n_cols)


@triton.jit
def _online_stats(x_row, start, end, BLOCK_N: tl.constexpr):
    """The max m of x_row[start:end] and the sum of exp(x - m), streamed in BLOCK_N blocks."""
    m = -float("inf")
    s = 0.0
    for off in range(start, end, BLOCK_N):
        c = off + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + c, mask=c < end, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)  # all -inf so far: no NaN
        s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)
        m = m_new
    return m, s


@triton.jit
def _combine(ws_ptr, row, SPLIT: tl.constexpr):
    """A row's max (made finite) and sum of exponentials from its SPLIT chunks' partials in ws[row, part, 2],
    read from the L2 (other programs wrote them)."""
    parts = (row.to(tl.int64) * SPLIT + tl.arange(0, SPLIT)) * 2
    m_parts = tl.load(ws_ptr + parts, cache_modifier=".cg")
    m = tl.max(m_parts, axis=0)
    m = tl.where(m == -float("inf"), 0.0, m)
    return m, tl.sum(tl.load(ws_ptr + parts + 1, cache_modifier=".cg") * tl.exp(m_parts - m), axis=0)


@triton.jit
def _publish(ws_ptr, row, m, s, SPLIT: tl.constexpr):
    """This program's chunk's max and sum of exponentials into ws[row, part, 2]."""
    ws = ws_ptr + (row.to(tl.int64) * SPLIT + tl.program_id(1)) * 2
    tl.store(ws, m)
    tl.store(ws + 1, s)


@triton.jit
def softmax_split_stats_kernel(x_ptr, ws_ptr, n_cols, stride_xm, CHUNK, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr):
    """SPLIT > 1, first launch: the max m and the sum of exp(x - m) of one chunk of a row, into ws[row, part]."""
    row, start, end = _chunk(n_cols, CHUNK, SPLIT, False)
    m, s = _online_stats(x_ptr + row.to(tl.int64) * stride_xm, start, end, BLOCK_N)
    _publish(ws_ptr, row, m, s, SPLIT)


@triton.jit
def _published(parts, sense):
    """Whether every word of a row carries this launch's sense (bit 31, the sign of its sum)."""
    return tl.min((((parts >> 31) & 1) == sense).to(tl.int32), axis=0) == 1


@triton.jit
def softmax_split_sync_kernel(x_ptr, y_ptr, words_ptr, n_cols, stride_xm, stride_ym, CHUNK, BLOCK_N: tl.constexpr,
                              SPLIT: tl.constexpr, SPIN_LIMIT: tl.constexpr):
    """SPLIT > 1 in one launch (SYNC=1): each program holds its chunk (BLOCK_N >= CHUNK) in registers, publishes its
    max and sum as one 64-bit word, and reads its row's words until all are this launch's: one exchange through the
    L2, and nothing to reset afterwards (a reset waits for the program's stores to drain, which cost as much as the
    wait itself). A word is (max, sum) as float32 bits, the sum's sign bit holding the launch's sense: each program
    reads the word it left in the last launch (words_ptr holds one layout's: kernels._counters.row_words) and
    publishes with the other sense, so every word of a row changes sense once per launch, zero words counting as
    the sense before the first. The space keeps the grid within what the SMs hold at once, so all of it runs
    together; a program whose row-mates have not all published after SPIN_LIMIT polls (fewer SMs free than the grid,
    or the interpreter, which runs programs one after another) reads the rest of its row itself, so a wait never
    hangs."""
    row, start, end = _chunk(n_cols, CHUNK, SPLIT, False)
    words = words_ptr + row.to(tl.int64) * SPLIT
    sense = 1 - ((tl.load(words + tl.program_id(1), volatile=True) >> 31) & 1)
    x_row = x_ptr + row.to(tl.int64) * stride_xm
    c = start + tl.arange(0, BLOCK_N)
    x = tl.load(x_row + c, mask=c < end, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    m_safe = tl.where(m == -float("inf"), 0.0, m)
    s = tl.sum(tl.exp(x - m_safe), axis=0)
    word = (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (s.to(tl.int32, bitcast=True).to(tl.int64) & 0x7FFFFFFF)
    tl.atomic_xchg(words + tl.program_id(1), word | (sense << 31), sem="relaxed", scope="gpu")
    parts = tl.load(words + tl.arange(0, SPLIT), volatile=True)
    spins = 0
    while (_published(parts, sense) == 0) & (spins < SPIN_LIMIT):
        parts = tl.load(words + tl.arange(0, SPLIT), volatile=True)
        spins += 1
    if _published(parts, sense):
        m_parts = (parts >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        m_row = tl.max(m_parts, axis=0)
        m_row = tl.where(m_row == -float("inf"), 0.0, m_row)
        s_row = tl.sum((parts & 0x7FFFFFFF).to(tl.int32).to(tl.float32, bitcast=True) * tl.exp(m_parts - m_row),
                       axis=0)
    else:
        m_row, s_row = _online_stats(x_row, 0, n_cols, BLOCK_N)
        m_row = tl.where(m_row == -float("inf"), 0.0, m_row)
    y = tl.exp(x - m_row) * (1.0 / s_row)
    tl.store(y_ptr + row.to(tl.int64) * stride_ym + c, y.to(y_ptr.dtype.element_ty), mask=c < end)


@triton.jit
def softmax_split_norm_kernel(x_ptr, y_ptr, ws_ptr, n_cols, stride_xm, stride_ym, CHUNK, BLOCK_N: tl.constexpr,
                              SPLIT: tl.constexpr):
    """SPLIT > 1, second launch: the row's max and sum from its chunks' partials, then the chunk written."""
    row, start, end = _chunk(n_cols, CHUNK, SPLIT, True)
    m_safe, s = _combine(ws_ptr, row, SPLIT)
    inv = 1.0 / s
    x_row = x_ptr + row.to(tl.int64) * stride_xm
    y_row = y_ptr + row.to(tl.int64) * stride_ym
    for off in range(start, end, BLOCK_N):
        c = off + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + c, mask=c < end, other=-float("inf")).to(tl.float32)
        tl.store(y_row + c, (tl.exp(x - m_safe) * inv).to(y_ptr.dtype.element_ty), mask=c < end)


def split_unsupported(config: Mapping[str, Any]) -> str | None:
    """Why a config's SPLIT cannot run (None: it can): a power of two up to 64, with one row per program and no
    PERSIST."""
    split, sync = config.get("SPLIT", 1), config.get("SYNC", 0)
    if split not in SPLITS:
        return f"SPLIT must be a power of two from 1 to 64, got {split}"
    if split > 1 and (config.get("ROWS") != 1 or config.get("PERSIST", 0)):
        return f"SPLIT={split} cuts one row over programs: it needs ROWS=1 and PERSIST=0, got {dict(config)}"
    if sync not in (0, 1) or (sync and split == 1):
        return f"SYNC=1 (one launch, a row's programs waiting for each other) is for SPLIT > 1, got SYNC={sync} with SPLIT={split}"
    return None


def prepare(x: torch.Tensor, config: Mapping[str, Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    """Check x and the config once; the returned launch(x) takes any tensor with this x's dtype, shape, strides,
    device and 16-byte alignment, and launches without checking again."""
    check_tensor("x", x, DTYPES)
    check_same_device(x=x)
    check_last_dim_contiguous("x", x)
    cfg = check_config(config, PARAMS, "softmax", OPTIONAL)
    check_pow2("softmax", cfg, PARAMS)
    shape, dtype, device = x.shape, x.dtype, x.device
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    try:
        stride, flatten = x.view(-1, n_cols).stride(0), False  # rows reachable by one stride: launch on x itself
    except RuntimeError:
        stride, flatten = n_cols, True  # leading dimensions that do not flatten: copy into rows first
    unsupported = split_unsupported(cfg) or hold16_unsupported(cfg["HOLD16"], x.element_size(), cfg["BLOCK_N"],
                                                                n_cols, cfg["SPLIT"])
    if unsupported:
        raise ValueError(f"softmax: {unsupported}")
    if cfg["SPLIT"] > 1:
        return _prepare_split(shape, dtype, device, n_rows, n_cols, stride, flatten, cfg)
    block, rows = cfg["BLOCK_N"], cfg["ROWS"]
    n_body, row_consts = row_layout(block, n_cols, stride, n_rows, rows)
    blocks = triton.cdiv(n_rows, rows)
    persist = cfg["PERSIST"]
    if persist:  # PERSIST programs per SM, at most one per row block
        blocks = min(blocks, persist * sm_count(device))
    launcher = Launcher(softmax_kernel, (blocks,), dict(
        BLOCK_N=block, ROWS=rows, SINGLE_PASS=block >= n_cols, PERSISTENT=persist > 0, STAGES=PERSIST_STAGES,
        **row_consts, **hold_consts(cfg["HOLD16"]), num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))

    def launch(x: torch.Tensor) -> torch.Tensor:
        y = new_output(shape, dtype, device)
        launcher(x.reshape(-1, n_cols) if flatten else x, y, n_rows, n_cols, n_body, stride, n_cols)
        return y

    return launch


def _prepare_split(shape: Any, dtype: Any, device: Any, n_rows: int, n_cols: int, stride: int, flatten: bool,
                   cfg: Mapping[str, Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    split, block = cfg["SPLIT"], cfg["BLOCK_N"]
    chunk = triton.cdiv(triton.cdiv(n_cols, split), block) * block  # whole blocks per chunk
    meta = dict(BLOCK_N=block, SPLIT=split, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    synced = None
    if cfg["SYNC"]:
        if chunk != block:
            raise ValueError(f"softmax: SYNC=1 holds each chunk in one block, and {n_cols} columns in {split} chunks "
                             f"need BLOCK_N >= {triton.cdiv(n_cols, split)}, got BLOCK_N={block}")
        synced = Launcher(softmax_split_sync_kernel, (n_rows, split),
                          dict(meta, SPIN_LIMIT=2 if interpreting() else SPIN_LIMIT))
    else:
        stats = Launcher(softmax_split_stats_kernel, (n_rows, split), meta)
        norm = Launcher(softmax_split_norm_kernel, (n_rows, split), meta)

    def launch(x: torch.Tensor) -> torch.Tensor:
        y = new_output(shape, dtype, device)
        rows = x.reshape(-1, n_cols) if flatten else x
        if synced is not None:
            synced(rows, y, row_words(device, n_rows, split), n_cols, stride, n_cols, chunk)
        else:
            ws = torch.empty(n_rows * split * 2, dtype=torch.float32, device=device)  # each chunk's max and sum
            stats(rows, ws, n_cols, stride, chunk)
            norm(rows, y, ws, n_cols, stride, n_cols, chunk)
        return y

    return launch


def softmax(x: torch.Tensor, config: Mapping[str, Any]) -> torch.Tensor:
    """softmax(x, dim=-1) for x of any rank >= 1 whose last dimension is contiguous."""
    return prepare(x, config)(x)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1)


def manual(x: torch.Tensor) -> torch.Tensor:
    """Unfused softmax from primitive ops, as people write it by hand (for benchmarks)."""
    z = x - x.max(dim=-1, keepdim=True).values
    e = torch.exp(z)
    return e / e.sum(dim=-1, keepdim=True)


def baseline(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
