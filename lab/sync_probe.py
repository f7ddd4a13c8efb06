"""Where a SYNC softmax's wait goes (an investigation, kept in history only): one kernel, each part switched on or
off. MODE 0: publish (max, sum) as one word, poll the row's words, combine; 1: publish only, local stats; 2: neither
(local stats: the one-pass floor, wrong results). NS: a nanosleep between polls. LEAVE: a counter per row after the
stores (acq_rel), its last program zeroing the words (the reset); LEAVE=0 zeroes them between launches instead.
Run on a GPU: python3 lab/sync_probe.py."""
import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
from kernels._counters import zeroed_counters  # noqa: E402
from kernels.softmax import _online_stats  # noqa: E402


@triton.jit
def _pack(m, s):
    return (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (s.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)


@triton.jit
def _nap(t, NS: tl.constexpr):
    return tl.inline_asm_elementwise(f"nanosleep.u32 {NS};\n mov.u32 $0, $1;", "=r,r", [t], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def probe(x_ptr, y_ptr, count_ptr, n_cols, CHUNK, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, MODE: tl.constexpr,
          NS: tl.constexpr, LEAVE: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    start = part * CHUNK
    end = tl.minimum(start + CHUNK, n_cols)
    x_row = x_ptr + row.to(tl.int64) * n_cols
    c = start + tl.arange(0, BLOCK_N)
    x = tl.load(x_row + c, mask=c < end, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    m_safe = tl.where(m == -float("inf"), 0.0, m)
    s = tl.sum(tl.exp(x - m_safe), axis=0)
    words = count_ptr.to(tl.pointer_type(tl.int64)) + row.to(tl.int64) * SPLIT
    m_row = m_safe
    s_row = s
    if MODE < 2:
        tl.atomic_xchg(words + part, _pack(m, s), sem="relaxed", scope="gpu")
    if MODE == 0:
        parts = tl.load(words + tl.arange(0, SPLIT), volatile=True)
        spins = 0
        while (tl.min((parts != 0).to(tl.int32), axis=0) == 0) & (spins < 256):
            if NS > 0:
                spins = _nap(spins, NS)
            parts = tl.load(words + tl.arange(0, SPLIT), volatile=True)
            spins += 1
        if tl.min((parts != 0).to(tl.int32), axis=0) == 1:
            m_parts = (parts >> 32).to(tl.int32).to(tl.float32, bitcast=True)
            m_row = tl.max(m_parts, axis=0)
            m_row = tl.where(m_row == -float("inf"), 0.0, m_row)
            s_row = tl.sum(parts.to(tl.int32).to(tl.float32, bitcast=True) * tl.exp(m_parts - m_row), axis=0)
        else:
            m_row, s_row = _online_stats(x_row, 0, n_cols, BLOCK_N)
            m_row = tl.where(m_row == -float("inf"), 0.0, m_row)
    y = tl.exp(x - m_row) * (1.0 / s_row)
    tl.store(y_ptr + row.to(tl.int64) * n_cols + c, y.to(y_ptr.dtype.element_ty), mask=c < end)
    if MODE < 2:
        left_ptr = count_ptr + 2 * SPLIT * tl.num_programs(0) + row
        if LEAVE:
            if tl.atomic_add(left_ptr, 1, sem="acq_rel", scope="gpu") == SPLIT - 1:
                tl.store(words + tl.arange(0, SPLIT), tl.zeros((SPLIT,), tl.int64))
                tl.atomic_xchg(left_ptr, 0, sem="relaxed", scope="gpu")


FLUSH = torch.empty(128 * 2**20, dtype=torch.int32, device="cuda")


def timeit(fn, reps=60, pre=None):
    """Median us of one launch, CUDA events around it, the L2 flushed before (and `pre` run outside the events)."""
    fn()
    torch.cuda.synchronize()
    ev = []
    for _ in range(reps):
        FLUSH.zero_()
        if pre:
            pre()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        ev.append((a, b))
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    return t[len(t) // 2] * 1000


out = {}
cases = {(8, 151936, torch.float32): [(32, 8192, 4), (64, 4096, 2)],
         (4, 262144, torch.bfloat16): [(32, 8192, 4), (64, 4096, 4)],
         (32, 128256, torch.bfloat16): [(4, 32768, 16), (16, 8192, 4)],
         (64, 32000, torch.bfloat16): [(4, 8192, 4), (8, 4096, 4)],
         (1, 128256, torch.float32): [(32, 4096, 4), (16, 8192, 4)]}
for (rows, cols, dt), cfgs in cases.items():
    x = torch.randn(rows, cols, device="cuda", dtype=dt) * 4
    ref = torch.softmax(x.float(), -1)
    y = torch.empty_like(x)
    res = {"copy": timeit(lambda: y.copy_(x))}
    for split, blk, w in cfgs:
        cnt = zeroed_counters(x.device, (2 * split + 1) * rows)
        for mode, ns, leave in ((0, 0, 1), (0, 0, 0), (0, 40, 1), (0, 200, 1), (0, 1000, 1), (1, 0, 1), (1, 0, 0),
                                (2, 0, 0)):
            def f():
                probe[(rows, split)](x, y, cnt, cols, blk, BLOCK_N=blk, SPLIT=split, MODE=mode, NS=ns, LEAVE=leave,
                                     num_warps=w)
            f()
            torch.cuda.synchronize()
            if not leave:
                cnt.zero_()
            bad = "" if mode or torch.allclose(y.float(), ref, atol=1e-2, rtol=1e-2) else " BAD"
            res[f"s{split} b{blk} w{w} mode{mode} ns{ns} leave{leave}{bad}"] = timeit(f, pre=None if leave else cnt.zero_)
    key = f"{rows}x{cols}:{str(dt)[6:]}"
    out[key] = res
    print(f"\n## {key}  copy {res['copy']:.2f} us", flush=True)
    for k, v in res.items():
        print(f"  {k:44s} {v:7.2f} us  {res['copy'] / v:6.1%}")
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "sync_probe.json"), "w"), indent=1)
