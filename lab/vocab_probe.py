"""Vocabulary-wide softmax before a6d7a74 (an investigation, kept in history only): a copy, torch, the two-launch
SPLIT configs of a sweep and the SYNC ones the space then allowed (one program per SM), against a probe kernel with
any grid: WAIT=0 skips the exchange (each program normalises by its own chunk: the one-pass floor, wrong results),
HOLD=1 keeps 16-bit chunks as loaded; and kernels that only read or only write the same chunks. Ran on a GPU at
54d5fab (its kernels.softmax) with python3 lab/vocab_probe.py; it does not run against later trees."""
import itertools, json, os, sys
import torch, triton, triton.language as tl
sys.path.insert(0, os.getcwd())
from kernels import softmax as sm
from kernels._counters import zeroed_counters

@triton.jit
def probe_sync(x_ptr, y_ptr, ws_ptr, count_ptr, n_cols, stride, CHUNK, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
               WAIT: tl.constexpr, HOLD: tl.constexpr, SPIN_LIMIT: tl.constexpr):
    row = tl.program_id(0); part = tl.program_id(1)
    start = part * CHUNK; end = tl.minimum(start + CHUNK, n_cols)
    x_row = x_ptr + row.to(tl.int64) * stride
    c = start + tl.arange(0, BLOCK_N)
    xr = tl.load(x_row + c, mask=c < end, other=-float("inf"))
    if HOLD:
        m = tl.max(xr, axis=0).to(tl.float32)
    else:
        xr = xr.to(tl.float32)
        m = tl.max(xr, axis=0)
    m_safe = tl.where(m == -float("inf"), 0.0, m)
    s = tl.sum(tl.exp(xr.to(tl.float32) - m_safe), axis=0)
    if WAIT:
        ws = ws_ptr + (row.to(tl.int64) * SPLIT + part) * 2
        tl.store(ws, m); tl.store(ws + 1, s)
        tl.debug_barrier()
        arrived = count_ptr + row * 2
        n = tl.atomic_add(arrived, 1, sem="acq_rel", scope="gpu") + 1
        spins = 0
        while (n < SPLIT) & (spins < SPIN_LIMIT):
            n = tl.atomic_add(arrived, 0, sem="acquire", scope="gpu")
            spins += 1
        parts = (row.to(tl.int64) * SPLIT + tl.arange(0, SPLIT)) * 2
        mp = tl.load(ws_ptr + parts, cache_modifier=".cg")
        m_row = tl.max(mp, axis=0)
        m_row = tl.where(m_row == -float("inf"), 0.0, m_row)
        s_row = tl.sum(tl.load(ws_ptr + parts + 1, cache_modifier=".cg") * tl.exp(mp - m_row), axis=0)
        left = tl.atomic_add(arrived + 1, 1, sem="acq_rel", scope="gpu")
        tl.atomic_xchg(arrived, 0, mask=left == SPLIT - 1, sem="relaxed", scope="gpu")
        tl.atomic_xchg(arrived + 1, 0, mask=left == SPLIT - 1, sem="relaxed", scope="gpu")
    else:
        m_row = m_safe; s_row = s
    y = tl.exp(xr.to(tl.float32) - m_row) / s_row
    tl.store(y_ptr + row.to(tl.int64) * stride + c, y.to(y_ptr.dtype.element_ty), mask=c < end)

@triton.jit
def probe_read(x_ptr, ws_ptr, n_cols, stride, CHUNK, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr):
    row = tl.program_id(0); part = tl.program_id(1)
    start = part * CHUNK; end = tl.minimum(start + CHUNK, n_cols)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for off in range(start, end, BLOCK_N):
        c = off + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + row.to(tl.int64) * stride + c, mask=c < end, other=0.0).to(tl.float32)
    tl.store(ws_ptr + row * SPLIT + part, tl.sum(acc, axis=0))

@triton.jit
def probe_write(y_ptr, n_cols, stride, CHUNK, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr):
    row = tl.program_id(0); part = tl.program_id(1)
    start = part * CHUNK; end = tl.minimum(start + CHUNK, n_cols)
    for off in range(start, end, BLOCK_N):
        c = off + tl.arange(0, BLOCK_N)
        tl.store(y_ptr + row.to(tl.int64) * stride + c, tl.full((BLOCK_N,), 1.0, tl.float32).to(y_ptr.dtype.element_ty), mask=c < end)

FLUSH = None
def timeit(fn, reps=50):
    global FLUSH
    if FLUSH is None:
        FLUSH = torch.empty(128 * 2**20, dtype=torch.int32, device="cuda")
    fn(); torch.cuda.synchronize()
    ev = []
    for _ in range(reps):
        FLUSH.zero_()
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); ev.append((a, b))
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    return t[len(t) // 2] * 1000  # us

def main():
    probs = [(32, 128256, torch.bfloat16), (8, 151936, torch.float32), (128, 128256, torch.bfloat16), (4, 262144, torch.bfloat16)]
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for rows, cols, dt in probs:
        torch.manual_seed(0)
        x = torch.randn(rows, cols, device="cuda", dtype=dt) * 4
        ref = torch.softmax(x.float(), -1)
        y = torch.empty_like(x)
        ws = torch.empty(2_000_000, dtype=torch.float32, device="cuda")
        name = f"{rows}x{cols}:{str(dt)[6:]}"
        res = {}
        res["copy"] = timeit(lambda: y.copy_(x))
        res["torch.softmax"] = timeit(lambda: torch.softmax(x, -1))
        def ok(z):
            return torch.allclose(z.float(), ref, atol=1e-3 if dt == torch.float32 else 1e-2, rtol=1e-2)
        for split, blk, w, st in itertools.product((16, 32, 64), (1024, 2048, 4096), (2, 4, 8), (1, 2)):
            if blk > cols // split: continue
            cfg = dict(BLOCK_N=blk, ROWS=1, num_warps=w, num_stages=st, SPLIT=split)
            try:
                f = sm.prepare(x, cfg)
                good = ok(f(x))
                res[f"2launch s{split} b{blk} w{w} st{st}"] = timeit(lambda: f(x)) if good else float("nan")
            except Exception as e:
                print("ERR", cfg, e)
        for split in (2, 4, 8):
            if rows * split > nsm: continue
            blk = triton.next_power_of_2(triton.cdiv(cols, split))
            for w in (8, 16):
                cfg = dict(BLOCK_N=blk, ROWS=1, num_warps=w, num_stages=1, SPLIT=split, SYNC=1)
                try:
                    f = sm.prepare(x, cfg)
                    good = ok(f(x))
                    res[f"kept SYNC s{split} b{blk} w{w}"] = timeit(lambda: f(x)) if good else float("nan")
                except Exception as e:
                    print("ERR", cfg, e)
        counters = zeroed_counters(x.device, 2 * rows)
        for split in (2, 4, 8, 16, 32, 64):
            blk = triton.next_power_of_2(triton.cdiv(cols, split))
            chunk = blk
            if blk < 1024: continue
            for w in (4, 8, 16):
                per = blk // (32 * w)
                if per > 128 or per < 4: continue
                for wait, hold in ((0, 0), (1, 0), (0, 1), (1, 1)):
                    if hold and dt == torch.float32: continue
                    g = (rows, split)
                    def f():
                        probe_sync[g](x, y, ws, counters, cols, cols, chunk, BLOCK_N=blk, SPLIT=split, WAIT=wait, HOLD=hold, SPIN_LIMIT=256, num_warps=w)
                    try:
                        f(); torch.cuda.synchronize()
                        good = ok(y) if wait else None
                        t = timeit(f)
                        res[f"probe s{split} b{blk} w{w} wait{wait} hold{hold} grid{rows*split}{'' if good in (None, True) else ' BAD'}"] = t
                    except Exception as e:
                        print("ERR probe", split, blk, w, e)
            for w in (4, 8):
                for bn in (1024, 4096):
                    if bn > chunk: continue
                    res[f"read-only s{split} b{bn} w{w}"] = timeit(lambda: probe_read[(rows, split)](x, ws, cols, cols, chunk, BLOCK_N=bn, SPLIT=split, num_warps=w))
                    res[f"write-only s{split} b{bn} w{w}"] = timeit(lambda: probe_write[(rows, split)](y, cols, cols, chunk, BLOCK_N=bn, SPLIT=split, num_warps=w))
        out.append((name, res))
        copy = res["copy"]
        print(f"\n## {name}  copy {copy:.2f} us  ({x.numel()*x.element_size()*2/copy/1e6:.0f} GB/s)", flush=True)
        fams = {}
        for k, v in res.items():
            fam = k.split(" ")[0] + ("" if not k.startswith("probe") else " " + " ".join(p for p in k.split() if p.startswith(("wait", "hold"))))
            fams.setdefault(fam, []).append((v, k))
        for fam, items in fams.items():
            items = sorted(i for i in items if i[0] == i[0])
            for v, k in items[:3]:
                print(f"  {k:60s} {v:8.2f} us  {copy / v:6.1%}")
    json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "vocab_probe.json"), "w"), indent=1)

main()
