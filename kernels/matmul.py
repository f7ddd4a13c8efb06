"""Matrix product C[M, N] = A[M, K] @ B[K, N] (+ bias[N]) (+ activation), fp32 accumulation.

Tiles of BLOCK_M x BLOCK_N are visited in grouped order (GROUP_M rows of tiles at a time) so that tiles
sharing rows of A and columns of B run close together and hit in L2. The output has the input dtype.

Split-K (SPLIT_K > 1, for problems with too few output tiles to fill the GPU, e.g. M=32): SPLIT_K programs
share one output tile, each summing a slice of K. Each writes its float32 partial to a workspace and bumps the
tile's counter; the program that arrives last adds the others' partials, applies the epilogue, writes C and
resets the counter to zero. One launch, no memset: the counters (kernels/_counters.py) are kept per device and
stream and are always left at zero.

TMA (TMA=1, SPLIT_K=1, on Hopper or later GPUs and in the interpreter): tiles of A and B come through the
tensor memory accelerator and C leaves through it, by descriptors the launcher makes over the whole
matrices. Out-of-range rows and columns load as zeros and are not stored. Where a matrix's rows are not
16-byte aligned (or its last dimension is strided), the launcher uses the pointer kernel, with the same result.
The same tiles ran faster through TMA than through pointers (benchmarks/RESULTS.md).

Tail split (TAIL_SPLIT=1, with TMA=2): the tiles of the last, partial wave are computed as twice as many tiles of
half the columns, so it takes half as long where it is less than half full (on 132 SMs, 576 tiles of 128x256 are
4.4 waves: the fifth, a third full, would take a whole tile's time).

Persistent TMA (TMA=2): a program per SM (at most one per tile) walks the tiles NUM_SMS apart in the same
grouped order, so the launch and each program's set-up are paid once per SM rather than once per tile, and
one tile's epilogue overlaps the next one's loads. With SUBTILE=1 their C tile leaves in two halves, so the
store needs half the shared memory (the 128x256x64 tile keeps 4 stages through TMA). TMA=3 is the same loop
warp-specialized by Triton (`tl.range(..., warp_specialize=True)`: producer warps issue the TMA loads, consumer
warps run the MMAs), with 8 warps and 16-bit operands only: on an H100, Triton 3.6 failed to compile 4-warp tiles (a descriptor store's
types) and float32 ones (a WGMMA shape assertion).

Flattened (FLATTEN=1, with TMA=2): Triton pipelines the persistent kernel's tile loop and K loop as one
(`tl.range(..., flatten=True)`), so the next tile's first loads are in flight while this tile's epilogue and
store run; the epilogue finds its tile by a counter of its own (the same tile), as Triton's persistent-matmul
tutorial does. A tile runs faster flattened where its K loop is short against the epilogue, and alike where it is
long (benchmarks/RESULTS.md).

Device-side descriptors (DEVICE_DESC=1, with TMA=1, 2 or 3): the kernel makes its TMA descriptors itself
(`tl.make_tensor_descriptor`, written to scratch memory from Triton's allocator, kernels/_descriptors.py) instead
of the launcher encoding them on the host at every launch; the persistent kernels make theirs once per program.
That saved CPU per call but ran the persistent kernels slower, so matmul's space does not search it
(benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels._backend import dot_needs_upcast, gpu_properties, sm_count
from kernels._checks import check_config, check_pow2, check_same_device, check_tensor, new_output
from kernels._counters import zeroed_counters
from kernels._descriptors import ensure_allocator
from kernels._direct import Launcher
from kernels._torch import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

DTYPES = ("float16", "bfloat16", "float32")  # by name: declaring a kernel imports no torch (kernels._torch)
EPILOGUES = ("none", "bias", "bias_relu", "bias_gelu", "relu", "gelu")
PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
# tunable, with the value a config that leaves it out means
OPTIONAL = {"SPLIT_K": 1, "TMA": 0, "SUBTILE": 0, "TAIL_SPLIT": 0, "FLATTEN": 0, "DEVICE_DESC": 0}
TMA_KINDS = (0, 1, 2, 3)  # pointers; TMA, a tile per program; TMA, a program per SM; that, warp-specialized


@triton.jit
def _grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's (row, column) of output tiles, visited GROUP_M rows of tiles at a time."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    return first_pid_m + ((pid % num_pid_in_group) % group_size_m), (pid % num_pid_in_group) // group_size_m


@triton.jit
def _epilogue(acc, bias_ptr, offs_n, N, EPILOGUE: tl.constexpr):
    """0 none, 1 bias, 2 bias+relu, 3 bias+gelu(tanh), 4 relu, 5 gelu(tanh), on the float32 accumulator."""
    if EPILOGUE == 1 or EPILOGUE == 2 or EPILOGUE == 3:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if EPILOGUE == 2 or EPILOGUE == 4:
        acc = tl.maximum(acc, 0.0)
    if EPILOGUE == 3 or EPILOGUE == 5:
        # gelu(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-2.0 * u))
    return acc


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, count_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    EPILOGUE: tl.constexpr,  # 0 none, 1 bias, 2 bias+relu, 3 bias+gelu(tanh), 4 relu, 5 gelu(tanh)
    EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr,  # interpreter only: bfloat16 dot operands go through float32
):
    pid = tl.program_id(0)
    pid_m, pid_n = _grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Rows/columns past the edge are clamped (wrapped) for loads; they are masked on the store.
    offs_am = tl.max_contiguous(tl.multiple_of(offs_m % M, BLOCK_M), BLOCK_M)
    offs_bn = tl.max_contiguous(tl.multiple_of(offs_n % N, BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # This program's slice of K, in whole BLOCK_K steps (all of K when SPLIT_K == 1).
    k_steps = tl.cdiv(K, BLOCK_K)
    k_first = 0
    k_last = k_steps
    if SPLIT_K > 1:
        per_split = tl.cdiv(k_steps, SPLIT_K)
        k_first = tl.program_id(1) * per_split
        k_last = tl.minimum(k_first + per_split, k_steps)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + (k_first * BLOCK_K + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_first * BLOCK_K + offs_k)[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_first, k_last):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT_K > 1:
        # Partials live in ws[tile, split, BLOCK_M, BLOCK_N]; the last program of the tile to arrive sums them.
        split = tl.program_id(1)
        tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        ws_tile = ws_ptr + pid.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N)
        tl.store(ws_tile + split * (BLOCK_M * BLOCK_N) + tile, acc)
        # A scalar atomic is issued by one thread: the barrier puts every warp's stores before its release.
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel", scope="gpu")
        last = arrived == SPLIT_K - 1
        # Scalar conditions become tile masks by comparison (the interpreter does not broadcast scalar masks).
        for s in tl.static_range(SPLIT_K):
            wanted = tile < tl.where(last & (s != split), BLOCK_M * BLOCK_N, 0)
            acc += tl.load(ws_tile + s * (BLOCK_M * BLOCK_N) + tile, mask=wanted, other=0.0, cache_modifier=".cg")
        tl.atomic_xchg(count_ptr + pid, 0, mask=last, sem="relaxed", scope="gpu")  # ready for the next launch
        c_mask = c_mask & (tile < tl.where(last, BLOCK_M * BLOCK_N, 0))

    acc = _epilogue(acc, bias_ptr, offs_n, N, EPILOGUE)
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def _tma_k_product(a_desc, b_desc, off_m, off_n, k_first, k_last, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, UPCAST: tl.constexpr):
    """The float32 product of the A rows at off_m and the B columns at off_n over the K steps [k_first, k_last)
    (all of K: 0 to cdiv(K, BLOCK_K)), tiles loaded through TMA descriptors."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_first, k_last):
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, off_n])
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _store_tile(c_desc, acc, off_m, off_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SUBTILE: tl.constexpr):
    """The C tile out through its descriptor; with SUBTILE, in two halves of BLOCK_N / 2 columns (half the shared
    memory)."""
    if SUBTILE:
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([off_m, off_n], left.to(c_desc.dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
    else:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def _matrix_descriptor(ptr, rows, cols, stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """DEVICE_DESC: a descriptor made by the program itself over a whole row-major matrix, in BLOCK_R x BLOCK_C
    boxes."""
    return tl.make_tensor_descriptor(ptr, shape=[rows, cols], strides=[stride, 1], block_shape=[BLOCK_R, BLOCK_C])


@triton.jit
def _device_descriptors(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, C_BLOCK_N: tl.constexpr):
    """DEVICE_DESC: the descriptors of A, B and C, C's box C_BLOCK_N columns wide."""
    return (_matrix_descriptor(a_ptr, M, K, stride_am, BLOCK_M, BLOCK_K),
            _matrix_descriptor(b_ptr, K, N, stride_bk, BLOCK_K, BLOCK_N),
            _matrix_descriptor(c_ptr, M, N, stride_cm, BLOCK_M, C_BLOCK_N))


@triton.jit
def matmul_tma_kernel(
    a_desc, b_desc, c_desc, bias_ptr,  # DEVICE_DESC: A, B and C themselves; else the launcher's descriptors
    M, N, K,
    stride_am, stride_bk, stride_cm,  # DEVICE_DESC only
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPILOGUE: tl.constexpr,
    UPCAST: tl.constexpr,
    DEVICE_DESC: tl.constexpr,
):
    """One output tile per program, A and B tiles loaded and C stored through TMA descriptors."""
    if DEVICE_DESC:
        a_desc, b_desc, c_desc = _device_descriptors(a_desc, b_desc, c_desc, M, N, K, stride_am, stride_bk,
                                                     stride_cm, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_N)
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = _tma_k_product(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, 0, tl.cdiv(K, BLOCK_K), BLOCK_M, BLOCK_N,
                         BLOCK_K, UPCAST)
    acc = _epilogue(acc, bias_ptr, pid_n * BLOCK_N + tl.arange(0, BLOCK_N), N, EPILOGUE)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


@triton.jit
def matmul_tma_persistent_kernel(
    a_desc, b_desc, c_desc, bias_ptr, b_half_desc, c_half_desc,  # DEVICE_DESC: A, B, C, bias, and unused twice
    M, N, K,
    stride_am, stride_bk, stride_cm,  # DEVICE_DESC only
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPILOGUE: tl.constexpr,
    UPCAST: tl.constexpr,
    NUM_SMS: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    SUBTILE: tl.constexpr,
    TAIL_SPLIT: tl.constexpr,
    FLATTEN: tl.constexpr,
    DEVICE_DESC: tl.constexpr,
):
    """One program per SM, each walking the output tiles in grouped order, NUM_SMS apart; A and B tiles come
    through TMA descriptors and C leaves through one. With WARP_SPECIALIZE, Triton splits the tile loop into
    warps that load and warps that multiply (Hopper and later).

    With TAIL_SPLIT, the tiles that would make a last, partial wave (num_tiles % NUM_SMS of them) are computed as
    twice as many tiles of half the columns (through the half-width descriptors): where that wave is less than
    half full it takes half as long, and where it is more, more SMs share it.

    With DEVICE_DESC each program makes its descriptors once, before its first tile."""
    pid = tl.program_id(0)
    if DEVICE_DESC:
        a_ptr, b_ptr, c_ptr = a_desc, b_desc, c_desc
        C_BLOCK_N: tl.constexpr = BLOCK_N // 2 if SUBTILE else BLOCK_N
        a_desc, b_desc, c_desc = _device_descriptors(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                                                     BLOCK_M, BLOCK_N, BLOCK_K, C_BLOCK_N)
        if TAIL_SPLIT:  # the last wave's half-width boxes of B and C
            b_half_desc = _matrix_descriptor(b_ptr, K, N, stride_bk, BLOCK_K, BLOCK_N // 2)
            c_half_desc = _matrix_descriptor(c_ptr, M, N, stride_cm, BLOCK_M, BLOCK_N // 2)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    whole_tiles = num_tiles
    if TAIL_SPLIT:
        whole_tiles = num_tiles - num_tiles % NUM_SMS
    k_iters = tl.cdiv(K, BLOCK_K)
    # The epilogue's tile is counted apart from the loads' (the same tile), so that with FLATTEN the software
    # pipeline can run the next tile's first loads while this one's epilogue and store finish.
    tile_c = pid - NUM_SMS
    for tile in tl.range(pid, whole_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _tma_k_product(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, 0, k_iters, BLOCK_M, BLOCK_N, BLOCK_K,
                             UPCAST)
        tile_c += NUM_SMS
        pid_m, pid_n = _grouped_tile(tile_c, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = _epilogue(acc, bias_ptr, off_n + tl.arange(0, BLOCK_N), N, EPILOGUE)
        _store_tile(c_desc, acc, off_m, off_n, BLOCK_M, BLOCK_N, SUBTILE)
    if TAIL_SPLIT:
        HALF_N: tl.constexpr = BLOCK_N // 2
        for half in range(pid, 2 * (num_tiles - whole_tiles), NUM_SMS):
            pid_m, pid_n = _grouped_tile(whole_tiles + half // 2, M, N, BLOCK_M, BLOCK_N, GROUP_M)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N + (half % 2) * HALF_N
            acc = _tma_k_product(a_desc, b_half_desc, off_m, off_n, 0, k_iters, BLOCK_M, HALF_N, BLOCK_K, UPCAST)
            acc = _epilogue(acc, bias_ptr, off_n + tl.arange(0, HALF_N), N, EPILOGUE)
            c_half_desc.store([off_m, off_n], acc.to(c_half_desc.dtype))


def persistent_unsupported(config: Mapping[str, Any], float32: bool) -> str | None:
    """Why a config's SUBTILE, TAIL_SPLIT, FLATTEN, DEVICE_DESC or warp specialization cannot run (None: it can):
    SUBTILE=1 stores the persistent kernels' C tile, TAIL_SPLIT=1 and FLATTEN=1 are the persistent kernel's (not
    warp-specialized: Triton's tutorial leaves flattening off for warp specialization on Hopper), DEVICE_DESC=1
    is for the TMA kernels, and TMA=3 compiles (Triton 3.6, Hopper) with 8 warps and 16-bit operands only. The
    launcher refuses such a config with this reason, and matmul's space rules it out with it."""
    subtile, tma, tail = config.get("SUBTILE", 0), config.get("TMA", 0), config.get("TAIL_SPLIT", 0)
    if subtile not in (0, 1) or (subtile and tma < 2):
        return f"SUBTILE=1 (the C tile stored in halves) is for TMA=2 and 3, got SUBTILE={subtile} with TMA={tma}"
    if tail not in (0, 1) or (tail and tma != 2):
        return f"TAIL_SPLIT=1 (the last wave's tiles split in halves) is for TMA=2, got TAIL_SPLIT={tail} with TMA={tma}"
    flatten = config.get("FLATTEN", 0)
    if flatten not in (0, 1) or (flatten and tma != 2):
        return f"FLATTEN=1 (the tile loop and the K loop pipelined as one) is for TMA=2, got FLATTEN={flatten} with TMA={tma}"
    device_desc = config.get("DEVICE_DESC", 0)
    if device_desc not in (0, 1) or (device_desc and tma < 1):
        return (f"DEVICE_DESC=1 (TMA descriptors made by the kernel) is for TMA=1, 2 and 3, got "
                f"DEVICE_DESC={device_desc} with TMA={tma}")
    if tail and config.get("BLOCK_N", 0) < 32:
        return f"TAIL_SPLIT=1 halves BLOCK_N, which must stay 16 or more for tl.dot: got BLOCK_N={config.get('BLOCK_N')}"
    warps = config.get("num_warps", 4)
    if tma == 3 and (warps != 8 or float32):
        return (f"TMA=3 (warp-specialized) takes 8 warps and float16 or bfloat16 operands, got {warps} warps and "
                f"{'float32' if float32 else 'a 16-bit dtype'}: Triton 3.6 fails to compile the others on Hopper")
    return None


def _tma_ready(*matrices: torch.Tensor) -> bool:
    """Whether TMA descriptors can address these matrices: a Hopper (or later) GPU or the interpreter, the last
    dimension contiguous, 16-byte aligned bases and row strides."""
    props = gpu_properties(matrices[0].device)
    if props is not None and props.capability[0] < 9:
        return False
    return all(t.stride(1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0
               for t in matrices)


def _validate(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, epilogue: str) -> None:
    check_tensor("a", a, DTYPES, ndim=2)
    check_tensor("b", b, DTYPES, ndim=2)
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must have one dtype, got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)} (M, K), b is {tuple(b.shape)} (K, N)")
    if epilogue not in EPILOGUES:
        raise ValueError(f"unknown epilogue {epilogue!r}; accepted: {', '.join(EPILOGUES)}")
    if epilogue.startswith("bias"):
        if bias is None:
            raise ValueError(f"epilogue {epilogue!r} needs a bias of shape ({b.shape[1]},)")
        check_tensor("bias", bias, DTYPES, ndim=1)
        if bias.shape[0] != b.shape[1]:
            raise ValueError(f"bias has shape {tuple(bias.shape)}, expected ({b.shape[1]},) to match N")
    elif bias is not None:
        raise ValueError(f"a bias was given with epilogue {epilogue!r}; use 'bias', 'bias_relu' or 'bias_gelu'")
    check_same_device(a=a, b=b, bias=bias)


def prepare(
    a: torch.Tensor,
    b: torch.Tensor,
    config: Mapping[str, Any],
    bias: torch.Tensor | None = None,
    epilogue: str = "none",
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]:
    """Check the inputs and the config once; the returned launch(a, b, bias) takes tensors like these (dtype,
    shape, strides, device, 16-byte alignment; bias present or None alike) and launches without checking."""
    _validate(a, b, bias, epilogue)
    cfg = check_config(config, PARAMS, "matmul", OPTIONAL)
    check_pow2("matmul", cfg, ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K"))
    M, K = a.shape
    N = b.shape[1]
    dtype, device = a.dtype, a.device
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    split = cfg["SPLIT_K"]
    if cfg["TMA"] not in TMA_KINDS:
        raise ValueError(f"matmul: config['TMA'] must be one of {', '.join(map(str, TMA_KINDS))} (0 pointers, 1 TMA, "
                         f"2 persistent TMA, 3 persistent TMA warp-specialized), got {cfg['TMA']}")
    if cfg["TMA"] and split > 1:
        raise ValueError(f"matmul: TMA={cfg['TMA']} works with SPLIT_K=1 only, got SPLIT_K={split}")
    unsupported = persistent_unsupported(cfg, float32=dtype == torch.float32)
    if unsupported:
        raise ValueError(f"matmul: {unsupported}")
    warps = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if cfg["TMA"] and _tma_ready(a, b) and (N * a.element_size()) % 16 == 0:  # C is new: its rows align as N does
        bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
        device_desc = cfg["DEVICE_DESC"] == 1
        if device_desc:
            ensure_allocator()  # the kernel's descriptors are written to scratch memory
        common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], EPILOGUE=EPILOGUES.index(epilogue),
                      UPCAST=dot_needs_upcast(dtype), DEVICE_DESC=device_desc, **warps)
        tail, persistent = False, cfg["TMA"] >= 2
        if not persistent:
            tma = Launcher(matmul_tma_kernel, (tiles,), common)
        else:
            sms = sm_count(device)
            tail = cfg["TAIL_SPLIT"] == 1 and tiles % sms != 0  # only where the tiles leave a partial wave
            # the tail's tiles % sms tiles become twice as many halves
            tma = Launcher(matmul_tma_persistent_kernel, (min(sms, tiles + (tiles % sms if tail else 0)),),
                           dict(common, NUM_SMS=sms, WARP_SPECIALIZE=cfg["TMA"] == 3, SUBTILE=cfg["SUBTILE"],
                                TAIL_SPLIT=int(tail), FLATTEN=cfg["FLATTEN"]))
        c_block = [bm, bn // 2 if cfg["SUBTILE"] else bn]
        desc_strides = (a.stride(0), b.stride(0), N)  # rows of A, B and C, for descriptors made on the device

        def launch_tma(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
            c = new_output((M, N), dtype, device)
            if device_desc:  # the kernel makes its descriptors from the matrices
                tma(a, b, c, bias if bias is not None else c, *((c, c) if persistent else ()), M, N, K, *desc_strides)
                return c
            c_desc = TensorDescriptor.from_tensor(c, c_block)
            if tail:  # the last wave's half-width tiles
                halves: tuple[Any, ...] = (TensorDescriptor.from_tensor(b, [bk, bn // 2]),
                                           TensorDescriptor.from_tensor(c, [bm, bn // 2]))
            else:
                halves = (c_desc, c_desc) if persistent else ()  # unused
            tma(TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]), c_desc,
                bias if bias is not None else c, *halves, M, N, K, *desc_strides)
            return c

        return launch_tma
    strides = (a.stride(0), a.stride(1), b.stride(0), b.stride(1), N, 1)
    pointers = Launcher(matmul_kernel, (tiles, split), dict(
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
        SPLIT_K=split, EPILOGUE=EPILOGUES.index(epilogue), EVEN_K=K % cfg["BLOCK_K"] == 0,
        UPCAST=dot_needs_upcast(dtype), **warps))
    workspace_size = tiles * split * cfg["BLOCK_M"] * cfg["BLOCK_N"]

    def launch(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        c = new_output((M, N), dtype, device)
        if split > 1:
            workspace = torch.empty(workspace_size, dtype=torch.float32, device=device)
            counters = zeroed_counters(device, tiles)
        else:
            workspace = counters = c  # unused
        pointers(a, b, c, bias if bias is not None else c, workspace, counters, M, N, K, *strides)
        return c

    return launch


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    config: Mapping[str, Any],
    bias: torch.Tensor | None = None,
    epilogue: str = "none",
) -> torch.Tensor:
    """C = epilogue(A @ B + bias). Any strides are accepted; config holds BLOCK_M/N/K, GROUP_M, num_warps,
    num_stages and optionally SPLIT_K (1 when left out) and TMA (0 when left out)."""
    return prepare(a, b, config, bias, epilogue)(a, b, bias)


def reference(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, epilogue: str = "none"
) -> torch.Tensor:
    """torch in float32 (TF32 off), the same epilogue; returned in float32."""
    out = torch.matmul(a.float(), b.float())
    if bias is not None:
        out = out + bias.float()
    if epilogue.endswith("relu"):
        out = torch.relu(out)
    elif epilogue.endswith("gelu"):
        out = torch.nn.functional.gelu(out, approximate="tanh")
    return out


def baseline(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, epilogue: str = "none") -> torch.Tensor:
    """torch eager in the input dtype (cuBLAS), with the same epilogue."""
    out = torch.matmul(a, b)
    if bias is not None:
        out = out + bias
    if epilogue.endswith("relu"):
        out = torch.relu(out)
    elif epilogue.endswith("gelu"):
        out = torch.nn.functional.gelu(out, approximate="tanh")
    return out
