"""Hand-picked configs and kernel variants timed side by side with torch, to see what a space should hold. (GPU.)

Each config is checked against the reference first (three launches, so split-K counters are reused), then
timed like `autotuner bench` (CUDA events, L2 flushed, median of 3 calls of time_cuda).

    python benchmarks/variants.py [--only attention,matmul,gelu,softmax]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from autotuner.device import current_device  # noqa: E402
from autotuner.registry import get_op  # noqa: E402
from autotuner.timing import time_cuda  # noqa: E402

gelu_kernel_module = importlib.import_module("kernels.gelu")

DEV = "cuda"


def ms(fn) -> float:  # type: ignore[no-untyped-def]
    return statistics.median(time_cuda(fn).median_ms for _ in range(3))


def sweep(op_name: str, shape: str, dtype: str, configs: list[dict[str, int]], **opts: object) -> None:
    op = get_op(op_name)
    problem = op.parse_problem(shape, dtype, **opts)
    inputs = op.make_inputs(problem, DEV)
    ref = op.reference(inputs)
    torch_ms = ms(lambda: op.baseline(inputs))
    work = op.space_module.flops(problem) if op_name in ("matmul", "attention") else op.space_module.bytes_moved(problem)
    unit = "TFLOP/s" if op_name in ("matmul", "attention") else "GB/s"
    scale = 1e-9 if unit == "TFLOP/s" else 1e-6
    print(f"\n### {op_name} {problem.key}: torch {torch_ms:.4f} ms ({work / torch_ms * scale:.0f} {unit})\n")
    print(f"| config | ms | {unit} | vs torch |")
    print("|---|---|---|---|")
    for cfg in configs:
        try:
            for _ in range(3):
                result = op.check(op.run(inputs, cfg), ref, problem)
                if not result.ok:
                    raise RuntimeError(result.message)
            t = ms(lambda cfg=cfg: op.run(inputs, cfg))
            print(f"| {cfg} | {t:.4f} | {work / t * scale:.0f} | {torch_ms / t:.3f}x |", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"| {cfg} | failed: {str(exc).splitlines()[0][:120]} | | |", flush=True)


def attention(tiles: str = "", tma: str = "0,1", shapes: str = "", l2_shares: str = "", host_desc: str = "") -> None:
    """tiles: 'M,N,warps,stages;...' (a default list if empty); shapes: a filter on the problem names;
    l2_shares: values of kernels.attention.L2_SHARE to compare on causal problems (0: one head at a time);
    host_desc: values of kernels.attention.HOST_DESCRIPTORS to compare (0: every program makes its own)."""
    attention_module = importlib.import_module("kernels.attention")
    picked = [tuple(int(v) for v in t.split(",")) for t in tiles.split(";") if t] or [
        (64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 3), (128, 128, 8, 2), (128, 32, 4, 4),
        (128, 64, 8, 4)]
    for shape, dtype, causal in (("4x32x2048x128", "float16", True), ("4x32x2048x128", "float16", False),
                                 ("1x16x8192x64", "bfloat16", True)):
        if shapes and not any(f in f"{shape}:{'causal' if causal else 'full'}" for f in shapes.split(",")):
            continue
        cfgs = [{"BLOCK_M": m, "BLOCK_N": n, "TMA": t, "num_warps": w, "num_stages": s}
                for (m, n, w, s) in picked for t in map(int, tma.split(","))]
        shares = ([float(x) for x in l2_shares.split(",") if x] or [None]) if causal else [None]
        for share in shares:
            for host in [int(x) for x in host_desc.split(",") if x] or [None]:
                if share is not None:
                    attention_module.L2_SHARE = share
                    print(f"\nL2_SHARE={share}")
                if host is not None:
                    attention_module.HOST_DESCRIPTORS = bool(host)
                    print(f"\nHOST_DESCRIPTORS={bool(host)}")
                sweep("attention", shape, dtype, cfgs, causal=causal)


def matmul() -> None:
    base = {"GROUP_M": 1, "num_warps": 4}
    skinny = [{"BLOCK_M": 32, "BLOCK_N": n, "BLOCK_K": k, "SPLIT_K": sk, "num_stages": st, **base}
              for (n, k, st) in ((64, 128, 4), (32, 128, 4), (64, 64, 5), (128, 64, 4)) for sk in (1, 2, 4, 8)]
    sweep("matmul", "32x4096x4096", "float16", skinny)
    small = [{"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": sk, "num_warps": w, "num_stages": st}
             for (m, n, w, st) in ((64, 128, 4, 5), (128, 128, 8, 4), (128, 64, 4, 4), (64, 64, 4, 4))
             for sk in (1, 2, 4)]
    sweep("matmul", "1024x1024x1024", "float16", small)


@triton.jit
def gelu_tanh(x):
    """kernels.gelu's tanh formula (float32 in and out), for the variants below. kernels/gelu.py keeps its own
    copy inline: a stored result is exact only while its kernel module's source is unchanged."""
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return x / (1.0 + tl.exp(-2.0 * u))


@triton.jit
def _gelu_stream_block(x_ptr, y_ptr, offs, n):
    """One block with streaming cache hints: loads evicted first, stores not kept (.cs)."""
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(y_ptr + offs, gelu_tanh(x).to(y_ptr.dtype.element_ty), mask=mask, cache_modifier=".cs")


@triton.jit
def _gelu_stream(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    _gelu_stream_block(x_ptr, y_ptr, tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE), n)


@triton.jit
def _gelu_persistent(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    step = tl.num_programs(0).to(tl.int64) * BLOCK_SIZE
    for start in range(tl.program_id(0).to(tl.int64) * BLOCK_SIZE, n, step):
        _gelu_stream_block(x_ptr, y_ptr, start + tl.arange(0, BLOCK_SIZE), n)


@triton.jit
def _gelu_tma(x_desc, y_desc, BR: tl.constexpr):
    """Tiles of a (rows, 256) view move through the tensor memory accelerator (Hopper bulk copies)."""
    row = tl.program_id(0) * BR
    x = x_desc.load([row, 0])
    y_desc.store([row, 0], gelu_tanh(x.to(tl.float32)).to(x.dtype))


@triton.jit
def _read_only(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    total = tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32))
    tl.store(out_ptr + tl.program_id(0), total)


@functools.cache
def _read_flush_buffer() -> torch.Tensor:
    return torch.ones(64 << 20, dtype=torch.float32, device=DEV)  # 256 MiB


def _time_clean_l2(fn, reps: int = 200) -> float:  # type: ignore[no-untyped-def]
    """Median ms with the L2 emptied by reading a 256 MiB buffer (clean lines) instead of writing one (dirty)."""
    buf = _read_flush_buffer()
    fn()
    times = []
    for _ in range(reps):
        buf.sum()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _gelu_floors(x: torch.Tensor, y: torch.Tensor, bytes_: int) -> None:
    """What the memory system gives for these bytes: read only, write only, and each measure again with the
    L2 emptied by a read instead of the usual write (whose dirty lines must drain during the timed launch)."""
    n = x.numel()
    sums = torch.empty(triton.cdiv(n, 4096), dtype=torch.float32, device=DEV)
    read = lambda: _read_only[(triton.cdiv(n, 4096),)](x, sums, n, 4096, num_warps=8)  # noqa: E731
    write = lambda: y.fill_(1.0)  # noqa: E731
    half = bytes_ / 2
    for name, fn, nbytes in (("read only (Triton sum per block)", read, half), ("write only (fill_)", write, half)):
        t = ms(fn)
        print(f"| {name} | {t:.4f} | {nbytes / t * 1e-6:.0f} | (floor) |", flush=True)
    runs = [("torch copy_", lambda: y.copy_(x), bytes_), ("write only (fill_)", write, half),
            ("torch gelu", lambda: torch.nn.functional.gelu(x, approximate="tanh"), bytes_)]
    for b, w in ((1024, 1), (1024, 4), (2048, 4), (1024, 8)):
        cfg = {"BLOCK_SIZE": b, "num_warps": w, "num_stages": 1}
        runs.append((f"kernels.gelu {b} w{w}", lambda cfg=cfg: gelu_kernel_module.gelu(x, cfg), bytes_))
    for name, fn, nbytes in runs:
        t = _time_clean_l2(fn)
        print(f"| {name}, L2 emptied by a read | {t:.4f} | {nbytes / t * 1e-6:.0f} | |", flush=True)


def _gelu_variants(shape: str, dtype: str, sms: int) -> None:
    op = get_op("gelu")
    problem = op.parse_problem(shape, dtype)
    x = op.make_inputs(problem, DEV)["x"]
    y = torch.empty_like(x)
    ref = torch.nn.functional.gelu(x.float(), approximate="tanh")
    n = x.numel()
    runs = {f"streaming hints, block {b} w{w}": (lambda b=b, w=w: _gelu_stream[(triton.cdiv(n, b),)](x, y, n, b, num_warps=w))
            for (b, w) in ((1024, 4), (2048, 4), (4096, 8))}
    runs.update({f"persistent {k}x{sms} programs, block {b} w{w}":
                 (lambda k=k, b=b, w=w: _gelu_persistent[(k * sms,)](x, y, n, b, num_warps=w))
                 for (k, b, w) in ((4, 2048, 8), (8, 1024, 4), (16, 1024, 4), (8, 4096, 8))})
    if n % 256 == 0:
        x2, y2 = x.view(-1, 256), y.view(-1, 256)
        for br, w in ((16, 4), (32, 4), (32, 8), (64, 8)):
            xd, yd = (TensorDescriptor(t, list(t.shape), [256, 1], [br, 256]) for t in (x2, y2))
            runs[f"TMA tiles {br}x256 w{w}"] = (lambda xd=xd, yd=yd, br=br, w=w:
                                                 _gelu_tma[(triton.cdiv(n // 256, br),)](xd, yd, br, num_warps=w))
    bytes_ = op.space_module.bytes_moved(problem)
    t = ms(lambda: y.copy_(x))  # the same bytes read and written, no arithmetic: what no GELU can beat
    print(f"| torch copy_ of the same tensor | {t:.4f} | {bytes_ / t * 1e-6:.0f} | (floor) |", flush=True)
    _gelu_floors(x, y, bytes_)
    for name, fn in runs.items():
        try:
            fn()
            err = (y.float() - ref).abs().max().item()
            t = ms(fn)
            print(f"| {name} | {t:.4f} | {bytes_ / t * 1e-6:.0f} | max err {err:.1e} |", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"| {name} | failed: {str(exc).splitlines()[0][:120]} | | |", flush=True)


def _copy_1gib() -> None:
    """The copy of 1 GiB that autotuner.peaks measures, timed after each kind of L2 flush."""
    src = torch.empty(1 << 29, dtype=torch.float16, device=DEV)
    dst = torch.empty_like(src)
    for name, t in (("L2 flushed by a write (the usual)", ms(lambda: dst.copy_(src))),
                    ("L2 emptied by a read", _time_clean_l2(lambda: dst.copy_(src), reps=20))):
        print(f"copy_ of 1 GiB, {name}: {t:.4f} ms, {4 * src.numel() / t * 1e-6:.0f} GB/s")


def gelu() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    _copy_1gib()
    for shape, dtype in (("4096x4096", "float16"), ("16777216", "float32")):
        sweep("gelu", shape, dtype, [{"BLOCK_SIZE": b, "num_warps": w, "num_stages": 1}
                                     for (b, w) in ((1024, 4), (2048, 4), (4096, 8), (8192, 8))])
        _gelu_variants(shape, dtype, sms)


def softmax() -> None:
    cfgs = [{"BLOCK_N": b, "ROWS": 1, "num_warps": w, "num_stages": s}
            for b in (1024, 2048, 4096, 8192, 16384) for w in (4, 8, 16) for s in (1, 2)
            if 32 * w <= b and b // (32 * w) <= 64]
    cfgs.append({"BLOCK_N": 32768, "ROWS": 1, "num_warps": 16, "num_stages": 1})
    sweep("softmax", "1024x32768", "float32", cfgs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="attention,matmul,gelu,softmax")
    ap.add_argument("--attention-tiles", default="", help="'M,N,warps,stages;...' for the attention part")
    ap.add_argument("--attention-tma", default="0,1")
    ap.add_argument("--attention-shapes", default="", help="e.g. '2048x128:causal,2048x128:full'")
    ap.add_argument("--attention-l2-shares", default="", help="e.g. '0,0.5' (causal problems)")
    ap.add_argument("--attention-host-desc", default="", help="e.g. '1,0' (launcher-made TMA descriptors or not)")
    args = ap.parse_args()
    print(current_device().key)
    for part in args.only.split(","):
        if part == "attention":
            attention(args.attention_tiles, args.attention_tma, args.attention_shapes, args.attention_l2_shares,
                      args.attention_host_desc)
        else:
            globals()[part]()


if __name__ == "__main__":
    main()
