# ruff: noqa: B023, E501  (an investigation script, deleted once its finding is kept)
"""Vocabulary-wide softmax rows: does a SYNC program that holds a chunk of two rows, and overlaps one row's exchange
and stores with the other's loads, come nearer a copy than one chunk per program? An investigation, kept in history
only. Run on a GPU with the wheels on PYTHONPATH: python3 lab/pair_probe.py (writes $OUT/pair_probe.json)."""
import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
from autotuner.base.device import current_device  # noqa: E402
from autotuner.base.registry import get_op  # noqa: E402
from kernels import softmax as sm  # noqa: E402

SPIN = 256


@triton.jit
def _stats(x):
    m = tl.max(x, axis=0)
    m_safe = tl.where(m == -float("inf"), 0.0, m)
    return m, tl.sum(tl.exp(x - m_safe), axis=0)


@triton.jit
def _post(words, part, m, s):
    sense = 1 - ((tl.load(words + part, volatile=True) >> 31) & 1)
    word = (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (s.to(tl.int32, bitcast=True).to(tl.int64) & 0x7FFFFFFF)
    tl.atomic_xchg(words + part, word | (sense << 31), sem="relaxed", scope="gpu")
    return sense


@triton.jit
def _wait(words, sense, x_row, n_cols, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, SPIN_LIMIT: tl.constexpr):
    parts = tl.load(words + tl.arange(0, SPLIT), volatile=True)
    spins = 0
    while (tl.min((((parts >> 31) & 1) == sense).to(tl.int32), axis=0) == 0) & (spins < SPIN_LIMIT):
        parts = tl.load(words + tl.arange(0, SPLIT), volatile=True)
        spins += 1
    if tl.min((((parts >> 31) & 1) == sense).to(tl.int32), axis=0) == 1:
        m_parts = (parts >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        m_row = tl.max(m_parts, axis=0)
        m_row = tl.where(m_row == -float("inf"), 0.0, m_row)
        s_row = tl.sum((parts & 0x7FFFFFFF).to(tl.int32).to(tl.float32, bitcast=True) * tl.exp(m_parts - m_row),
                       axis=0)
    else:
        m_row, s_row = sm._online_stats(x_row, 0, n_cols, BLOCK_N)
        m_row = tl.where(m_row == -float("inf"), 0.0, m_row)
    return m_row, 1.0 / s_row


@triton.jit
def pair_kernel(x_ptr, y_ptr, words_ptr, n_cols, stride_xm, stride_ym, half, BLOCK_N: tl.constexpr,
                SPLIT: tl.constexpr, SPIN_LIMIT: tl.constexpr, STAGGER: tl.constexpr):
    ra = tl.program_id(0)
    rb = ra + half
    part = tl.program_id(1)
    c = part * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = c < n_cols
    xa_row = x_ptr + ra.to(tl.int64) * stride_xm
    xb_row = x_ptr + rb.to(tl.int64) * stride_xm
    wa = words_ptr + ra.to(tl.int64) * SPLIT
    wb = words_ptr + rb.to(tl.int64) * SPLIT
    xa = tl.load(xa_row + c, mask=mask, other=-float("inf")).to(tl.float32)
    if STAGGER == 0:
        xb = tl.load(xb_row + c, mask=mask, other=-float("inf")).to(tl.float32)
    ma, sa = _stats(xa)
    sense_a = _post(wa, part, ma, sa)
    if STAGGER == 1:
        xb = tl.load(xb_row + c, mask=mask, other=-float("inf")).to(tl.float32)
    if STAGGER == 0:
        mb, sb = _stats(xb)
        sense_b = _post(wb, part, mb, sb)
    m_a, inv_a = _wait(wa, sense_a, xa_row, n_cols, BLOCK_N, SPLIT, SPIN_LIMIT)
    tl.store(y_ptr + ra.to(tl.int64) * stride_ym + c, (tl.exp(xa - m_a) * inv_a).to(y_ptr.dtype.element_ty), mask=mask)
    if STAGGER == 1:
        mb, sb = _stats(xb)
        sense_b = _post(wb, part, mb, sb)
    m_b, inv_b = _wait(wb, sense_b, xb_row, n_cols, BLOCK_N, SPLIT, SPIN_LIMIT)
    tl.store(y_ptr + rb.to(tl.int64) * stride_ym + c, (tl.exp(xb - m_b) * inv_b).to(y_ptr.dtype.element_ty), mask=mask)


FLUSH = torch.empty(128 * 2**20, dtype=torch.int32, device="cuda")


def timeit(fn, reps=60):
    fn()
    torch.cuda.synchronize()
    ev = []
    for _ in range(reps):
        FLUSH.zero_()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        ev.append((a, b))
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    return t[len(t) // 2] * 1000


def fits(grid, warps, regs, sms):
    per_sm = min(64 // warps, 65536 // (regs * 32 * warps), 32)
    return per_sm > 0 and grid <= sms * per_sm


def main():
    op = get_op("softmax")
    dev = current_device()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = {}
    for shape, dt in (("32x128256", "bfloat16"), ("8x151936", "float32"), ("4x262144", "bfloat16"),
                      ("64x32000", "bfloat16"), ("16x256000", "bfloat16"), ("2x128256", "float32")):
        p = op.parse_problem(shape, dt)
        x = op.make_inputs(p, "cuda")["x"]
        n_rows, n_cols = x.shape
        ref = torch.softmax(x.float(), -1)
        y = torch.empty_like(x)
        res = {"copy": timeit(lambda: y.copy_(x)), "torch.softmax": timeit(lambda: torch.softmax(x, -1))}
        for c in [c for c in op.space.candidates(p, dev) if c.get("SYNC")]:
            f = sm.prepare(x, c)
            t = timeit(lambda: f(x))
            err = (f(x).float() - ref).abs().max().item()
            res[f"now s{c['SPLIT']} b{c['BLOCK_N']} w{c['num_warps']}" + (f" ERR {err:.1e}" if err > 2e-2 else "")] = t
        half = n_rows // 2
        for split in (4, 8, 16, 32, 64):
            block = triton.next_power_of_2(triton.cdiv(n_cols, split))
            if triton.cdiv(n_cols, block) != split:
                continue
            for warps in (2, 4, 8, 16):
                ept = block // (32 * warps)
                if not 4 <= ept <= 64:
                    continue
                for stagger in (0, 1):
                    regs = ept * (2 if stagger == 0 else 1) + 40
                    if not fits(half * split, warps, regs, sms):
                        continue
                    words = torch.zeros(n_rows * split, dtype=torch.int64, device="cuda")

                    def f():
                        pair_kernel[(half, split)](x, y, words, n_cols, x.stride(0), y.stride(0), half, BLOCK_N=block,
                                                   SPLIT=split, SPIN_LIMIT=SPIN, STAGGER=stagger, num_warps=warps,
                                                   num_stages=1)
                    try:
                        t = timeit(f)
                    except Exception as e:  # noqa: BLE001
                        print("failed", shape, split, warps, stagger, type(e).__name__, str(e)[:200], flush=True)
                        continue
                    y.zero_()
                    f()
                    err = (y.float() - ref).abs().max().item()
                    res[f"pair s{split} b{block} w{warps} stagger{stagger}" + (f" ERR {err:.1e}" if err > 2e-2 else "")] = t
        out[f"{shape}:{dt}"] = res
        cp = res["copy"]
        print(f"\n## {shape}:{dt} copy {cp:.2f} us, torch.softmax {res['torch.softmax']:.2f}", flush=True)
        for k, v in sorted(res.items(), key=lambda kv: kv[1])[:10]:
            print(f"  {k:44s} {v:7.2f} us {cp / v:6.1%}")
        best_now = min((v for k, v in res.items() if k.startswith("now") and "ERR" not in k), default=None)
        best_pair = min((v for k, v in res.items() if k.startswith("pair") and "ERR" not in k), default=None)
        print(f"  best now {best_now} pair {best_pair}", flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "pair_probe.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
