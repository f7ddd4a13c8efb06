"""How the row-wise kernels lay a row over tiles: held whole in one tile or two, and rows not a multiple of 16 elements.
More: docs/design/kernels.md."""

from __future__ import annotations

import triton
import triton.language as tl

from kernels._backend import interpreting

TAIL = 16  # the columns past n_body, at most TAIL - 1, are taken in a tile this wide


def body_cols(n_cols: int) -> int:
    """The columns of a row's body: n_cols rounded down to a multiple of TAIL."""
    return n_cols - n_cols % TAIL


def row_tiles(block: int, n_cols: int, n_body: int, n_rows: int, rows: int) -> dict[str, int | bool]:
    """The single-pass kernels' tile constants for BLOCK_N=block: BLOCK_A and BLOCK_B (0: none), whether tile A lies in
    the row's body (A_COLS_IN) and every program's rows exist (ROWS_IN). At most two tiles (benchmarks/suite.py)."""
    block_a, block_b = block, 0
    half = block // 2
    if block >= n_cols and half >= TAIL and n_body >= half:
        rest = max(TAIL, triton.next_power_of_2(n_body - half)) if n_body > half else 0
        if rest < half and (rest == 0 or n_body == n_cols):
            block_a, block_b = half, rest
    return {"BLOCK_A": block_a, "BLOCK_B": block_b, "A_COLS_IN": block_a <= n_body, "ROWS_IN": n_rows % rows == 0}


def row_layout(block: int, n_cols: int, stride: int, n_rows: int, rows: int) -> tuple[int, dict[str, int | bool]]:
    """For rows of n_cols elements `stride` apart (the output's n_cols apart) in programs of ROWS=rows rows and
    BLOCK_N=block columns: n_body, and the kernels' row constants (`row_tiles`' and ALIGN, HAS_TAIL)."""
    align = stride_align(stride, n_cols)
    n_body = body_cols(n_cols) if align > 1 else n_cols  # one element at a time anyway: no tail to split off
    return n_body, {**row_tiles(block, n_cols, n_body, n_rows, rows), "ALIGN": align, "HAS_TAIL": n_body < n_cols}


def hold16_unsupported(hold: int, element_size: int, block: int, n_cols: int, split: int = 1) -> str | None:
    """Why HOLD16=hold cannot run (None: it can): 0 or 1, and 1 only for 16-bit rows held whole by one program
    (BLOCK_N >= n_cols, SPLIT 1)."""
    if hold not in (0, 1):
        return f"HOLD16 must be 0 or 1, got {hold}"
    if hold and (element_size != 2 or block < n_cols or split != 1):
        return (f"HOLD16=1 holds a 16-bit row whole as loaded; this one is {8 * element_size}-bit, "
                f"{'held whole' if block >= n_cols else f'streamed in blocks of {block} (BLOCK_N < {n_cols})'}"
                f"{f', cut over SPLIT={split} programs' if split != 1 else ''}")
    return None


def hold_consts(hold: int) -> dict[str, bool]:
    """The kernels' HOLD16 and OPAQUE for a config's HOLD16 (`held`; the interpreter runs no inline assembly)."""
    return {"HOLD16": bool(hold), "OPAQUE": not interpreting()}


def stride_align(*strides: int) -> int:
    """The largest power of two up to 16 dividing every stride (in elements)."""
    align = 16
    while align > 1 and any(s % align for s in strides):
        align //= 2
    return align


@triton.jit
def row_offsets(rows, stride, ALIGN: tl.constexpr):
    """rows * stride in int64, declared multiples of ALIGN elements (the host checked the stride)."""
    return tl.multiple_of(rows.to(tl.int64) * stride, ALIGN)


@triton.jit
def load_tile(ptrs, mask, other, MASKED: tl.constexpr):
    """tl.load, with the mask only where the tile may reach past the problem."""
    if MASKED:
        return tl.load(ptrs, mask=mask, other=other)
    else:
        return tl.load(ptrs)


@triton.jit
def store_tile(ptrs, value, mask, MASKED: tl.constexpr):
    """tl.store, with the mask only where the tile may reach past the problem."""
    if MASKED:
        tl.store(ptrs, value, mask=mask)
    else:
        tl.store(ptrs, value)


@triton.jit
def held(x, OPAQUE: tl.constexpr):
    """x through an inline-asm move the compiler cannot see through (OPAQUE: on a GPU; the interpreter runs no
    assembly). With HOLD16=1 a 16-bit tile converted to float32 for one pass over the row and again for the next
    is held in its 16 bits between them, where the compiler would otherwise keep the first conversion alive,
    twice the registers: for the longest softmax rows it won most, its outputs' exponentials computed again
    from the held row; elsewhere it tied or lost a little, and in layernorm it won or lost by config
    (benchmarks/suite.py), so it is a parameter of the space, not a rule. Pairs of 16-bit elements move as one 32-bit register."""
    if OPAQUE:
        return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=x.dtype, is_pure=False, pack=2)
    else:
        return x
