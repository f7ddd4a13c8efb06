"""What every kind of matmul program shares: which output tile a program computes (grouped order, so tiles
sharing rows of A and columns of B run close together and hit in L2), a split-K program's slice of K and the sum of
its tile's partials, and the epilogue on the float32 accumulator."""

import triton
import triton.language as tl


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
def _k_slice(K, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    """This program's K steps [first, last) in whole BLOCK_K steps: all of K when SPLIT_K == 1, else the
    program_id(1)-th of SPLIT_K slices."""
    k_steps = tl.cdiv(K, BLOCK_K)
    k_first = 0
    k_last = k_steps
    if SPLIT_K > 1:
        per_split = tl.cdiv(k_steps, SPLIT_K)
        k_first = tl.program_id(1) * per_split
        k_last = tl.minimum(k_first + per_split, k_steps)
    return k_first, k_last


@triton.jit
def _split_sum(acc, ws_ptr, count_ptr, tile_id, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               SPLIT_K: tl.constexpr):
    """Output tile `tile_id` shared by SPLIT_K programs, each a slice of its K (the grid's second axis): this
    program's float32 partial into ws[tile_id, split]; the tile's last program to arrive adds the others' to its
    own. Returns (acc, last): acc is the whole tile's sum only where last, and only that program stores the tile.
    The tile's counter is left at zero for the next launch."""
    split = tl.program_id(1)
    tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    ws_tile = ws_ptr + tile_id.to(tl.int64) * SPLIT_K * (BLOCK_M * BLOCK_N)
    tl.store(ws_tile + split * (BLOCK_M * BLOCK_N) + tile, acc)
    # A scalar atomic is issued by one thread: the barrier puts every warp's stores before its release.
    tl.debug_barrier()
    arrived = tl.atomic_add(count_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
    last = arrived == SPLIT_K - 1
    if last:
        for s in range(0, SPLIT_K):
            if s != split:
                acc += tl.load(ws_tile + s * (BLOCK_M * BLOCK_N) + tile, cache_modifier=".cg")
        tl.atomic_xchg(count_ptr + tile_id, 0, sem="relaxed", scope="gpu")  # ready for the next launch
    return acc, last
