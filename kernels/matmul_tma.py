"""Matmul through the tensor memory accelerator (Hopper and later, and the interpreter): a tile per program (TMA=1,
with split-K), a program per SM (TMA=2; warp-specialized TMA=3), descriptors made by the launcher or the kernel
(DEVICE_DESC=1). More: docs/design/kernels.md."""

import triton
import triton.language as tl

from kernels.matmul_tiles import _epilogue, _grouped_tile, _k_slice, _split_sum


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
def _tma_finish(c_desc, acc, bias_ptr, pid_m, pid_n, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                EPILOGUE: tl.constexpr):
    """A whole output tile's epilogue, and the tile out through C's descriptor."""
    acc = _epilogue(acc, bias_ptr, pid_n * BLOCK_N + tl.arange(0, BLOCK_N), N, EPILOGUE)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


@triton.jit
def matmul_tma_kernel(
    a_desc, b_desc, c_desc, bias_ptr,  # DEVICE_DESC: A, B and C themselves; else the launcher's descriptors
    ws_ptr, count_ptr,  # SPLIT_K > 1: the tiles' float32 partials and arrival counters (kernels/matmul_tiles.py)
    M, N, K,
    stride_am, stride_bk, stride_cm,  # DEVICE_DESC only
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    EPILOGUE: tl.constexpr,
    UPCAST: tl.constexpr,
    DEVICE_DESC: tl.constexpr,
):
    """One output tile per program (per SPLIT_K programs, each a slice of K: the grid's second axis), A and B tiles
    loaded and C stored through TMA descriptors."""
    if DEVICE_DESC:
        a_desc, b_desc, c_desc = _device_descriptors(a_desc, b_desc, c_desc, M, N, K, stride_am, stride_bk,
                                                     stride_cm, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_N)
    pid = tl.program_id(0)
    pid_m, pid_n = _grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    k_first, k_last = _k_slice(K, BLOCK_K, SPLIT_K)
    acc = _tma_k_product(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, k_first, k_last, BLOCK_M, BLOCK_N,
                         BLOCK_K, UPCAST)
    if SPLIT_K > 1:
        acc, last = _split_sum(acc, ws_ptr, count_ptr, pid, BLOCK_M, BLOCK_N, SPLIT_K)
        if last:  # a descriptor's store takes no mask: only the tile's last program stores
            _tma_finish(c_desc, acc, bias_ptr, pid_m, pid_n, N, BLOCK_M, BLOCK_N, EPILOGUE)
    else:
        _tma_finish(c_desc, acc, bias_ptr, pid_m, pid_n, N, BLOCK_M, BLOCK_N, EPILOGUE)


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
