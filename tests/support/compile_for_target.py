"""Run as a script by tests/integration/test_smem_bounds.py, in a process of its own (TRITON_INTERPRET=0, so that the kernels
are compiled rather than interpreted): compiles matmul and attention configs for a GPU this machine need not have
(`triton.compile` with a `GPUTarget`, specialized as a launch specializes them) and prints, a JSON line each, the
shared memory Triton gave each one against the space's bound. Reads the configs as JSON lines on standard input:
{"op", "config", "dtype", "capability", ...}."""

from __future__ import annotations

import json
import sys
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels import attention as k_attention
from kernels import matmul as k_matmul

TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
ALIGNED = [["tt.divisibility", 16]]


def _matmul(c: dict[str, Any], dt: str) -> tuple[Any, dict[str, str], dict[str, Any], dict[Any, Any]]:
    bm, bn, bk, tma = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c.get("TMA", 0)
    base = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=c["GROUP_M"], EPILOGUE=0, UPCAST=False)
    if tma == 0:  # pointers: 16-byte aligned, unit strides constants (without that the loads are not pipelined)
        names = ["a_ptr", "b_ptr", "c_ptr", "bias_ptr", "ws_ptr", "count_ptr", "M", "N", "K", "stride_am",
                 "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"]
        sig = dict.fromkeys(names, "i32")
        sig.update({n: f"*{dt}" for n in names[:4]}, ws_ptr="*fp32", count_ptr="*i32")
        const = dict(base, stride_ak=1, stride_bn=1, stride_cn=1, SPLIT_K=c.get("SPLIT_K", 1), EVEN_K=True)
        attrs = {(names.index(n),): ALIGNED for n in names if n not in const}
        return k_matmul.matmul_kernel, sig, const, attrs
    desc = {"a_desc": [bm, bk], "b_desc": [bk, bn], "c_desc": [bm, bn // 2 if c.get("SUBTILE") else bn]}
    if tma == 1:
        sig = {n: f"tensordesc<{dt}{shape}>" for n, shape in desc.items()}
        sig.update(ws_ptr="*fp32", count_ptr="*i32")
        const = dict(base, DEVICE_DESC=False, SPLIT_K=c.get("SPLIT_K", 1))
        kernel = k_matmul.matmul_tma_kernel
    else:
        desc.update(b_half_desc=[bk, bn // 2], c_half_desc=[bm, bn // 2])
        sig = {n: f"tensordesc<{dt}{shape}>" for n, shape in desc.items()}
        const = dict(base, NUM_SMS=132, WARP_SPECIALIZE=tma == 3, SUBTILE=c.get("SUBTILE", 0),
                     TAIL_SPLIT=c.get("TAIL_SPLIT", 0), FLATTEN=c.get("FLATTEN", 0), DEVICE_DESC=False)
        kernel = k_matmul.matmul_tma_persistent_kernel
    sig = {**sig, "bias_ptr": f"*{dt}", **dict.fromkeys(("M", "N", "K", "stride_am", "stride_bk", "stride_cm"), "i32")}
    return kernel, sig, const, {}


def _attention(c: dict[str, Any], dt: str, head_dim: int, causal: bool) -> tuple[Any, dict[str, str], dict[str, Any],
                                                                                     dict[Any, Any]]:
    bm, bn, tma = c["BLOCK_M"], c["BLOCK_N"], bool(c.get("TMA", 0))
    names = ["q_ptr", "k_ptr", "v_ptr", "o_ptr", "q_host", "k_host", "v_host", "o_host", "stride_qb", "stride_qh",
             "stride_qm", "stride_kb", "stride_kh", "stride_kn", "stride_vb", "stride_vh", "stride_vn", "stride_ob",
             "stride_oh", "stride_om", "H", "KV_GROUP", "S", "qk_scale", "GROUP_BH", "n_blocks"]
    sig = dict.fromkeys(names, "i32")
    sig.update({n: f"*{dt}" for n in names[:8]}, qk_scale="fp32")
    if tma:
        sig.update(q_host=f"tensordesc<{dt}[{bm},{head_dim}]>", k_host=f"tensordesc<{dt}[{bn},{head_dim}]>",
                   v_host=f"tensordesc<{dt}[{bn},{head_dim}]>", o_host=f"tensordesc<{dt}[{bm},{head_dim}]>")
    const = dict(HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, EVEN_N=True, TMA=tma, HOST_DESC=tma,
                 UPCAST=False, PERSISTENT=False)
    aligned = names[:4] + ([] if tma else names[4:8]) + names[8:20] + ["S"]
    return k_attention.attention_kernel, sig, const, {(names.index(n),): ALIGNED for n in aligned}


def shared_bytes(job: dict[str, Any]) -> int:
    dt, c = TYPES[job["dtype"]], job["config"]
    if job["op"] == "matmul":
        kernel, sig, const, attrs = _matmul(c, dt)
    else:
        kernel, sig, const, attrs = _attention(c, dt, job["head_dim"], job["causal"])
    sig.update(dict.fromkeys(const, "constexpr"))
    major, minor = job["capability"]
    compiled = triton.compile(ASTSource(kernel, sig, const, attrs), target=GPUTarget("cuda", 10 * major + minor, 32),
                              options=dict(num_warps=c["num_warps"], num_stages=c["num_stages"]))
    return int(compiled.metadata.shared)


def main() -> None:
    for line in sys.stdin:
        job = json.loads(line)
        print(json.dumps({**job, "shared": shared_bytes(job)}), flush=True)


if __name__ == "__main__":
    main()
