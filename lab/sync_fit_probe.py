# ruff: noqa: B023, E501  (an investigation script, deleted once its finding is kept)
"""Which SYNC softmax grids does an H200 hold at once, and how fast are they? The one-launch kernel as it is, and
lab/pair_probe.py's two-rows-per-program kernel, at every split and warp count whether or not the row-wise space's
register estimate admits it, with each compiled kernel's registers. An investigation, kept in history only. Run on a
GPU with the wheels on PYTHONPATH: python3 lab/sync_fit_probe.py (writes $OUT/sync_fit.json)."""
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.getcwd())
from autotuner.base.device import current_device  # noqa: E402
from autotuner.base.registry import get_op  # noqa: E402
from kernels import softmax as sm  # noqa: E402
from lab.pair_probe import pair_kernel, timeit  # noqa: E402
from search_spaces import rowwise  # noqa: E402


def main():
    op = get_op("softmax")
    dev = current_device()
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    out = {}
    rows_out = []
    for shape, dt in (("32x128256", "bfloat16"), ("16x256000", "bfloat16"), ("8x151936", "float32"),
                      ("4x262144", "bfloat16"), ("64x32000", "bfloat16"), ("1x128256", "float32"),
                      ("24x128256", "bfloat16")):
        p = op.parse_problem(shape, dt)
        x = op.make_inputs(p, "cuda")["x"]
        n_rows, n_cols = x.shape
        ref = torch.softmax(x.float(), -1)
        y = torch.empty_like(x)
        res = {"copy": {"us": timeit(lambda: y.copy_(x))}}
        for split in (2, 4, 8, 16, 32, 64):
            block = triton.next_power_of_2(triton.cdiv(n_cols, split))
            for warps in (1, 2, 4, 8, 16):
                ept = block // (32 * warps)
                if not 2 <= ept <= 128:
                    continue
                cfg = {"BLOCK_N": block, "ROWS": 1, "num_warps": warps, "num_stages": 1, "PERSIST": 0, "SPLIT": split,
                       "SYNC": 1}
                admitted = rowwise._split_needs_few_rows(cfg, p, rowwise_limits(dev)) is None
                words = torch.zeros(n_rows * split, dtype=torch.int64, device="cuda")
                chunk = block

                def f():
                    return sm.softmax_split_sync_kernel[(n_rows, split)](x, y, words, n_cols, x.stride(0), y.stride(0),
                                                                         chunk, BLOCK_N=block, SPLIT=split,
                                                                         SPIN_LIMIT=sm.SPIN_LIMIT, num_warps=warps,
                                                                         num_stages=1)
                try:
                    k = f()
                    t = timeit(f)
                except Exception as e:  # noqa: BLE001
                    print("failed", shape, split, warps, type(e).__name__, str(e)[:150], flush=True)
                    continue
                y.zero_()
                f()
                err = (y.float() - ref).abs().max().item()
                per_sm = min(2048 // (32 * warps), 65536 // (k.n_regs * 32 * warps), 32)
                res[f"sync s{split} w{warps}"] = {"us": t, "regs": k.n_regs, "per_sm": per_sm,
                                                  "fits": n_rows * split <= per_sm * sms, "admitted": admitted,
                                                  "err": err, "ept": ept}
                if n_rows % 2 == 0 and ept <= 64:
                    half = n_rows // 2
                    def g():
                        return pair_kernel[(half, split)](x, y, words, n_cols, x.stride(0), y.stride(0), half,
                                                          BLOCK_N=block, SPLIT=split, SPIN_LIMIT=256, STAGGER=0,
                                                          num_warps=warps, num_stages=1)
                    try:
                        k = g()
                        t = timeit(g)
                    except Exception as e:  # noqa: BLE001
                        print("failed pair", shape, split, warps, type(e).__name__, str(e)[:150], flush=True)
                        continue
                    y.zero_()
                    g()
                    err = (y.float() - ref).abs().max().item()
                    per_sm = min(2048 // (32 * warps), 65536 // (k.n_regs * 32 * warps), 32)
                    res[f"pair s{split} w{warps}"] = {"us": t, "regs": k.n_regs, "per_sm": per_sm,
                                                      "fits": half * split <= per_sm * sms, "err": err, "ept": ept}
        out[f"{shape}:{dt}"] = res
        cp = res["copy"]["us"]
        print(f"\n## {shape}:{dt} copy {cp:.2f} us", flush=True)
        for name, r in sorted(res.items(), key=lambda kv: kv[1]["us"])[:12]:
            if name == "copy":
                continue
            print(f"  {name:16s} {r['us']:7.2f} us {cp / r['us']:6.1%} regs {r['regs']:3d} per_sm {r['per_sm']:2d} "
                  f"fits {int(r['fits'])} admitted {int(r.get('admitted', -1))} ept {r['ept']} err {r['err']:.1e}", flush=True)
        for name, r in res.items():
            if name != "copy":
                rows_out.append((shape, name, r["ept"], r["regs"]))
    print("\nregisters against elements per thread (sync: 2*ept+32 estimated):")
    for shape, name, ept, regs in rows_out:
        print(f"  {shape:10s} {name:16s} ept {ept:3d} regs {regs:3d}")
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "sync_fit.json"), "w") as fh:
        json.dump(out, fh, indent=1)


def rowwise_limits(dev):
    return dev


if __name__ == "__main__":
    main()
