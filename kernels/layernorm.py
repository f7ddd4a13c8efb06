"""Layer normalisation over the last dimension: y = (x - mean) / sqrt(var + eps) * weight + bias. More:
docs/design/kernels.md."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import triton
import triton.language as tl

from kernels._checks import (
    check_config,
    check_last_dim_contiguous,
    check_pow2,
    check_same_device,
    check_tensor,
)
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
OPTIONAL = {"HOLD16": 0}  # 1: a 16-bit row held whole is kept as loaded, converted again for each pass (_rows.py)
TAIL = tl.constexpr(_TAIL)


@triton.jit
def _normalised(x, mean, rstd, w_ptr, b_ptr, cols, col_ok, MASKED: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                HAS_BIAS: tl.constexpr):
    """(x - mean) * rstd, times weight[cols] and plus bias[cols] where given, for a [ROWS, n] tile; MASKED: the
    columns may reach past the row (col_ok says which do not)."""
    y = (x - mean[:, None]) * rstd[:, None]
    if HAS_WEIGHT:
        y = y * load_tile(w_ptr + cols, col_ok, 0.0, MASKED).to(tl.float32)[None, :]
    if HAS_BIAS:
        y = y + load_tile(b_ptr + cols, col_ok, 0.0, MASKED).to(tl.float32)[None, :]
    return y


@triton.jit
def layernorm_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr,
    n_rows, N, n_body, eps,
    stride_xm, stride_ym,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, SINGLE_PASS: tl.constexpr, BLOCK_A: tl.constexpr,
    BLOCK_B: tl.constexpr, A_COLS_IN: tl.constexpr, ROWS_IN: tl.constexpr, ALIGN: tl.constexpr,
    HAS_TAIL: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HOLD16: tl.constexpr,
    OPAQUE: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    x_row = x_ptr + row_offsets(rows, stride_xm, ALIGN)[:, None]
    y_row = y_ptr + row_offsets(rows, stride_ym, ALIGN)[:, None]
    t_cols = n_body + tl.arange(0, TAIL)  # the row's last N - n_body columns (kernels/_rows.py)
    t_ok = t_cols < N
    t_mask = row_ok[:, None] & t_ok[None, :]
    if SINGLE_PASS:  # the row held whole: tile A, and tile B and the tail's where there are any (kernels/_rows.py)
        a_cols = tl.arange(0, BLOCK_A)
        a_ok = a_cols < n_body
        a_mask = row_ok[:, None] & a_ok[None, :]
        a_masked: tl.constexpr = not (A_COLS_IN and ROWS_IN)
        # Tiles A and B as loaded, converted to float32 for each pass over them (held in 16 bits between, HOLD16)
        x_in = load_tile(x_row + a_cols[None, :], a_mask, 0.0, a_masked)
        total = tl.sum(x_in.to(tl.float32), axis=1)
        if BLOCK_B > 0:
            b_cols = BLOCK_A + tl.arange(0, BLOCK_B)
            b_ok = b_cols < n_body
            b_mask = row_ok[:, None] & b_ok[None, :]
            x_b_in = tl.load(x_row + b_cols[None, :], mask=b_mask, other=0.0)
            total += tl.sum(x_b_in.to(tl.float32), axis=1)
        if HAS_TAIL:
            x_t = tl.load(x_row + t_cols[None, :], mask=t_mask, other=0.0).to(tl.float32)
            total += tl.sum(x_t, axis=1)
        mean = total / N
        d = held(x_in, OPAQUE and HOLD16).to(tl.float32) - mean[:, None]
        if not A_COLS_IN:  # columns past the row hold 0, not the mean: keep them out of the variance
            d = tl.where(a_ok[None, :], d, 0.0)
        squares = tl.sum(d * d, axis=1)
        if BLOCK_B > 0:
            d_b = tl.where(b_ok[None, :], held(x_b_in, OPAQUE and HOLD16).to(tl.float32) - mean[:, None], 0.0)
            squares += tl.sum(d_b * d_b, axis=1)
        if HAS_TAIL:
            d_t = tl.where(t_ok[None, :], x_t - mean[:, None], 0.0)
            squares += tl.sum(d_t * d_t, axis=1)
        rstd = 1.0 / tl.sqrt(squares / N + eps)
        x = held(x_in, OPAQUE and HOLD16).to(tl.float32)
        y = _normalised(x, mean, rstd, w_ptr, b_ptr, a_cols, a_ok, not A_COLS_IN, HAS_WEIGHT, HAS_BIAS)
        store_tile(y_row + a_cols[None, :], y.to(y_ptr.dtype.element_ty), a_mask, a_masked)
        if BLOCK_B > 0:
            x_b = held(x_b_in, OPAQUE and HOLD16).to(tl.float32)
            y_b = _normalised(x_b, mean, rstd, w_ptr, b_ptr, b_cols, b_ok, True, HAS_WEIGHT, HAS_BIAS)
            tl.store(y_row + b_cols[None, :], y_b.to(y_ptr.dtype.element_ty), mask=b_mask)
        if HAS_TAIL:
            y_t = _normalised(x_t, mean, rstd, w_ptr, b_ptr, t_cols, t_ok, True, HAS_WEIGHT, HAS_BIAS)
            tl.store(y_row + t_cols[None, :], y_t.to(y_ptr.dtype.element_ty), mask=t_mask)
    else:
        acc = tl.zeros((ROWS, BLOCK_N), tl.float32)
        for start in range(0, n_body, BLOCK_N):
            c = start + cols
            acc += tl.load(x_row + c[None, :], mask=row_ok[:, None] & (c[None, :] < n_body), other=0.0).to(tl.float32)
        total = tl.sum(acc, axis=1)
        if HAS_TAIL:
            x_t = tl.load(x_row + t_cols[None, :], mask=t_mask, other=0.0).to(tl.float32)
            total += tl.sum(x_t, axis=1)
        mean = total / N
        acc = tl.zeros((ROWS, BLOCK_N), tl.float32)
        for start in range(0, n_body, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_body)
            x = tl.load(x_row + c[None, :], mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - mean[:, None], 0.0)
            acc += d * d
        squares = tl.sum(acc, axis=1)
        if HAS_TAIL:
            d_t = tl.where(t_mask, x_t - mean[:, None], 0.0)
            squares += tl.sum(d_t * d_t, axis=1)
        rstd = 1.0 / tl.sqrt(squares / N + eps)
        for start in range(0, n_body, BLOCK_N):
            c = start + cols
            col_ok = c < n_body
            mask = row_ok[:, None] & col_ok[None, :]
            x = tl.load(x_row + c[None, :], mask=mask, other=0.0).to(tl.float32)
            y = _normalised(x, mean, rstd, w_ptr, b_ptr, c, col_ok, True, HAS_WEIGHT, HAS_BIAS)
            tl.store(y_row + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
        if HAS_TAIL:
            y_t = _normalised(x_t, mean, rstd, w_ptr, b_ptr, t_cols, t_ok, True, HAS_WEIGHT, HAS_BIAS)
            tl.store(y_row + t_cols[None, :], y_t.to(y_ptr.dtype.element_ty), mask=t_mask)


def prepare(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    config: Mapping[str, Any],
) -> Callable[[torch.Tensor, torch.Tensor | None, torch.Tensor | None], torch.Tensor]:
    """Check the inputs and the config once; the returned launch(x, weight, bias) takes tensors like these (dtype,
    shape, strides, device, 16-byte alignment; weight and bias present or None alike) at this eps."""
    check_tensor("x", x, DTYPES)
    N = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            check_tensor(name, t, DTYPES, ndim=1)
            if t.shape[0] != N:
                raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({N},) to match x's last dimension")
            check_last_dim_contiguous(name, t)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    check_same_device(x=x, weight=weight, bias=bias)
    check_last_dim_contiguous("x", x)
    cfg = check_config(config, PARAMS, "layernorm", OPTIONAL)
    check_pow2("layernorm", cfg, PARAMS)
    unsupported = hold16_unsupported(cfg["HOLD16"], x.element_size(), cfg["BLOCK_N"], N)
    if unsupported:
        raise ValueError(f"layernorm: {unsupported}")
    shape, dtype, device = x.shape, x.dtype, x.device
    n_rows = x.numel() // N
    try:
        stride, flatten = x.view(-1, N).stride(0), False
    except RuntimeError:
        stride, flatten = N, True
    n_body, row_consts = row_layout(cfg["BLOCK_N"], N, stride, n_rows, cfg["ROWS"])
    launcher = Launcher(layernorm_kernel, (triton.cdiv(n_rows, cfg["ROWS"]),), dict(
        BLOCK_N=cfg["BLOCK_N"], ROWS=cfg["ROWS"], SINGLE_PASS=cfg["BLOCK_N"] >= N,
        **row_consts, **hold_consts(cfg["HOLD16"]),
        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))
    eps = float(eps)

    def launch(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor:
        y = new_output(shape, dtype, device)
        launcher(x.reshape(-1, N) if flatten else x, y, weight if weight is not None else y,
                 bias if bias is not None else y, n_rows, N, n_body, eps, stride, N)
        return y

    return launch


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    config: Mapping[str, Any],
) -> torch.Tensor:
    """Normalise x[..., N] over its last dimension; weight and bias (shape (N,)) may each be None."""
    return prepare(x, weight, bias, eps, config)(x, weight, bias)


def reference(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    w = weight.float() if weight is not None else None
    b = bias.float() if bias is not None else None
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w, b, eps)


def baseline(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)
