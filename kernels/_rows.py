"""Rows whose length is not a multiple of 16 elements, for the row-wise kernels (softmax, layernorm).

Triton widens a masked load or store to 16 bytes only where it can prove the mask constant over the vector and
the address aligned, and it knows an integer argument's divisibility only as "by 16" or not at all: with rows of
1000 fp16 elements, `cols < n_cols` and `row * stride` gave 2-byte loads and stores for the whole row. So the
kernels mask a row's body with n_body (n_cols rounded down to a multiple of TAIL) and take the last
n_cols - n_body columns in a tile of TAIL of their own; and where the strides are multiples of 8 (or 4, or 2)
elements but not of 16, the row offsets are declared multiples of ALIGN (`row_offsets`), so that the body's
accesses are as wide as the alignment allows. With a stride of an odd number of elements every access is one
element wide anyway, and the row takes no tail (n_body = n_cols).
"""

from __future__ import annotations

import triton
import triton.language as tl

TAIL = 16  # the columns past n_body, at most TAIL - 1, are taken in a tile this wide


def body_cols(n_cols: int) -> int:
    """The columns of a row's body: n_cols rounded down to a multiple of TAIL."""
    return n_cols - n_cols % TAIL


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
