"""GPU tier: the launch path. Prepared launchers launched directly (without Triton's binding) give what Triton's
own launch gives, with new tensors each call; the library calls under CUDA-graph capture and
torch.compile(fullgraph=True); `autotuner.autotune` on a real GPU."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import autotuner
from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.base.settings import Settings
from autotuner.launch.lookup import Resolver, set_resolver
from kernels import _direct
from kernels import attention as k_attention
from kernels import gelu as k_gelu
from kernels import layernorm as k_layernorm
from kernels import matmul as k_matmul
from kernels import softmax as k_softmax

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: no CUDA device here"),
]


@pytest.fixture
def fresh(tmp_path):
    set_resolver(Resolver(Settings(db_url=f"sqlite:///{tmp_path / 'g.db'}")))
    autotuner.clear_cache()
    yield
    set_resolver(None)
    autotuner.clear_cache()


@autotuner.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"])
@triton.jit
def _times_four(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor * 4, mask=mask)


def test_a_decorated_kernel_launches_equal_values_of_other_types_as_triton_does(fresh):
    """1, 1.0 and True are equal dict keys; Triton specializes and promotes each apart (an int32 tensor times the
    int 1 times 4 wraps around, times 1.0 does not), and so must the decorated kernel's launchers."""
    x = torch.full((256,), 2**30, device="cuda", dtype=torch.int32)
    for factor in (1, 1.0, True, 1):
        y, expected = torch.empty(256, device="cuda"), torch.empty(256, device="cuda")
        _times_four[(2,)](x, y, 256, factor)
        _times_four.fn[(2,)](x, expected, 256, factor, BLOCK=128, num_warps=4)
        torch.testing.assert_close(y, expected, msg=f"factor {factor!r}")


def _both_ways(prepare, make, calls=3):
    """Outputs of a prepared launcher for fresh inputs each call: directly (after the first) and through Triton."""
    launch = prepare(*make(0))
    direct = [launch(*make(i)) for i in range(calls)]
    _direct.DIRECT = False
    try:
        plain = [launch(*make(i)) for i in range(calls)]
    finally:
        _direct.DIRECT = True
    torch.cuda.synchronize()
    return direct, plain


def test_direct_launches_match_triton_launches():
    dev = "cuda"
    x = [torch.randn(96, 1000, device=dev, dtype=torch.float16) for _ in range(3)]
    d, p = _both_ways(lambda x: k_softmax.prepare(x, {"BLOCK_N": 1024, "ROWS": 2, "num_warps": 4, "num_stages": 1}),
                      lambda i: (x[i],))
    for i in range(3):
        assert torch.equal(d[i], p[i])
        torch.testing.assert_close(d[i].float(), torch.softmax(x[i].float(), -1), atol=2e-3, rtol=2e-3)
    w, b = torch.randn(1000, device=dev, dtype=torch.float16), torch.randn(1000, device=dev, dtype=torch.float16)
    d, p = _both_ways(lambda x, w, b: k_layernorm.prepare(x, w, b, 1e-5, {"BLOCK_N": 1024, "ROWS": 1, "num_warps": 4,
                                                                          "num_stages": 1}),
                      lambda i: (x[i], w, b))
    assert all(torch.equal(a, b_) for a, b_ in zip(d, p, strict=True))
    g = [torch.randn(5000, device=dev) for _ in range(3)]
    d, p = _both_ways(lambda x: k_gelu.prepare(x, {"BLOCK_SIZE": 512, "num_warps": 4, "num_stages": 1}),
                      lambda i: (g[i],))
    assert all(torch.equal(a, b_) for a, b_ in zip(d, p, strict=True))
    q = [torch.randn(2, 4, 300, 64, device=dev, dtype=torch.float16) for _ in range(3)]
    d, p = _both_ways(lambda q, k, v: k_attention.prepare(q, k, v, {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4,
                                                                      "num_stages": 2}, causal=True),
                      lambda i: (q[i], q[(i + 1) % 3], q[(i + 2) % 3]))
    assert all(torch.equal(a, b_) for a, b_ in zip(d, p, strict=True))


@pytest.mark.parametrize("cfg", [
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "SPLIT_K": 2, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "TMA": 1, "num_warps": 8, "num_stages": 3},
], ids=["pointers", "split-k", "tma"])
def test_direct_matmul_launches_swap_tensors_and_descriptors(cfg):
    if cfg.get("TMA") and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs compute capability 9.0")
    a = [torch.randn(256, 512, device="cuda", dtype=torch.float16) for _ in range(3)]
    b = [torch.randn(512, 384, device="cuda", dtype=torch.float16) for _ in range(3)]
    d, p = _both_ways(lambda a, b, bias: k_matmul.prepare(a, b, cfg), lambda i: (a[i], b[i], None))
    op = get_op("matmul")
    problem = op.parse_problem("256x384x512")
    for i in range(3):
        assert torch.equal(d[i], p[i])
        assert op.check(d[i], k_matmul.reference(a[i], b[i]), problem).ok


def test_library_calls_under_cuda_graph_capture(fresh):
    x = torch.randn(128, 1024, device="cuda", dtype=torch.float16)
    a, b = torch.randn(128, 256, device="cuda", dtype=torch.float16), torch.randn(256, 128, device="cuda", dtype=torch.float16)
    autotuner.softmax(x), autotuner.matmul(a, b), autotuner.gelu(x)  # resolve and compile outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            autotuner.softmax(x), autotuner.matmul(a, b), autotuner.gelu(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, c, z = autotuner.softmax(x), autotuner.matmul(a, b), autotuner.gelu(x)
    x.copy_(torch.randn_like(x))
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=5e-1, rtol=2e-2)
    torch.testing.assert_close(z.float(), torch.nn.functional.gelu(x.float(), approximate="tanh"), atol=2e-2, rtol=2e-2)


def test_library_calls_under_torch_compile_fullgraph(fresh):
    x = torch.randn(64, 512, device="cuda", dtype=torch.float16)
    w, bias = torch.randn(512, device="cuda", dtype=torch.float16), torch.randn(512, device="cuda", dtype=torch.float16)

    def block(x):
        return autotuner.gelu(autotuner.layer_norm(autotuner.softmax(x), w, bias))

    eager = block(x)  # resolves the configs outside the graph
    compiled = torch.compile(block, fullgraph=True)
    torch.testing.assert_close(compiled(x), eager, atol=1e-2, rtol=1e-2)


def test_autotune_on_the_gpu_tunes_once_and_serves_from_the_database(tmp_path):
    from examples.tutorial_matmul import matmul, matmul_kernel

    set_resolver(Resolver(Settings(db_url=f"sqlite:///{tmp_path / 'a.db'}", on_miss="tune")))
    try:
        matmul_kernel.cache.clear()
        a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
        b = torch.randn(512, 512, device="cuda", dtype=torch.float16)
        c = matmul(a, b)
        torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.5, rtol=2e-2)
        key = next(iter(matmul_kernel.cache))
        assert matmul_kernel.sources[key].startswith("tuned here")
        matmul_kernel.cache.clear()
        torch.testing.assert_close(matmul(a, b), c)
        assert matmul_kernel.sources[key].startswith("exact (database)"), matmul_kernel.sources[key]
        assert isinstance(matmul_kernel.best_config, triton.Config)
        for _ in range(3):  # hits: launched directly after the first, on new tensors each time
            a, b = torch.randn_like(a), torch.randn_like(b)
            torch.testing.assert_close(matmul(a, b).float(), a.float() @ b.float(), atol=0.5, rtol=2e-2)
        assert current_device().key.endswith(")")
    finally:
        set_resolver(None)


LAUNCH_IN_A_NEW_PROCESS = r"""
import sys, torch, triton, triton.compiler
sys.path.insert(0, sys.argv[1])
compiles = []
original = triton.compiler.compile
triton.compiler.compile = lambda *a, **k: compiles.append(1) or original(*a, **k)  # what each JIT cache binds
from triton.runtime.cache import triton_key
if sys.argv[2] == "library":
    import autotuner
    x = torch.randn(256, 1000, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(autotuner.softmax(x).float(), torch.softmax(x.float(), -1), atol=2e-3, rtol=2e-3)
    print("library", len(compiles), triton_key.cache_info().currsize, int("triton.experimental.gluon" in sys.modules))
    sys.exit(0)
from examples.tutorial_matmul import matmul, matmul_kernel
a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
b = torch.randn(512, 512, device="cuda", dtype=torch.float16)
c = matmul(a, b)
torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.5, rtol=2e-2)
print(next(iter(matmul_kernel.sources.values())), len(compiles), triton_key.cache_info().currsize,
      int("triton.experimental.gluon" in sys.modules))
"""


def test_autotune_in_a_new_process_launches_its_kept_kernel_without_compiling(tmp_path):
    """After a tuning process, a new process launches the tuned config from the kept binary: Triton's compile is
    never called, its installation hash never computed, and its native specialization (which imports gluon) never
    started; with kept kernels off, all three happen. The same for a library call's kernel."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "AUTOTUNER_DB_URL": f"sqlite:///{tmp_path / 'k.db'}", "AUTOTUNER_ON_MISS": "tune",
           "AUTOTUNER_KERNEL_CACHE_DIR": str(tmp_path / "kept"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}

    def launch(what="decorated", **extra):
        out = subprocess.run([sys.executable, "-c", LAUNCH_IN_A_NEW_PROCESS, root, what], env={**env, **extra},
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        source, compiles, hashed, gluon = out.stdout.strip().splitlines()[-1].rsplit(" ", 3)
        return source, int(compiles), int(hashed), int(gluon)

    source, compiles, _, gluon = launch()
    assert source.startswith("tuned here") and compiles >= 1 and gluon == 1
    assert list((tmp_path / "kept").glob("*/*/entry.json"))
    assert list((tmp_path / "kept").glob("specializations/*/*.json"))
    source, compiles, hashed, gluon = launch()
    assert source.startswith("exact (database)") and (compiles, hashed, gluon) == (0, 0, 0)
    source, compiles, hashed, gluon = launch(AUTOTUNER_KERNEL_CACHE="0")
    assert source.startswith("exact (database)") and (compiles, hashed, gluon) == (1, 1, 1)
    # the library calls' kernels keep theirs too
    assert launch("library")[1] == 1
    assert launch("library")[1:] == (0, 0, 0)
