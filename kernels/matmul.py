"""Matrix product C[M, N] = A[M, K] @ B[K, N] (+ bias[N]) (+ activation), fp32 accumulation, in three kinds of
program: pointers and TMA a tile per program (both with split-K), and persistent TMA (kernels/matmul_tma.py). How each
works and why it is in the space: docs/design/kernels.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels._backend import dot_needs_upcast, gpu_properties, sm_count
from kernels._checks import check_config, check_pow2, check_same_device, check_tensor
from kernels._counters import zeroed_counters
from kernels._descriptors import ensure_allocator
from kernels._direct import Launcher, new_output  # (_checks.new_output, allocating faster)
from kernels._torch import lazy
from kernels.matmul_tiles import _epilogue, _grouped_tile, _k_slice, _split_sum
from kernels.matmul_tma import matmul_tma_kernel, matmul_tma_persistent_kernel

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

DTYPES = ("float16", "bfloat16", "float32")  # by name: declaring a kernel imports no torch (kernels._torch)
EPILOGUES = ("none", "bias", "bias_relu", "bias_gelu", "relu", "gelu")
PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
# tunable, with the value a config that leaves it out means
OPTIONAL = {"SPLIT_K": 1, "TMA": 0, "SUBTILE": 0, "TAIL_SPLIT": 0, "FLATTEN": 0, "DEVICE_DESC": 0}
# Programs sharing one output tile at most: any count, not only powers of two (36 tiles fill 108 of 132 SMs at 3).
MAX_SPLIT_K = 16
TMA_KINDS = (0, 1, 2, 3)  # pointers; TMA, a tile per program; TMA, a program per SM; that, warp-specialized


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
    k_first, k_last = _k_slice(K, BLOCK_K, SPLIT_K)
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
    if SPLIT_K > 1:  # the tile's last program to arrive stores it
        acc, last = _split_sum(acc, ws_ptr, count_ptr, pid, BLOCK_M, BLOCK_N, SPLIT_K)
        c_mask = c_mask & (tl.arange(0, BLOCK_M)[:, None] < tl.where(last, BLOCK_M, 0))

    acc = _epilogue(acc, bias_ptr, offs_n, N, EPILOGUE)
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=c_mask)


def persistent_unsupported(config: Mapping[str, Any], float32: bool) -> str | None:
    """Why a config's SUBTILE, TAIL_SPLIT, FLATTEN, DEVICE_DESC or warp specialization cannot run (None: it can):
    SUBTILE is the persistent kernels', TAIL_SPLIT and FLATTEN the plain persistent kernel's, DEVICE_DESC the TMA
    kernels', and TMA=3 needs 8 warps and 16-bit operands. The launcher and the space refuse such a config with it."""
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
    check_pow2("matmul", cfg, ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    if not 1 <= cfg["SPLIT_K"] <= MAX_SPLIT_K:  # (an int: check_config)
        raise ValueError(f"matmul: config['SPLIT_K'] must be from 1 to {MAX_SPLIT_K}, got {cfg['SPLIT_K']}")
    M, K = a.shape
    N = b.shape[1]
    dtype, device = a.dtype, a.device
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    split = cfg["SPLIT_K"]
    if cfg["TMA"] not in TMA_KINDS:
        raise ValueError(f"matmul: config['TMA'] must be one of {', '.join(map(str, TMA_KINDS))} (0 pointers, 1 TMA, "
                         f"2 persistent TMA, 3 persistent TMA warp-specialized), got {cfg['TMA']}")
    if cfg["TMA"] >= 2 and split > 1:
        raise ValueError(f"matmul: TMA={cfg['TMA']} (a program per SM) works with SPLIT_K=1 only, got SPLIT_K={split}")
    unsupported = persistent_unsupported(cfg, float32=dtype == torch.float32)
    if unsupported:
        raise ValueError(f"matmul: {unsupported}")
    warps = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    workspace_size = tiles * split * cfg["BLOCK_M"] * cfg["BLOCK_N"]  # split-K's float32 partials
    if cfg["TMA"] and _tma_ready(a, b) and (N * a.element_size()) % 16 == 0:  # C is new: its rows align as N does
        bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
        device_desc = cfg["DEVICE_DESC"] == 1
        if device_desc:
            ensure_allocator()  # the kernel's descriptors are written to scratch memory
        common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], EPILOGUE=EPILOGUES.index(epilogue),
                      UPCAST=dot_needs_upcast(dtype), DEVICE_DESC=device_desc, **warps)
        tail, persistent = False, cfg["TMA"] >= 2
        if not persistent:
            tma = Launcher(matmul_tma_kernel, (tiles, split), dict(common, SPLIT_K=split))
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
            bias_or_c = bias if bias is not None else c
            # after the bias: the persistent kernel's half-width descriptors, or the one-tile kernel's split-K state
            extra = (c, c) if persistent else _split_state(split, workspace_size, tiles, c, device)
            if device_desc:  # the kernel makes its descriptors from the matrices
                tma(a, b, c, bias_or_c, *extra, M, N, K, *desc_strides)
                return c
            c_desc = TensorDescriptor.from_tensor(c, c_block)
            if tail:  # the last wave's half-width tiles
                halves: tuple[Any, ...] = (TensorDescriptor.from_tensor(b, [bk, bn // 2]),
                                           TensorDescriptor.from_tensor(c, [bm, bn // 2]))
            else:
                halves = (c_desc, c_desc) if persistent else extra  # (unused by the persistent kernel)
            tma(TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]), c_desc,
                bias_or_c, *halves, M, N, K, *desc_strides)
            return c

        return launch_tma
    strides = (a.stride(0), a.stride(1), b.stride(0), b.stride(1), N, 1)
    pointers = Launcher(matmul_kernel, (tiles, split), dict(
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
        SPLIT_K=split, EPILOGUE=EPILOGUES.index(epilogue), EVEN_K=K % cfg["BLOCK_K"] == 0,
        UPCAST=dot_needs_upcast(dtype), **warps))

    def launch(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        c = new_output((M, N), dtype, device)
        state = _split_state(split, workspace_size, tiles, c, device)
        pointers(a, b, c, bias if bias is not None else c, *state, M, N, K, *strides)
        return c

    return launch


def _split_state(split: int, workspace_size: int, tiles: int, c: torch.Tensor,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A split-K launch's workspace for its partials (new each call) and its tiles' arrival counters on `device`
    (kept at zero between launches); c in both places where there is no split."""
    if split == 1:
        return c, c  # unused
    return torch.empty(workspace_size, dtype=torch.float32, device=device), zeroed_counters(device, tiles)


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
