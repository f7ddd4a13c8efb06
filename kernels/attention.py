"""Flash-attention forward: O = softmax(Q K^T * sm_scale [+ causal mask]) V, online softmax in float32. More:
docs/design/kernels.md."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import triton
import triton.language as tl

from kernels._backend import dot_needs_upcast, gpu_index, gpu_properties, sm_count
from kernels._checks import (
    check_config,
    check_last_dim_contiguous,
    check_pow2,
    check_same_device,
    check_tensor,
)
from kernels._descriptors import Prechecked as TensorDescriptor  # (Triton's, made without the checks prepare made)
from kernels._descriptors import ensure_allocator
from kernels._direct import Launcher, new_output  # (_checks.new_output, allocating faster)
from kernels._torch import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

DTYPES = ("float16", "bfloat16")
HEAD_DIMS = (64, 128)
PARAMS = ("BLOCK_M", "BLOCK_N")
L2_SHARE = 1.0  # of the L2, for the keys and values of the heads a causal launch runs longest-first together
DEFAULT_L2_BYTES = 50 << 20  # the interpreter's stand-in (an H100's L2)
HOST_DESCRIPTORS = True  # TMA descriptors made once by the launcher where the layout allows (see _host_descriptors)
# TMA=1: tiles move through Hopper's tensor memory accelerator (descriptors). PERSIST=k: k programs per SM walk
# the query blocks (0: a program per block).
OPTIONAL = {"TMA": 0, "PERSIST": 0}
PERSIST_CHOICES = (0, 1, 2)


@triton.jit
def _attn_inner(
    acc, l_i, m_i, q, k_ptrs, v_ptrs, k_desc, v_desc, row0, stride_kn, stride_vn, start_m, lo, hi, S, qk_scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr, EVEN_N: tl.constexpr,
    UPCAST: tl.constexpr, TMA: tl.constexpr,
):
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs += lo * stride_kn
    v_ptrs += lo * stride_vn
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        if TMA:  # rows past the end of the sequence come back as zeros
            k = k_desc.load([row0 + start_n, 0]).T
        elif EVEN_N:
            k = tl.load(k_ptrs)
        else:
            k = tl.load(k_ptrs, mask=cols[None, :] < S, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        qk = tl.dot(q, k)
        if DIAGONAL or not EVEN_N:
            keep = cols[None, :] < S
            if DIAGONAL:
                keep = keep & (offs_m[:, None] >= cols[None, :])
            qk = tl.where(keep, qk * qk_scale, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_new[:, None]
        else:  # the scale folds into one multiply-add
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_new[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if TMA:
            v = v_desc.load([row0 + start_n, 0])
        elif EVEN_N:
            v = tl.load(v_ptrs)
        else:
            v = tl.load(v_ptrs, mask=cols[:, None] < S, other=0.0)
        if UPCAST:
            acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i


@triton.jit
def _attn_block(
    pid, n_blocks,
    q_ptr, k_ptr, v_ptr, o_ptr,
    q_host, k_host, v_host, o_host,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    H, KV_GROUP, S, qk_scale, GROUP_BH,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, EVEN_N: tl.constexpr, TMA: tl.constexpr, HOST_DESC: tl.constexpr, UPCAST: tl.constexpr,
):
    """Query block `pid` of the n_blocks (batch, head, query block)s, in the launch's order."""
    num_m = tl.cdiv(S, BLOCK_M)
    if CAUSAL:
        # Longest rows (most key blocks) first, so that short ones fill the tail: over groups of GROUP_BH
        # (batch, head) pairs whose keys and values fit in the L2 together, query blocks in descending order.
        per_group = GROUP_BH * num_m
        group = pid // per_group
        first_bh = group * GROUP_BH
        group_size = tl.minimum(n_blocks // num_m - first_bh, GROUP_BH)
        r = pid - group * per_group
        start_m = num_m - 1 - r // group_size
        bh = first_bh + r % group_size
    else:
        start_m = pid % num_m
        bh = pid // num_m
    b = bh // H
    h = bh % H
    hk = h // KV_GROUP  # the key/value head of this query head (grouped-query attention; KV_GROUP 1: its own)
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = k_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    o_base = o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    k_ptrs = k_base + offs_d[:, None] + offs_n[None, :] * stride_kn  # K^T tile [HEAD_DIM, BLOCK_N]
    v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :]
    if TMA and HOST_DESC:  # every tile lies inside its (batch, head): seq is a multiple of both blocks
        row0 = bh * S
        kv_row0 = (b * (H // KV_GROUP) + hk) * S
        q_desc, k_desc, v_desc, o_desc = q_host, k_host, v_host, o_host
    elif TMA:  # one (seq, head_dim) matrix per (batch, head), made by each program; rows past seq read as
        row0 = 0  # zeros and stores clip
        kv_row0 = 0
        q_desc = tl.make_tensor_descriptor(q_base, shape=[S, HEAD_DIM], strides=[stride_qm, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
        k_desc = tl.make_tensor_descriptor(k_base, shape=[S, HEAD_DIM], strides=[stride_kn, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        v_desc = tl.make_tensor_descriptor(v_base, shape=[S, HEAD_DIM], strides=[stride_vn, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        o_desc = tl.make_tensor_descriptor(o_base, shape=[S, HEAD_DIM], strides=[stride_om, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
    else:
        row0 = 0
        kv_row0 = 0
        q_desc, k_desc, v_desc, o_desc = q_base, k_base, v_base, o_base  # unused
    if TMA:
        q = q_desc.load([row0 + start_m * BLOCK_M, 0])
    else:
        q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=offs_m[:, None] < S, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    if CAUSAL:
        # Key blocks wholly left of the diagonal need no mask; the one(s) the diagonal crosses do. With
        # BLOCK_N > BLOCK_M the masked block starts at the key block holding this query block's first row.
        diag_lo = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, k_desc, v_desc, kv_row0, stride_kn, stride_vn,
                                    start_m, 0, diag_lo, S, qk_scale, BLOCK_M, BLOCK_N, False, True, UPCAST, TMA)
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, k_desc, v_desc, kv_row0, stride_kn, stride_vn,
                                    start_m, diag_lo, tl.minimum((start_m + 1) * BLOCK_M, S), S, qk_scale,
                                    BLOCK_M, BLOCK_N, True, EVEN_N, UPCAST, TMA)
    else:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, k_desc, v_desc, kv_row0, stride_kn, stride_vn,
                                    start_m, 0, S, S, qk_scale, BLOCK_M, BLOCK_N, False, EVEN_N, UPCAST, TMA)
    # Rows past the end of the sequence saw no keys; keep them finite (they are never stored).
    l_i = tl.where(l_i == 0.0, 1.0, l_i)
    o = (acc / l_i[:, None]).to(o_ptr.dtype.element_ty)
    if TMA:
        o_desc.store([row0 + start_m * BLOCK_M, 0], o)
    else:
        tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :], o, mask=offs_m[:, None] < S)


@triton.jit
def attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    q_host, k_host, v_host, o_host,  # HOST_DESC: descriptors built by the launcher; else unused
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    H, KV_GROUP, S, qk_scale, GROUP_BH, n_blocks,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, EVEN_N: tl.constexpr,
    TMA: tl.constexpr,  # load tiles with the tensor memory accelerator (Hopper and later)
    HOST_DESC: tl.constexpr,  # TMA through the launcher's (batch*heads*seq, head_dim) descriptors
    UPCAST: tl.constexpr,  # interpreter only: bfloat16 dot operands go through float32
    PERSISTENT: tl.constexpr,  # a grid of a few programs per SM walking the n_blocks query blocks, in order
):
    if PERSISTENT:
        for block in tl.range(tl.program_id(0), n_blocks, tl.num_programs(0)):
            _attn_block(block, n_blocks, q_ptr, k_ptr, v_ptr, o_ptr, q_host, k_host, v_host, o_host,
                        stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                        stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                        H, KV_GROUP, S, qk_scale, GROUP_BH, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, EVEN_N, TMA, HOST_DESC, UPCAST)
    else:
        _attn_block(tl.program_id(0), n_blocks, q_ptr, k_ptr, v_ptr, o_ptr, q_host, k_host, v_host, o_host,
                    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                    stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                    H, KV_GROUP, S, qk_scale, GROUP_BH, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, EVEN_N, TMA, HOST_DESC, UPCAST)


@functools.cache
def _l2_bytes(index: int) -> int:
    """CUDA device `index`'s L2 size, read once per device (every causal launch asks)."""
    return int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", DEFAULT_L2_BYTES))


def causal_group(q: torch.Tensor) -> int:
    """How many (batch, head) pairs a causal launch orders together, longest query blocks first: as many
    as have their keys and values in L2_SHARE of the L2 cache (at least 1, at most all)."""
    index = gpu_index(q.device)  # (a meta tensor's: autotuner.engine.measure.compile_pool's)
    l2 = _l2_bytes(index) if index is not None else DEFAULT_L2_BYTES
    kv_bytes = 2 * q.shape[2] * q.shape[3] * q.element_size()
    return max(1, min(q.shape[0] * q.shape[1], int(l2 * L2_SHARE) // kv_bytes))


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether TMA descriptors can address these tensors: a Hopper (or later) GPU or the interpreter, 16-byte
    aligned bases and strides. When not, the kernel loads through pointers (same result). Device-side
    descriptors need scratch memory from an allocator; one is installed unless the caller set their own."""
    t0 = tensors[0]
    props = gpu_properties(t0.device)
    if props is not None and props.capability[0] < 9:
        return False
    for t in tensors:
        if t.data_ptr() % 16 or any((s * t.element_size()) % 16 for s in t.stride()[:3]):
            return False
    ensure_allocator()
    return True


def _host_descriptors(cfg: Mapping[str, int], *tensors: torch.Tensor, make: bool = True) -> list[TensorDescriptor] | None:
    """One descriptor per tensor over its (batch*heads*seq, head_dim) rows (k's and v's heads may be fewer), made
    here instead of by every program, when each tensor's rows stack that way and no tile crosses from one (batch,
    head) into the next (`make=False`: only whether they can be, as an empty list)."""
    B, H, S, D = tensors[0].shape
    if not HOST_DESCRIPTORS or S % cfg["BLOCK_M"] or S % cfg["BLOCK_N"] or B * H * S >= 2**31:
        return None
    if any(t.stride(1) != S * t.stride(2) or t.stride(0) != t.shape[1] * t.stride(1) for t in tensors):
        return None
    if not make:
        return []
    return [TensorDescriptor(t, [B * t.shape[1] * S, D], [t.stride(2), 1], [cfg[block], D])
            for t, block in zip(tensors, ("BLOCK_M", "BLOCK_N", "BLOCK_N", "BLOCK_M"), strict=True)]


def prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    config: Mapping[str, Any],
    causal: bool = False,
    sm_scale: float | None = None,
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """Check the inputs and the config once; the returned launch(q, k, v) takes tensors like these (dtype, shape,
    strides, device, 16-byte alignment) and launches without checking again."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, DTYPES, ndim=4)
        check_last_dim_contiguous(name, t)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (k.shape == v.shape and q.shape[0] == k.shape[0] and q.shape[2:] == k.shape[2:]
            and k.shape[1] >= 1 and q.shape[1] % k.shape[1] == 0):
        raise ValueError(
            f"q must be (batch, heads, seq, head_dim) and k and v (batch, kv_heads, seq, head_dim), heads a multiple "
            f"of kv_heads; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head_dim {q.shape[-1]} is not supported; accepted: {', '.join(map(str, HEAD_DIMS))}")
    check_same_device(q=q, k=k, v=v)
    cfg = check_config(config, PARAMS, "attention", OPTIONAL)
    check_pow2("attention", cfg, PARAMS)
    if cfg["TMA"] not in (0, 1):
        raise ValueError(f"attention: config['TMA'] must be 0 or 1, got {cfg['TMA']}")
    if cfg["PERSIST"] not in PERSIST_CHOICES:
        raise ValueError(f"attention: config['PERSIST'] must be one of {', '.join(map(str, PERSIST_CHOICES))} "
                         f"(programs per SM; 0: a program per query block), got {cfg['PERSIST']}")
    B, H, S, D = q.shape
    shape, dtype, device = q.shape, q.dtype, q.device
    scale = (1.0 / math.sqrt(D)) if sm_scale is None else float(sm_scale)
    o_like = torch.empty_strided(shape, new_output_strides(shape), dtype=dtype, device="meta")  # o's layout
    tma = bool(cfg["TMA"]) and _tma_ready(q, k, v)  # o is new and contiguous: aligned whenever q's rows are
    host = tma and _host_descriptors(cfg, q, k, v, o_like, make=False) is not None
    blocks = triton.cdiv(S, cfg["BLOCK_M"]) * B * H
    programs = min(blocks, cfg["PERSIST"] * sm_count(device)) if cfg["PERSIST"] else blocks
    launcher = Launcher(attention_kernel, (programs,), dict(
        HEAD_DIM=D, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], CAUSAL=bool(causal),
        EVEN_N=S % cfg["BLOCK_N"] == 0, TMA=tma, HOST_DESC=host, UPCAST=dot_needs_upcast(dtype),
        PERSISTENT=programs < blocks, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))
    scalars = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o_like.stride()[:3],
               H, H // k.shape[1], S, scale * 1.4426950408889634, causal_group(q) if causal else 1, blocks)  # log2(e): exp2 in the kernel

    def launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        o = new_output(shape, dtype, device)
        descriptors = _host_descriptors(cfg, q, k, v, o) if host else None
        launcher(q, k, v, o, *(descriptors or (q, k, v, o)), *scalars)
        return o

    return launch


def new_output_strides(shape: tuple[int, ...] | torch.Size) -> tuple[int, ...]:
    """The strides of a new contiguous tensor of this shape."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    config: Mapping[str, Any],
    causal: bool = False,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v over (batch, heads, seq, head_dim); sm_scale defaults to 1/sqrt(head_dim); k and
    v may have fewer heads (grouped-query: query head h reads key/value head h // (heads / kv_heads))."""
    return prepare(q, k, v, config, causal, sm_scale)(q, k, v)


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, sm_scale: float | None = None
) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal, scale=sm_scale, enable_gqa=_gqa(q, k)
    )


def _gqa(q: torch.Tensor, k: torch.Tensor) -> bool:
    """SDPA's grouped-query switch: on where k has fewer heads than q (off, its default, for plain attention)."""
    return k.shape[1] != q.shape[1]


def baseline(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
             sm_scale: float | None = None) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention in the input dtype (flash/cuDNN backends)."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale,
                                                          enable_gqa=_gqa(q, k))


def baseline_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   sm_scale: float | None = None) -> torch.Tensor:
    """scaled_dot_product_attention held to its flash backend (FlashAttention-2); the default above may choose
    cuDNN's instead (torch 2.11 on an H100 does)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale,
                                                                enable_gqa=_gqa(q, k))
