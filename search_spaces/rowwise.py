"""Row-wise reductions over the last dimension (softmax, layernorm): a problem is (rows, cols, dtype); a program handles
ROWS rows as a [ROWS, BLOCK_N] tile, looping in BLOCK_N chunks when BLOCK_N < cols."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kernels._rows import hold16_unsupported
from kernels._torch import lazy
from kernels.softmax import PERSIST_STAGES, SPLITS, split_unsupported
from search_spaces.problem import (
    ELEMENT_BYTES,
    ProblemBase,
    dims_pattern,
    dims_str,
    normal,
    parse_dims,
    parse_dtype,
    pow2_bucket,
    seeded,
    torch_dtype_of,
)
from search_spaces.space import Config, DeviceLimits, Param, Space, clamp, next_pow2, pow2_range

if TYPE_CHECKING:
    import torch
    from typing_extensions import Self
else:
    torch = lazy(__name__)

DTYPES = ("float16", "bfloat16", "float32")
MAX_PER_THREAD = 64  # fp32 elements of the tile held per thread before registers spill


@dataclass(frozen=True)
class RowwiseProblem(ProblemBase):
    rows: int
    cols: int
    dtype: str = "float16"
    layout: ClassVar[str] = "ROWSxCOLS (the last dimension is reduced), e.g. 4096x4096"
    shape_pattern: ClassVar[str] = dims_pattern((1, 2, 3, 4, 5))

    @classmethod
    def parse(cls, shape: object, dtype: object = "float16") -> Self:
        """'ROWSxCOLS', or more dimensions whose leading ones are flattened into rows."""
        dims = parse_dims(shape, (1, 2, 3, 4, 5), cls.layout)
        rows = 1
        for d in dims[:-1]:
            rows *= d
        return cls(rows, dims[-1], parse_dtype(dtype, DTYPES))

    @property
    def shape(self) -> str:
        return dims_str(self.rows, self.cols)

    @property
    def key(self) -> str:
        return f"{self.shape}:{self.dtype}"

    def dims(self) -> tuple[int, ...]:
        return (self.rows, self.cols)

    def bucket(self) -> Self:
        """Rows by powers of two (a batch's row count varies; the row length is the kernel's shape)."""
        return dataclasses.replace(self, rows=pow2_bucket(self.rows))

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype_of(self.dtype)


def random_rows(p: RowwiseProblem, device: str, scale: float = 2.0, offset: float = 0.0) -> torch.Tensor:
    """`scale * N(0, 1)` rows in the problem's dtype, then `offset` added in that dtype."""
    x = normal((p.rows, p.cols), seeded(device, 0), device, p.torch_dtype, scale=scale)
    return x + offset if offset and str(device) != "meta" else x


def element_bytes(p: RowwiseProblem) -> int:
    return ELEMENT_BYTES[p.dtype]


def _block_vs_row(c: Config, p: RowwiseProblem, d: DeviceLimits) -> str | None:
    useful = max(32, next_pow2(p.cols))
    if c["BLOCK_N"] > useful:
        return f"BLOCK_N={c['BLOCK_N']} is larger than useful for {p.cols} columns (at most {useful})"
    return None


def _rows_vs_problem(c: Config, p: RowwiseProblem, d: DeviceLimits) -> str | None:
    if c["ROWS"] > next_pow2(p.rows):
        return f"ROWS={c['ROWS']} is more rows per program than the problem has ({p.rows})"
    return None


def _per_thread(c: Config) -> int:
    """Elements of a config's [ROWS, BLOCK_N] tile each thread holds (0: fewer elements than threads)."""
    return c["ROWS"] * c["BLOCK_N"] // (32 * c["num_warps"])


def _warps_vs_tile(c: Config, p: RowwiseProblem, d: DeviceLimits) -> str | None:
    per_thread = _per_thread(c)
    if per_thread == 0:
        return f"a {c['ROWS']}x{c['BLOCK_N']} tile has fewer elements than {c['num_warps']} warps have threads"
    if per_thread > MAX_PER_THREAD:
        return f"a {c['ROWS']}x{c['BLOCK_N']} tile over {c['num_warps']} warps puts {per_thread} elements in each thread's registers (at most {MAX_PER_THREAD})"
    return None


def _stages_need_loop(c: Config, p: RowwiseProblem, d: DeviceLimits) -> str | None:
    if c["num_stages"] > 1 and c["BLOCK_N"] >= -(-p.cols // c.get("SPLIT", 1)):
        return "num_stages > 1 pipelines a loop, and with BLOCK_N covering the row (or its chunk) there is none"
    return None


def _stages_fit_smem(c: Config, p: RowwiseProblem, d: DeviceLimits) -> str | None:
    """A pipelined loop stages tiles ahead in shared memory: num_stages - 1 of them, the PERSIST row loop
    PERSIST_STAGES - 1."""
    ahead = PERSIST_STAGES - 1 if c.get("PERSIST", 0) else c["num_stages"] - 1
    staged = ahead * c["ROWS"] * min(c["BLOCK_N"], next_pow2(p.cols)) * element_bytes(p)
    if staged > d.smem_per_block:
        return (f"{ahead} {c['ROWS']}x{c['BLOCK_N']} tiles staged ahead take {staged} bytes of shared memory, over "
                f"the device's {d.smem_per_block}")
    return None


def _persist_needs_rows(c: Config, p: RowwiseProblem, d: DeviceLimits) -> str | None:
    """PERSIST=k runs k programs per SM over the row blocks, each held whole (a row streamed in chunks has its own
    loop to pipeline): pointless where the programs would have one block each."""
    if c.get("PERSIST", 0) and c["BLOCK_N"] < p.cols:
        return f"PERSIST={c['PERSIST']} walks rows held whole; BLOCK_N={c['BLOCK_N']} streams {p.cols} columns"
    blocks = -(-p.rows // c["ROWS"])
    if c.get("PERSIST", 0) > 1 and c["PERSIST"] // 2 * d.sm_count >= blocks:
        return (f"PERSIST={c['PERSIST']}: {c['PERSIST']} programs on each of {d.sm_count} SMs for {blocks} row blocks "
                f"(PERSIST={c['PERSIST'] // 2} already gives each program at most one)")
    return None


# HOLD16=1 only where a thread holds at least this many elements of a 16-bit row held whole: it saves registers,
# and with fewer elements a thread's registers are not what limits the kernel (with 16 per thread it lost a little:
# benchmarks/suite.py).
HOLD16_MIN_PER_THREAD = 32


def _hold16_holds_many(c: Config, p: RowwiseProblem, d: DeviceLimits) -> str | None:
    """HOLD16=1 keeps a 16-bit row held whole as loaded between its passes (kernels/_rows.held)."""
    if not c.get("HOLD16", 0):
        return None
    unsupported = hold16_unsupported(c["HOLD16"], element_bytes(p), c["BLOCK_N"], p.cols, c.get("SPLIT", 1))
    if unsupported:
        return unsupported
    per_thread = _per_thread(c)
    if per_thread < HOLD16_MIN_PER_THREAD:
        return (f"HOLD16=1 saves registers where a thread holds many elements; a {c['ROWS']}x{c['BLOCK_N']} tile "
                f"over {c['num_warps']} warps puts {per_thread} in each (at least {HOLD16_MIN_PER_THREAD})")
    return None


# A floor on the columns per chunk when rows are cut over programs (chosen, not measured: below it a program's
# share of a row is a few KiB, less than its partials and launch cost are worth).
MIN_COLS_PER_SPLIT = 1024


# What an SM holds at once, on the safe side for NVIDIA GPUs from sm_80: 65536 registers and at least 1536 threads
# (sm_86/89; 2048 on sm_80/90), at most 32 programs. A SYNC program keeps about two registers per element of its
# chunk (the chunk in float32 and what its exponentials need) besides a fixed part. An estimate too generous for some
# device only costs time: programs that wait SPIN_LIMIT polls read their rows themselves, correct and slower.
SM_REGISTERS, SM_THREADS, SM_PROGRAMS, SYNC_FIXED_REGISTERS = 65536, 1536, 32, 32


def _resident_per_sm(c: Config) -> int:
    """How many SYNC programs of config c one SM holds at once (at least one)."""
    threads = 32 * c["num_warps"]
    registers = -(-(2 * c["BLOCK_N"] // threads + SYNC_FIXED_REGISTERS) // 8) * 8  # allocated in units of 8
    return max(1, min(SM_THREADS // threads, SM_REGISTERS // (registers * threads), SM_PROGRAMS))


def _held_block(p: RowwiseProblem, split: int) -> int:
    """The block that holds one of a row's `split` chunks whole (SYNC=1's BLOCK_N)."""
    return next_pow2(-(-p.cols // split))


def _split_needs_few_rows(c: Config, p: RowwiseProblem, d: DeviceLimits) -> str | None:
    """SPLIT=s cuts each row over s programs (softmax's): for rows too few to give every SM a program of their own
    (up to twice the SMs), in chunks of at least MIN_COLS_PER_SPLIT columns: streamed in whole blocks over two
    launches, or (SYNC=1) held in one block by programs that wait for each other, all on the SMs at once."""
    split = c.get("SPLIT", 1)
    unsupported = split_unsupported(c)
    if unsupported or split == 1:
        return unsupported
    if p.rows >= 2 * d.sm_count:
        return f"SPLIT={split}: {p.rows} rows already give each of the device's {d.sm_count} SMs two programs"
    if p.cols // split < MIN_COLS_PER_SPLIT:
        return f"SPLIT={split} leaves {p.cols // split} columns per chunk (at least {MIN_COLS_PER_SPLIT})"
    if c.get("SYNC", 0):
        held = _held_block(p, split)
        if c["BLOCK_N"] != held:
            return f"SYNC=1 holds a chunk of {-(-p.cols // split)} columns in one block: BLOCK_N={held}"
        resident = d.sm_count * _resident_per_sm(c)
        if p.rows * split > resident:
            return (f"SYNC=1: {p.rows} rows x SPLIT={split} programs wait for each other, so all must be on the "
                    f"device's {d.sm_count} SMs at once (at most {resident} of {c['BLOCK_N']} columns over "
                    f"{c['num_warps']} warps)")
    elif c["BLOCK_N"] > p.cols // split:
        return f"SPLIT={split} streams chunks of {p.cols // split} columns, shorter than BLOCK_N={c['BLOCK_N']}"
    return None


def default(p: RowwiseProblem, d: DeviceLimits) -> Config:
    """The whole row in one block (up to 32768 columns), a few rows per program for short rows; a longer row's loop
    pipelined where a tile staged ahead fits the device's shared memory."""
    block = clamp(next_pow2(p.cols), 32, 32768)
    rows = clamp(2048 // block, 1, min(16, next_pow2(p.rows)))
    warps = clamp(rows * block // 1024, 1, 16)
    while rows * block < 32 * warps:
        warps //= 2
    staged = block < p.cols and rows * block * element_bytes(p) <= d.smem_per_block
    return {"BLOCK_N": block, "ROWS": rows, "num_warps": warps, "num_stages": 2 if staged else 1}


def long_rows_seeds(p: RowwiseProblem, d: DeviceLimits) -> list[Config]:
    """Rows of 8k elements or more: a program per SM walking the rows (PERSIST), before it for 16-bit rows a program per
    row held as loaded (HOLD16, from 16384 columns); with fewer rows than SMs, first each row cut over programs in one
    launch (SYNC) and in two (benchmarks/suite.py)."""
    if p.cols < 8192:
        return []
    whole = {"BLOCK_N": next_pow2(p.cols), "ROWS": 1, "num_warps": 16, "num_stages": 1}
    seeds = [{**whole, "PERSIST": 1}]
    if element_bytes(p) == 2:
        seeds.insert(0, {**whole, "PERSIST": 0, "HOLD16": 1})
    if p.rows < d.sm_count:  # few rows: each cut over enough programs for two per SM, in 4096-column blocks
        split = 2
        while split < 64 and p.rows * split < 2 * d.sm_count and p.cols // (2 * split) >= 4096:
            split *= 2
        stages = 2 if p.cols // split > 4096 else 1  # a loop over the chunk to pipeline, or none
        seeds.insert(0, {"BLOCK_N": 4096, "ROWS": 1, "num_warps": 8, "num_stages": stages, "PERSIST": 0,
                         "SPLIT": split})
        # ... and in one launch, as many programs as the SMs hold at once, each holding a chunk of at least 4096
        # columns (64 float32 a thread at most)
        def synced(split: int) -> Config:
            held = _held_block(p, split)
            return {"BLOCK_N": held, "ROWS": 1, "num_warps": clamp(held // 2048, 4, 16), "num_stages": 1,
                    "PERSIST": 0, "SPLIT": split, "SYNC": 1}

        split = 2
        while (split < 64 and p.cols // (2 * split) >= 4096
               and p.rows * 2 * split <= d.sm_count * _resident_per_sm(synced(2 * split))):
            split *= 2
        seeds.insert(0, synced(split))
    return seeds


def make_space(persist: bool = False) -> Space[RowwiseProblem]:
    """The row-wise space, with HOLD16 (both kernels'); `persist`: with the softmax kernel's PERSIST, SPLIT and SYNC
    parameters."""
    return Space(
        params=(
            Param("BLOCK_N", pow2_range(32, 65536)),
            Param("ROWS", (1, 2, 4, 8, 16)),
            Param("num_warps", (1, 2, 4, 8, 16)),
            Param("num_stages", (1, 2)),
            # (PERSIST walks whole rows and SYNC joins a row's chunks: the grid varies the first only without SPLIT
            # and the second only with it; HOLD16=1 is for rows held whole by one program: the grid leaves it out
            # where SPLIT, or for layernorm num_stages, says otherwise. Each binding leaves out configs the
            # constraints would reject: 12,000 points of softmax's grid instead of 38,400, whose enumeration is most of
            # its cost.)
            *((Param("PERSIST", (0, 1, 2, 4), implied=0, only_with=("SPLIT", (1,))),
               Param("SPLIT", SPLITS, implied=1),
               Param("SYNC", (0, 1), implied=0, only_with=("SPLIT", SPLITS[1:]))) if persist else ()),
            Param("HOLD16", (0, 1), implied=0, only_with=("SPLIT", (1,)) if persist else ("num_stages", (1,))),
        ),
        constraints=(_block_vs_row, _rows_vs_problem, _warps_vs_tile, _stages_need_loop, _stages_fit_smem,
                     _hold16_holds_many, *((_persist_needs_rows, _split_needs_few_rows) if persist else ())),
        default_fn=default,
        seeds_fn=long_rows_seeds if persist else None,
    )


def problem_from_x(x: torch.Tensor, cls: type[RowwiseProblem]) -> Any:
    rows = x.numel() // x.shape[-1]
    return cls(rows, x.shape[-1], parse_dtype(x.dtype, DTYPES))
