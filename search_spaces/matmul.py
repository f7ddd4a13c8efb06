"""Matmul: C[M, N] = A[M, K] @ B[K, N] with an optional bias epilogue. Problem, space, default, inputs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kernels import _checks
from kernels import matmul as k_matmul
from kernels import matmul_tiles as k_matmul_tiles
from kernels import matmul_tma as k_matmul_tma
from kernels._torch import lazy
from search_spaces import matmul_vllm
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

DTYPES = ("float16", "bfloat16", "float32")
EPILOGUES = ("none", "bias", "bias_relu", "bias_gelu", "relu", "gelu")
# Below this many of K per split, its partial sums cost more than the split saves (benchmarks/matmul_kinds.py).
MIN_K_PER_SPLIT = 1024
# SPLIT_K's values: with 3 and 6, tile counts such as 36 (3 x 36 = 108 programs) fill more of the SMs in one wave
# than powers of two do (72, or 144 in two waves)
SPLITS = (1, 2, 3, 4, 6, 8)


@dataclass(frozen=True)
class MatmulProblem(ProblemBase):
    M: int
    N: int
    K: int
    dtype: str = "float16"
    epilogue: str = "none"
    layout: ClassVar[str] = "MxNxK, e.g. 4096x4096x4096"
    shape_pattern: ClassVar[str] = dims_pattern((3,))
    shape_flags: ClassVar[tuple[str, ...]] = ("M", "N", "K")  # `--M 4096`: N and K default to M

    def __post_init__(self) -> None:
        if self.epilogue not in EPILOGUES:
            raise ProblemError(f"unknown epilogue {self.epilogue!r}; accepted: {', '.join(EPILOGUES)}")

    @classmethod
    def parse(cls, shape: object, dtype: object = "float16", epilogue: str = "none") -> MatmulProblem:
        M, N, K = parse_dims(shape, (3,), cls.layout)
        return cls(M, N, K, parse_dtype(dtype, DTYPES), epilogue)

    @property
    def shape(self) -> str:
        return dims_str(self.M, self.N, self.K)

    @property
    def key(self) -> str:
        tail = "" if self.epilogue == "none" else f":{self.epilogue}"
        return f"{self.shape}:{self.dtype}{tail}"

    def dims(self) -> tuple[int, ...]:
        return (self.M, self.N, self.K)

    def nearest_group(self) -> tuple[int, int]:
        """The same N and K first: an LLM's GEMMs vary only in M, with the batch of tokens."""
        return (self.N, self.K)

    def bucket(self) -> MatmulProblem:
        """M by powers of two: a workload's token counts share the result tuned at the power of two above them."""
        return dataclasses.replace(self, M=pow2_bucket(self.M))

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype_of(self.dtype)


def make_inputs(p: MatmulProblem, device: str) -> dict[str, Any]:
    g = seeded(device, 0)
    a = normal((p.M, p.K), g, device, p.torch_dtype)
    b = normal((p.K, p.N), g, device, p.torch_dtype)
    bias = normal((p.N,), g, device, p.torch_dtype) if p.epilogue.startswith("bias") else None
    return {"a": a, "b": b, "bias": bias, "epilogue": p.epilogue}


def problem_from_inputs(inputs: dict[str, Any]) -> MatmulProblem:
    a, b = inputs["a"], inputs["b"]
    return MatmulProblem(a.shape[0], b.shape[1], a.shape[1], parse_dtype(a.dtype, DTYPES), inputs.get("epilogue", "none"))


def flops(p: MatmulProblem) -> float:
    return 2.0 * p.M * p.N * p.K


def elements(p: MatmulProblem) -> int:
    return max(p.M * p.K, p.K * p.N, p.M * p.N)


def bytes_moved(p: MatmulProblem) -> float:
    e = ELEMENT_BYTES[p.dtype]
    return float(e * (p.M * p.K + p.K * p.N + p.M * p.N + (p.N if p.epilogue.startswith("bias") else 0)))


# The TMA pipeline's barriers: one or two of 8 bytes per stage.
BARRIER_BYTES_PER_STAGE = 16


def smem_bytes(c: Config, p: MatmulProblem, capability: tuple[int, int] = (9, 0)) -> int:
    """An upper bound on the shared memory Triton gives a config on this compute capability: the pipeline's A and B
    tiles (Hopper holds num_stages of them; 8.x's pipeliner num_stages - 1, or the float32 accumulator tile if larger),
    and with TMA the barriers and the C tile the store goes out through (half of it with SUBTILE; in the pipeline's
    buffers for the one-tile kernel in 16 bits). Where 8 warps share BLOCK_M=64 on Hopper, SUBTILE moves one accumulator
    half between warpgroups through a BLOCK_M x BLOCK_N/2 float32 scratch, which a flattened loop cannot take from the
    pipeline's buffers. Checked by compiling the space near the limit (benchmarks/matmul_kinds.py)."""
    return _smem(c, p, capability)[0]


def _smem(c: Config, p: MatmulProblem, capability: tuple[int, int]) -> tuple[int, str]:
    """smem_bytes, and what it counts (the words of a refusal)."""
    e = ELEMENT_BYTES[p.dtype]
    stage = (c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]) * e
    if not c.get("TMA"):
        if capability[0] == 8:
            held, c_held = (c["num_stages"] - 1) * stage, c["BLOCK_M"] * c["BLOCK_N"] * 4
            if c_held >= held:
                return c_held, "the float32 C tile"
            return held, "(num_stages - 1) x (A tile + B tile)"
        return c["num_stages"] * stage, "num_stages x (A tile + B tile)"
    c_tile = c["BLOCK_M"] * c["BLOCK_N"] // (2 if c.get("SUBTILE") else 1) * e
    barriers = c["num_stages"] * BARRIER_BYTES_PER_STAGE
    if c["TMA"] == 1 and e == 2:  # one tile a program: its 16-bit C tile goes out through the pipeline's buffers
        return (max(c["num_stages"] * stage, c_tile) + barriers,
                "the larger of num_stages x (A tile + B tile) and the C tile, + barriers")
    if c.get("SUBTILE") and c.get("FLATTEN") and c["num_warps"] // 4 > c["BLOCK_M"] // 64 >= 1:
        moved_half = c["BLOCK_M"] * c["BLOCK_N"] // 2 * 4
        return (c["num_stages"] * stage + c_tile + moved_half + barriers,
                "num_stages x (A tile + B tile) + C tile + an accumulator half moved between warpgroups + barriers")
    return c["num_stages"] * stage + c_tile + barriers, "num_stages x (A tile + B tile) + C tile + barriers"


def _fits_smem(c: Config, p: MatmulProblem, d: DeviceLimits) -> str | None:
    need, what = _smem(c, p, getattr(d, "capability", (9, 0)))
    if need > d.smem_per_block:
        return f"shared memory {need} B ({what}) exceeds the device's {d.smem_per_block} B per block"
    return None


def _tile_vs_problem(c: Config, p: MatmulProblem, d: DeviceLimits) -> str | None:
    for block, dim, name in (("BLOCK_M", p.M, "M"), ("BLOCK_N", p.N, "N"), ("BLOCK_K", p.K, "K")):
        useful = max(32, next_pow2(dim))
        if c[block] > useful:
            return f"{block}={c[block]} is larger than useful for {name}={dim} (at most {useful})"
    return None


def _warps_vs_tile(c: Config, p: MatmulProblem, d: DeviceLimits) -> str | None:
    per_thread = c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"])
    if per_thread < 8:
        return f"{c['num_warps']} warps for a {c['BLOCK_M']}x{c['BLOCK_N']} tile leave {per_thread} outputs per thread (need >= 8)"
    return None


# The float32 accumulator tile spread over the block's threads: more than this many values per thread leaves
# too few of the 255 registers for the operands, and the kernel spills: on every recorded matmul landscape the
# best such config ran several times slower than the best (benchmarks/matmul_kinds.py).
MAX_ACCUMULATORS_PER_THREAD = 128


def _accumulator_fits_registers(c: Config, p: MatmulProblem, d: DeviceLimits) -> str | None:
    per_thread = c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"])
    if per_thread > MAX_ACCUMULATORS_PER_THREAD:
        return (f"{c['num_warps']} warps for a {c['BLOCK_M']}x{c['BLOCK_N']} tile hold {per_thread} accumulators per "
                f"thread (at most {MAX_ACCUMULATORS_PER_THREAD}: beyond that the kernel spills registers)")
    return None


def _grouping(c: Config, p: MatmulProblem, d: DeviceLimits) -> str | None:
    rows = -(-p.M // c["BLOCK_M"])
    if c["GROUP_M"] > 1 and rows == 1:
        return f"GROUP_M={c['GROUP_M']} has no effect with one row of tiles (M={p.M}, BLOCK_M={c['BLOCK_M']})"
    return None


def _tiles(c: Config, p: MatmulProblem) -> int:
    """The output tiles of the problem in this config's BLOCK_M x BLOCK_N."""
    return -(-p.M // c["BLOCK_M"]) * -(-p.N // c["BLOCK_N"])


def _persistent(c: Config, p: MatmulProblem, d: DeviceLimits) -> str | None:
    unsupported = k_matmul.persistent_unsupported(c, float32=p.dtype == "float32")
    if unsupported:
        return unsupported
    if c["SUBTILE"] and c["BLOCK_N"] < 128:
        return f"SUBTILE=1 with BLOCK_N={c['BLOCK_N']}: halves narrower than 64 columns are not worth storing apart"
    if c["TMA"] < 2:
        return None
    tiles = _tiles(c, p)
    if tiles <= d.sm_count:
        return (f"TMA={c['TMA']} (a program per SM): {tiles} output tiles for {d.sm_count} SMs give every program "
                "one tile, as TMA=1 does")
    if c["TAIL_SPLIT"] and tiles % d.sm_count == 0:
        return (f"TAIL_SPLIT=1: {tiles} output tiles make whole waves on {d.sm_count} SMs, with no partial wave to "
                "split")
    return None


def _skinny_tiles(c: Config, p: MatmulProblem, d: DeviceLimits) -> str | None:
    """Decode's tiles: 16 rows only where M <= 16, K steps of 256 only where the tiles leave SMs idle (decode's
    problems ran faster with them than at best without: benchmarks/matmul_kinds.py)."""
    if c["BLOCK_M"] == 16 and p.M > 16:
        return f"BLOCK_M=16 is for M <= 16 (M={p.M}: 32 rows or more per tile read B fewer times)"
    if c["BLOCK_K"] == 256 and _tiles(c, p) >= d.sm_count:  # (as split-K: few tiles, each a long K)
        return (f"BLOCK_K=256 is for problems whose output tiles do not fill the device's {d.sm_count} SMs "
                f"({_tiles(c, p)} tiles here)")
    return None


def _split_k(c: Config, p: MatmulProblem, d: DeviceLimits) -> str | None:
    if c["SPLIT_K"] == 1:
        return None
    if c["TMA"] >= 2:
        return f"SPLIT_K={c['SPLIT_K']}: TMA={c['TMA']} (a program per SM) works with SPLIT_K=1 only"
    tiles = _tiles(c, p)
    if tiles >= d.sm_count:
        return f"SPLIT_K={c['SPLIT_K']}: {tiles} output tiles already fill the device's {d.sm_count} SMs"
    if p.K // c["SPLIT_K"] < MIN_K_PER_SPLIT:
        return (f"SPLIT_K={c['SPLIT_K']} leaves {p.K // c['SPLIT_K']} of K={p.K} per split (at least {MIN_K_PER_SPLIT}: "
                "below that, the partial sums' round trip costs more than the split saves)")
    return None


def default(p: MatmulProblem, d: DeviceLimits) -> Config:
    """Tutorial-style 128x128x64 tiles, shrunk to the problem, with as many stages as shared memory allows."""
    bm = clamp(next_pow2(p.M), 32, 128)
    bn = clamp(next_pow2(p.N), 32, 128)
    bk = clamp(next_pow2(p.K), 32, 64 if p.dtype != "float32" else 32)
    warps = 8 if bm * bn >= 128 * 128 else 4
    cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8 if -(-p.M // bm) > 1 else 1,
           "SPLIT_K": 1, "TMA": 0, "num_warps": warps, "num_stages": 4}
    while cfg["num_stages"] > 2 and _fits_smem(cfg, p, d):
        cfg["num_stages"] -= 1
    return cfg


def filling_split(tiles: int, K: int, sms: int) -> int:
    """The most splits of K (SPLIT_K) whose programs, `tiles` per split, still fit the device's SMs in one wave, each
    split at least MIN_K_PER_SPLIT long; 1 where none does."""
    fits = [s for s in SPLITS[1:] if tiles * s <= sms and K // s >= MIN_K_PER_SPLIT]
    return max(fits, default=1)


def seeds(p: MatmulProblem, d: DeviceLimits) -> list[Config]:
    """On Hopper, the 128x256x64 tiles through TMA and pointers, and persistent (with and without warp specialization;
    flattened, storing C in halves, with and without the half-width tail), measured right after the default; for M <= 64
    first the thin split-K tiles; where the big tiles leave SMs idle and K is long, first those tiles and 128x128
    ones through TMA with K split to fill the SMs. Those a problem rules out are dropped
    (benchmarks/matmul_kinds.py)."""
    if not hopper(d):
        return []
    big = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 1, "num_warps": 8, "num_stages": 3}
    flat = {**big, "TMA": 2, "SUBTILE": 1, "FLATTEN": 1, "num_stages": 4}
    seeds = [{**big, "TMA": 1}, {**big, "TMA": 0}, {**big, "TMA": 0, "num_stages": 4}, {**big, "TMA": 2}, flat,
             {**big, "TMA": 3}, {**flat, "TAIL_SPLIT": 1}]
    for tile in (big, {**big, "BLOCK_N": 128}):  # K-heavy problems: few output tiles, each a long K
        split = filling_split(_tiles(tile, p), p.K, d.sm_count)
        if split > 1:
            seeds.insert(0, {**tile, "TMA": 1, "SPLIT_K": split, "num_stages": 4})
    if p.M <= 64:  # decode's skinny problems: the winners of the H100's landscapes at M = 16, 32 and 64
        rows = clamp(next_pow2(p.M), 16, 64)
        thin = {"BLOCK_M": rows, "GROUP_M": 1, "SPLIT_K": 1, "TMA": 0, "num_warps": 4}
        seeds = [{**thin, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 2, "num_stages": 5},
                 {**thin, "BLOCK_N": 32, "BLOCK_K": 256, "TMA": 1, "num_stages": 4},
                 {**thin, "BLOCK_N": 64, "BLOCK_K": 256, "num_stages": 3}, *seeds]
    return seeds


SPACE: Space[MatmulProblem] = Space(
    params=(
        Param("BLOCK_M", (16, 32, 64, 128, 256)),
        Param("BLOCK_N", (32, 64, 128, 256)),
        Param("BLOCK_K", (32, 64, 128, 256)),
        Param("GROUP_M", (1, 8)),
        Param("SPLIT_K", SPLITS, implied=1, only_with=("TMA", (0, 1))),  # the one-tile kernels'
        Param("TMA", (0, 1, 2, 3), implied=0),  # pointers, TMA, persistent TMA, that warp-specialized
        # the persistent kernels' options: their C tile stored in two halves; the last, partial wave in half-width
        # tiles; the tile loop and K loop pipelined as one
        Param("SUBTILE", (0, 1), implied=0, only_with=("TMA", (2, 3))),
        Param("TAIL_SPLIT", (0, 1), implied=0, only_with=("TMA", (2,))),
        Param("FLATTEN", (0, 1), implied=0, only_with=("TMA", (2,))),
        # TMA descriptors made by the kernel (DEVICE_DESC=1) are not searched: the persistent kernels ran slower with
        # them or alike, for less CPU per call (benchmarks/matmul_kinds.py)
        Param("DEVICE_DESC", (0,), implied=0),
        Param("num_warps", (4, 8)),
        Param("num_stages", (2, 3, 4, 5)),
    ),
    constraints=(_fits_smem, _tile_vs_problem, _skinny_tiles, _warps_vs_tile, _accumulator_fits_registers,
                 _grouping, _split_k, _persistent, tma_needs_hopper),
    default_fn=default,
    seeds_fn=seeds,
)


def _mm(inputs: Any) -> tuple[Any, Any, Any, str]:
    return inputs["a"], inputs["b"], inputs.get("bias"), inputs.get("epilogue", "none")


def _launch(inputs: Any, config: Any) -> Any:
    a, b, bias, epilogue = _mm(inputs)
    return k_matmul.matmul(a, b, config, bias=bias, epilogue=epilogue)


ACTIVATIONS = {None: "", "relu": "relu", "gelu": "gelu"}


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None) -> tuple[Any, ...]:
    """a @ b (+ bias) (then relu or gelu), for 2-D a (M, K) and b (K, N); the output has a's dtype."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r} is not supported; accepted: None, 'relu', 'gelu'")
    act = ACTIVATIONS[activation]
    return a, b, bias, ("bias_" + act if act else "bias") if bias is not None else (act or "none")


LIBRARY = LibraryCall(
    face=matmul, tensors=(0, 1, 2), launch_args=(0, 1, 2),
    signature=lambda a, b, bias, epilogue: (tensor_signature(a), tensor_signature(b), tensor_signature(bias), epilogue),
    inputs=lambda a, b, bias, epilogue: {"a": a, "b": b, "bias": bias, "epilogue": epilogue},
    prepare=lambda a, b, bias, epilogue, config: k_matmul.prepare(a, b, config, bias, epilogue),
    run=lambda a, b, bias, epilogue, config: k_matmul.matmul(a, b, config, bias=bias, epilogue=epilogue),
    torch_op=k_matmul.baseline,
)

OP: TunableOp[MatmulProblem] = TunableOp(
    name="matmul", problem_type=MatmulProblem, space=SPACE, dtypes=DTYPES,
    call="autotuner.matmul(a, b, bias, activation=None)",
    description="C = A @ B (+ bias) (then relu or gelu), for row-major A[M, K] and B[K, N]",
    options=(Option("epilogue", EPILOGUES, "none", "none, bias, bias_relu, bias_gelu, relu or gelu"),),
    launch=_launch,
    make_inputs=make_inputs, problem_from_inputs=problem_from_inputs,
    reference=lambda inputs: k_matmul.reference(*_mm(inputs)), tolerance=DOT_TOLERANCE,
    sources=(k_matmul, k_matmul_tiles, k_matmul_tma, _checks), flops=flops, bytes_moved=bytes_moved, elements=elements,
    baseline=lambda inputs: k_matmul.baseline(*_mm(inputs)),
    library=LIBRARY,
    exports={"vllm": matmul_vllm.vllm_files},
    examples=(Example("37x29x53"), Example("130x70x90", {"epilogue": "bias_gelu"}), Example("33x65x17", {"epilogue": "bias"}),
              Example("19x45x40", {"epilogue": "bias_relu"}), Example("23x40x50", {"epilogue": "gelu"}),
              Example("9x33x20", {"epilogue": "relu"})),
    gpu_examples=(Example("4096x4096x4096", dtype="float16"), Example("8192x8192x8192", dtype="bfloat16"),
                  Example("32x4096x4096", dtype="float16"), Example("1000x1000x1000", dtype="float32"),
                  Example("4096x4096x4096", {"epilogue": "bias_gelu"}, "float16"),
                  Example("2049x1023x511", {"epilogue": "bias_relu"}, "bfloat16"),
                  Example("1024x1024x1024", dtype="float16")),
)
