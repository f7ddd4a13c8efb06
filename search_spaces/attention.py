"""Flash-attention forward: problem (batch, heads, seq, head_dim, dtype, causal), space, inputs, cost."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kernels import _checks
from kernels import attention as k_attention
from kernels._torch import lazy
from search_spaces.contract import DOT_TOLERANCE, Example, LibraryCall, Option, TunableOp, tensor_signature
from search_spaces.problem import (
    ELEMENT_BYTES,
    ProblemBase,
    ProblemError,
    dims_pattern,
    dims_str,
    normal,
    parse_dims,
    parse_dtype,
    pow2_bucket,
    seeded,
    torch_dtype_of,
)
from search_spaces.space import Config, DeviceLimits, Param, Space, clamp, hopper, next_pow2, tma_needs_hopper

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

DTYPES = ("float16", "bfloat16")
HEAD_DIMS = (64, 128)
MAX_PER_THREAD = 256  # fp32 values of the accumulator and score tiles per thread


@dataclass(frozen=True)
class AttentionProblem(ProblemBase):
    batch: int
    heads: int
    seq: int
    head_dim: int
    dtype: str = "float16"
    causal: bool = False
    kv_heads: int | None = None  # grouped-query heads: the keys' and values' heads (None: as many as the queries')
    layout: ClassVar[str] = ("BATCHxHEADSxSEQxHEAD_DIM, e.g. 4x32x2048x128, or with grouped-query heads "
                             "BATCHxHEADSxKV_HEADSxSEQxHEAD_DIM, e.g. 4x32x8x2048x128")
    shape_pattern: ClassVar[str] = dims_pattern((4, 5), last="(" + "|".join(map(str, HEAD_DIMS)) + ")")

    def __post_init__(self) -> None:
        if self.head_dim not in HEAD_DIMS:
            raise ProblemError(f"head_dim {self.head_dim} is not supported; accepted: {', '.join(map(str, HEAD_DIMS))}")
        if self.kv_heads is not None:
            if self.kv_heads < 1 or self.heads % self.kv_heads:
                raise ProblemError(f"{self.heads} query heads cannot share {self.kv_heads} key/value heads: the heads "
                                   "must be a multiple of the key/value heads")
            if self.kv_heads == self.heads:  # one problem, one key: as many heads is plain attention
                object.__setattr__(self, "kv_heads", None)

    @classmethod
    def parse(cls, shape: object, dtype: object = "float16", causal: bool = False) -> AttentionProblem:
        dims = parse_dims(shape, (4, 5), cls.layout)
        b, h, s, d = (dims[0], dims[1], *dims[-2:])
        return cls(b, h, s, d, parse_dtype(dtype, DTYPES), bool(causal), dims[2] if len(dims) == 5 else None)

    @property
    def kv(self) -> int:
        """The keys' and values' heads."""
        return self.kv_heads or self.heads

    @property
    def shape(self) -> str:
        if self.kv_heads is not None:
            return dims_str(self.batch, self.heads, self.kv_heads, self.seq, self.head_dim)
        return dims_str(self.batch, self.heads, self.seq, self.head_dim)

    @property
    def key(self) -> str:
        return f"{self.shape}:{self.dtype}:{'causal' if self.causal else 'full'}"

    def dims(self) -> tuple[int, ...]:
        return (self.batch, self.heads, self.seq, self.head_dim)

    def bucket(self) -> AttentionProblem:
        """The batch by powers of two."""
        return dataclasses.replace(self, batch=pow2_bucket(self.batch))

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype_of(self.dtype)


def make_inputs(p: AttentionProblem, device: str) -> dict[str, Any]:
    g = seeded(device, 0)
    q, k, v = (normal((p.batch, heads, p.seq, p.head_dim), g, device, p.torch_dtype) for heads in (p.heads, p.kv, p.kv))
    return {"q": q, "k": k, "v": v, "causal": p.causal}


def problem_from_inputs(inputs: dict[str, Any]) -> AttentionProblem:
    b, h, s, d = inputs["q"].shape
    return AttentionProblem(b, h, s, d, parse_dtype(inputs["q"].dtype, DTYPES), bool(inputs.get("causal", False)),
                            inputs["k"].shape[1])


def flops(p: AttentionProblem) -> float:
    f = 4.0 * p.batch * p.heads * p.seq * p.seq * p.head_dim
    return f / 2 if p.causal else f


def elements(p: AttentionProblem) -> int:
    return p.batch * p.heads * p.seq * p.head_dim


def bytes_moved(p: AttentionProblem) -> float:
    return 2.0 * (p.heads + p.kv) * p.batch * p.seq * p.head_dim * ELEMENT_BYTES[p.dtype]  # q and o, k and v


# Through TMA: the loads' barriers (one or two of 8 bytes per stage) and, in some configs, a 1 KiB scratch.
TMA_BYTES_PER_STAGE, TMA_SCRATCH_BYTES = 16, 1024


def smem_bytes(c: Config, p: AttentionProblem) -> int:
    """The Q tile plus num_stages K and V tiles, and through TMA the barriers and a scratch. An upper bound: every
    config of the space on four H100 problems (head dims 64 and 128, causal and not), compiled for sm_90 under
    Triton 3.6, took at most this (benchmarks/attention_kinds.py)."""
    tiles = (c["BLOCK_M"] + 2 * c["num_stages"] * c["BLOCK_N"]) * p.head_dim * ELEMENT_BYTES[p.dtype]
    return tiles + (c["num_stages"] * TMA_BYTES_PER_STAGE + TMA_SCRATCH_BYTES if c.get("TMA") else 0)


def _fits_smem(c: Config, p: AttentionProblem, d: DeviceLimits) -> str | None:
    need = smem_bytes(c, p)
    if need > d.smem_per_block:
        what = "Q tile + num_stages x (K + V tiles)" + (" + barriers and scratch" if c.get("TMA") else "")
        return f"shared memory {need} B ({what}) exceeds the device's {d.smem_per_block} B per block"
    return None


def _causal_wide_keys(c: Config, p: AttentionProblem, d: DeviceLimits) -> str | None:
    # The kernel runs these correctly, but the diagonal key block then reaches up to BLOCK_N - BLOCK_M keys
    # past the last query row, and the best such config ran well behind 128x64 / 64x64
    # (benchmarks/attention_kinds.py).
    if p.causal and c["BLOCK_N"] > c["BLOCK_M"]:
        return f"causal: BLOCK_N > BLOCK_M computes a masked-out strip on the diagonal (got {c['BLOCK_N']} > {c['BLOCK_M']})"
    return None


def _tiles_vs_seq(c: Config, p: AttentionProblem, d: DeviceLimits) -> str | None:
    useful = max(16, next_pow2(p.seq))
    for name in ("BLOCK_M", "BLOCK_N"):
        if c[name] > useful:
            return f"{name}={c[name]} is larger than useful for seq={p.seq} (at most {useful})"
    return None


def _warps_vs_tile(c: Config, p: AttentionProblem, d: DeviceLimits) -> str | None:
    if c["BLOCK_M"] < 16 * c["num_warps"]:
        return f"{c['num_warps']} warps need BLOCK_M >= {16 * c['num_warps']} (16 query rows per warp), got {c['BLOCK_M']}"
    per_thread = c["BLOCK_M"] * (p.head_dim + c["BLOCK_N"]) // (32 * c["num_warps"])
    if per_thread > MAX_PER_THREAD:
        return f"{per_thread} fp32 accumulator and score values per thread (at most {MAX_PER_THREAD}): more warps or smaller tiles"
    return None


def default(p: AttentionProblem, d: DeviceLimits) -> Config:
    """128x64 tiles (smaller for short sequences); on Hopper GPUs TMA loads, and at head_dim 128 one warpgroup
    with two stages, faster than the 8-warp pointer config there (benchmarks/attention_kinds.py)."""
    bm = clamp(next_pow2(p.seq), 16, 128)
    bn = clamp(next_pow2(p.seq), 16, 64)
    warps = 8 if bm >= 128 else 4 if bm >= 64 else 2 if bm >= 32 else 1
    stages = 3
    if hopper(d) and bm == 128 and p.head_dim == 128:
        warps, stages = 4, 2
    cfg = {"BLOCK_M": bm, "BLOCK_N": min(bn, bm), "TMA": int(hopper(d)), "num_warps": warps, "num_stages": stages}
    while cfg["num_stages"] > 1 and _fits_smem(cfg, p, d):
        cfg["num_stages"] -= 1
    return cfg


def seeds(p: AttentionProblem, d: DeviceLimits) -> list[Config]:
    """The winners of hand sweeps (benchmarks/attention_kinds.py): one warpgroup of 128 or 64
    query rows with TMA loads, or 8 warps for 128 rows at head_dim 64. A search measures them right after
    the default; the ones a problem rules out (64x128 for causal, TMA before Hopper) are dropped."""
    return [{"BLOCK_M": 128, "BLOCK_N": 64, "TMA": 1, "num_warps": 4, "num_stages": 2},
            {"BLOCK_M": 64, "BLOCK_N": 64, "TMA": 1, "num_warps": 4, "num_stages": 3},
            {"BLOCK_M": 64, "BLOCK_N": 128, "TMA": 1, "num_warps": 4, "num_stages": 1},
            {"BLOCK_M": 128, "BLOCK_N": 64, "TMA": 1, "num_warps": 8, "num_stages": 3}]


SPACE: Space[AttentionProblem] = Space(
    params=(
        Param("BLOCK_M", (16, 32, 64, 128, 256)),
        Param("BLOCK_N", (16, 32, 64, 128)),
        Param("TMA", (0, 1), implied=0),
        # a persistent grid (PERSIST=1 or 2 programs per SM) is not searched: slower than a program per block on
        # every problem measured (benchmarks/attention_kinds.py)
        Param("PERSIST", (0,), implied=0),
        Param("num_warps", (1, 2, 4, 8)),
        Param("num_stages", (1, 2, 3, 4)),
    ),
    constraints=(_fits_smem, _causal_wide_keys, _tiles_vs_seq, _warps_vs_tile, tma_needs_hopper),
    default_fn=default,
    seeds_fn=seeds,
)


def _qkv(inputs: Any) -> tuple[Any, Any, Any]:
    return inputs["q"], inputs["k"], inputs["v"]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None) -> tuple[Any, ...]:
    """Flash attention over (batch, heads, seq, head_dim), like F.scaled_dot_product_attention(q, k, v, is_causal=...);
    k and v may have fewer heads than q (grouped-query attention: each key/value head serves heads/kv_heads
    query heads, as SDPA's enable_gqa)."""
    return q, k, v, bool(causal), sm_scale


LIBRARY = LibraryCall(
    face=attention, tensors=(0, 1, 2), launch_args=(0, 1, 2),
    signature=lambda q, k, v, causal, sm_scale: (tensor_signature(q), tensor_signature(k), tensor_signature(v), causal,
                                                 sm_scale),
    inputs=lambda q, k, v, causal, sm_scale: {"q": q, "k": k, "v": v, "causal": causal},
    prepare=lambda q, k, v, causal, sm_scale, config: k_attention.prepare(q, k, v, config, causal, sm_scale),
    run=lambda q, k, v, causal, sm_scale, config: k_attention.attention(q, k, v, config, causal=causal,
                                                                         sm_scale=sm_scale),
    torch_op=lambda q, k, v, causal, sm_scale: k_attention.baseline(q, k, v, causal, sm_scale),
)

OP: TunableOp[AttentionProblem] = TunableOp(
    name="attention", problem_type=AttentionProblem, space=SPACE, dtypes=DTYPES,
    call="autotuner.attention(q, k, v, causal=False)",
    description="flash attention forward over (batch, heads, seq, head_dim), like scaled_dot_product_attention; "
                "grouped-query heads as BATCHxHEADSxKV_HEADSxSEQxHEAD_DIM",
    options=(Option("causal", None, False, "causal mask"),),
    launch=lambda inputs, config: k_attention.attention(*_qkv(inputs), config, causal=bool(inputs.get("causal"))),
    make_inputs=make_inputs, problem_from_inputs=problem_from_inputs,
    reference=lambda inputs: k_attention.reference(*_qkv(inputs), bool(inputs.get("causal"))),
    tolerance=DOT_TOLERANCE, sources=(k_attention, _checks), flops=flops, bytes_moved=bytes_moved, elements=elements,
    baseline=lambda inputs: k_attention.baseline(*_qkv(inputs), bool(inputs.get("causal"))),
    variants={"sdpa flash backend": lambda inputs: k_attention.baseline_flash(*_qkv(inputs),
                                                                              bool(inputs.get("causal")))},
    library=LIBRARY,
    examples=(Example("1x2x37x64", {"causal": False}), Example("1x2x37x64", {"causal": True}),
              Example("2x1x70x128", {"causal": True}), Example("1x1x50x128", {"causal": False}),
              Example("1x4x2x40x64", {"causal": True})),
    gpu_examples=(Example("4x32x2048x128", {"causal": True}, "float16"),
                  Example("4x32x2048x128", {"causal": False}, "float16"),
                  Example("1x16x8192x64", {"causal": True}, "bfloat16"),
                  Example("4x32x8x2048x128", {"causal": True}, "bfloat16"),
                  Example("2x8x1000x64", {"causal": False}, "float16")),
)
