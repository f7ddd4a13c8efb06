"""What every kind of matmul program shares: which output tile a program computes (grouped order, so tiles
sharing rows of A and columns of B run close together and hit in L2), and the epilogue on the float32
accumulator."""

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
