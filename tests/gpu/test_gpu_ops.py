"""GPU tier: every op correct on a CUDA device at realistic shapes, with its default and a few other configs."""

from __future__ import annotations

import importlib

import pytest
import torch

from autotuner.base.device import current_device
from autotuner.base.registry import builtin_ops, get_op
from tests.conftest import pick_configs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: no CUDA device here"),
]

CASES = [(op.name, e.shape, e.dtype, dict(e.options)) for op in builtin_ops() for e in op.gpu_examples]


@pytest.mark.parametrize("name, shape, dtype, opts", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_op_on_gpu(name, shape, dtype, opts):
    device = current_device()
    op = get_op(name)
    problem = op.parse_problem(shape, dtype, **opts)
    inputs = op.make_inputs(problem, device.torch_device)
    ref = op.reference(inputs)
    default = op.space.default(problem, device)
    for config in pick_configs(op.space.candidates(problem, device), default, 2, seed=7):
        try:
            out = op.run(inputs, config)
        except Exception as exc:  # a non-default config may exceed real resources; the tuner records those
            if config != default and "OutOfResources" in type(exc).__name__:
                continue
            raise
        torch.cuda.synchronize()
        result = op.check(out, ref, problem)
        assert result.ok, f"{name} {problem.key} {config}: {result.message}"


def _each_twice_matches(op, problem, inputs, configs):
    """Each config launched twice back to back (programs that meet across a launch leave their state for the
    next), both outputs checked against the reference."""
    ref = op.reference(inputs)
    for config in configs:
        outs = [op.run(inputs, config) for _ in range(2)]
        torch.cuda.synchronize()
        for out in outs:
            result = op.check(out, ref, problem)
            assert result.ok, f"{problem.key} {config}: {result.message}"


@pytest.mark.parametrize("shape, dtype", [("1024x32768", "float16"), ("1000x3001", "bfloat16"), ("300x8192", "float32")])
def test_persistent_softmax_on_gpu(shape, dtype):
    """PERSIST: a few programs per SM walking rows held whole, the loop pipelined (its loads staged in shared
    memory), on real SMs; every valid persistent config of the space, launched twice back to back."""
    device = current_device()
    op = get_op("softmax")
    problem = op.parse_problem(shape, dtype)
    inputs = op.make_inputs(problem, device.torch_device)
    persistent = [c for c in op.space.candidates(problem, device) if c["PERSIST"]]
    assert persistent
    _each_twice_matches(op, problem, inputs, persistent)


@pytest.mark.parametrize("shape, dtype", [("2048x16384", "float16"), ("1000x3001", "bfloat16"), ("4096x4096", "float32"),
                                          ("999x1024", "float16"), ("4096x1000", "float16"), ("2048x24000", "float16"),
                                          ("4096x5120", "bfloat16"), ("4096x4100", "float16"), ("4096x40", "float16"),
                                          ("2048x100", "bfloat16"), ("1024x32768", "bfloat16")])
def test_whole_row_softmax_on_gpu(shape, dtype):
    """Rows held whole, a program per row block: every valid config of the space, unmasked where the tile lies
    inside the problem (2048x16384, 4096x4096, 999x1024 at one row per program) and masked where it does not
    (3001 columns, one at a time; 1000 columns, a 16-column tail and 16-byte accesses on strides of 8 elements;
    999 rows in blocks of 2 or more), in two tiles (24000: 16384 + 8192; 5120: 4096 + 1024; 4100: 4096 and a
    tail of 4), 16-bit rows held as loaded through the packed inline-asm move down to one element per thread
    (40 and 100 columns), launched twice back to back; the first rows hold -inf entries (every third, and all
    but one)."""
    device = current_device()
    op = get_op("softmax")
    problem = op.parse_problem(shape, dtype)
    inputs = op.make_inputs(problem, device.torch_device)
    inputs["x"][0, ::3] = float("-inf")
    inputs["x"][1] = float("-inf")
    inputs["x"][1, problem.cols // 2] = 1.0
    whole = [c for c in op.space.candidates(problem, device)
             if c["BLOCK_N"] >= problem.cols and not c["PERSIST"] and c["SPLIT"] == 1]
    assert whole
    _each_twice_matches(op, problem, inputs, whole)


@pytest.mark.parametrize("shape, dtype", [("1024x32768", "float16"), ("4096x5000", "float16"), ("2048x24000", "bfloat16"),
                                          ("4096x1024", "bfloat16"), ("1000x3001", "float16")])
def test_whole_row_layernorm_on_gpu(shape, dtype):
    """Layernorm's rows held whole: every valid config of the space (16-bit rows held as loaded, HOLD16, and not;
    a tail, two tiles, an odd stride), launched twice back to back."""
    device = current_device()
    op = get_op("layernorm")
    problem = op.parse_problem(shape, dtype)
    inputs = op.make_inputs(problem, device.torch_device)
    whole = [c for c in op.space.candidates(problem, device) if c["BLOCK_N"] >= problem.cols]
    assert whole and (any(c["HOLD16"] for c in whole) or problem.cols < 4096)
    _each_twice_matches(op, problem, inputs, whole)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_whole_row_softmax_all_inf_row_on_gpu(dtype):
    """A row all -inf comes out NaN, as torch's does, and leaves the other rows right (16-bit rows take the max
    in 16 bits and compute their exponentials twice; 32-bit ones do not)."""
    x = torch.randn(8, 4096, device="cuda").to(getattr(torch, dtype))
    x[3] = float("-inf")
    op = get_op("softmax")
    for cfg in ({"BLOCK_N": 4096, "ROWS": 1, "num_warps": 4, "num_stages": 1},
                {"BLOCK_N": 4096, "ROWS": 2, "num_warps": 8, "num_stages": 1, "PERSIST": 1}):
        out = op.run({"x": x}, cfg).float()
        ref = torch.softmax(x.float(), -1)
        assert out[3].isnan().all() and ref[3].isnan().all()
        keep = [0, 1, 2, 4, 5, 6, 7]
        torch.testing.assert_close(out[keep], ref[keep], atol=2e-3, rtol=2e-2)


@pytest.mark.parametrize("shape, dtype", [("32x128256", "bfloat16"), ("7x50001", "float32"), ("100x8192", "float16"),
                                          ("1x128256", "float16")])
def test_split_softmax_on_gpu(shape, dtype):
    """SPLIT: rows cut over programs in two launches (partials, then the chunks written last-read-first), or in
    one (SYNC=1: a row's programs wait for each other); the seeds, every SYNC config and the two-launch ones with
    1024- and 4096-column blocks (4 and 8 warps, 1 and 2 stages), launched twice back to back."""
    device = current_device()
    op = get_op("softmax")
    problem = op.parse_problem(shape, dtype)
    inputs = op.make_inputs(problem, device.torch_device)
    split = [c for c in op.space.candidates(problem, device)
             if c["SYNC"] or (c["SPLIT"] > 1 and c["BLOCK_N"] in (1024, 4096) and c["num_warps"] in (4, 8))]
    split += [c for c in op.space.seeds(problem, device) if c["SPLIT"] > 1]
    assert len({c["SPLIT"] for c in split}) >= 2
    _each_twice_matches(op, problem, inputs, split)


@pytest.mark.parametrize("shape, epilogue, split, tile", [
    ("32x4096x4096", "none", 2, (32, 64, 128)), ("33x1000x4100", "bias_gelu", 4, (32, 64, 128)),
    ("64x512x8192", "relu", 8, (32, 64, 128)), ("16x8192x8192", "none", 1, (16, 64, 256)),
    ("9x520x8200", "bias", 4, (16, 32, 256)),  # decode's tiles: 16 rows, K steps of 256
    ("1024x1024x16384", "none", 4, (128, 256, 64, 1)), ("1000x1000x16000", "bias_gelu", 2, (128, 128, 64, 1)),
    ("512x4096x14336", "none", 2, (128, 256, 64, 1)), ("768x1536x32768", "relu", 3, (128, 256, 64, 1)),
    ("1000x1000x16000", "bias", 3, (64, 128, 128))])  # the one-tile TMA kernel's, K-heavy; splits not powers of 2
def test_matmul_split_k_on_gpu(shape, epilogue, split, tile):
    """Split-K's cross-program handoff (partials, counter, last-arriver sum; through a descriptor's store, which
    only the tile's last program may do, where the tile names TMA=1) under real concurrency, launched several times
    back to back so the counters are reused."""
    op = get_op("matmul")
    problem = op.parse_problem(shape, "float16", epilogue=epilogue)
    inputs = op.make_inputs(problem, current_device().torch_device)
    ref = op.reference(inputs)
    tma = tile[3] if len(tile) > 3 else 0
    if tma and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs a Hopper GPU or later")
    wide = tile[0] * tile[1] >= 128 * 128
    cfg = {"BLOCK_M": tile[0], "BLOCK_N": tile[1], "BLOCK_K": tile[2], "GROUP_M": 8 if wide else 1, "SPLIT_K": split,
           "TMA": tma, "num_warps": 8 if wide else 4, "num_stages": 4 if tma else 3}
    outs = [op.run(inputs, cfg) for _ in range(5)]
    torch.cuda.synchronize()
    for out in outs:
        result = op.check(out, ref, problem)
        assert result.ok, f"{problem.key} SPLIT_K={split}: {result.message}"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", ["2x8x1000x64", "1x4x777x128", "2x4x1024x128", "2x8x2x1000x64", "2x8x4x1024x128"])
def test_attention_tma_on_gpu(shape, causal):
    """TMA descriptors: sequence ends inside a block (zero-filled loads, clipped stores), strided heads, and
    (seq 1024) the launcher's descriptors over every head's rows; each tile also with a persistent grid of one and
    two programs per SM (PERSIST); with grouped-query heads (k and v with fewer heads) too."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs compute capability 9.0")
    op = get_op("attention")
    problem = op.parse_problem(shape, "float16", causal=causal)
    inputs = op.make_inputs(problem, current_device().torch_device)
    for cfg in ({"BLOCK_M": 64, "BLOCK_N": 64, "TMA": 1, "num_warps": 4, "num_stages": 3},
                {"BLOCK_M": 128, "BLOCK_N": 64, "TMA": 1, "num_warps": 8, "num_stages": 2},
                {"BLOCK_M": 64, "BLOCK_N": 128, "TMA": 1, "num_warps": 4, "num_stages": 2}):
        host = importlib.import_module("kernels.attention")._host_descriptors(cfg, *[inputs[n] for n in "qkvq"])
        assert (host is not None) == (problem.seq % 128 == 0)
        for persist in (0, 1, 2):
            result = op.check(op.run(inputs, {**cfg, "PERSIST": persist}), op.reference(inputs), problem)
            assert result.ok, f"{problem.key} {cfg} PERSIST={persist}: {result.message}"
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (inputs["q"], inputs["k"], inputs["v"]))
    strided = {**inputs, "q": q, "k": k, "v": v}  # (batch, seq, heads, dim) memory, viewed as (b, h, s, d)
    result = op.check(op.run(strided, {"BLOCK_M": 64, "BLOCK_N": 64, "TMA": 1, "num_warps": 4, "num_stages": 3}),
                      op.reference(inputs), problem)
    assert result.ok, f"{problem.key} strided: {result.message}"


@pytest.mark.parametrize("shape, dtype, epilogue", [("4096x4096x4096", "float16", "none"),
                                                    ("8192x8192x8192", "bfloat16", "none"),
                                                    ("2056x1000x520", "bfloat16", "bias_gelu"),
                                                    ("3000x6144x4096", "bfloat16", "bias"),
                                                    ("1000x1000x1000", "float32", "bias_relu")])
def test_matmul_tma_on_gpu(shape, dtype, epilogue, monkeypatch):
    """The TMA kernels (a tile per program, persistent, persistent and warp-specialized, persistent with its last
    partial wave in half-width tiles, persistent with its tile and K loops flattened; some of each with the
    descriptors made by the kernel) at the suite's large
    shapes, and where M, N and K end inside a tile (zero-filled loads, clipped stores). The pointer kernel is
    taken away, so a silent fallback fails."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs compute capability 9.0")
    km = importlib.import_module("kernels.matmul")
    op = get_op("matmul")
    problem = op.parse_problem(shape, dtype, epilogue=epilogue)
    inputs = op.make_inputs(problem, current_device().torch_device)
    ref = op.reference(inputs)
    monkeypatch.setattr(km, "matmul_kernel", None)
    small = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32 if dtype == "float32" else 64, "GROUP_M": 8,
             "num_warps": 4, "num_stages": 3}
    seeds = [c for c in op.space.seeds(problem, current_device())
             if c.get("TMA") and not op.space.violations(c, problem, current_device())]
    warp_specialized = [] if dtype == "float32" else [{**small, "TMA": 3, "num_warps": 8},
                                                      {**small, "TMA": 3, "num_warps": 8, "SUBTILE": 1}]
    tail_split = [{**small, "TMA": 2, "TAIL_SPLIT": 1}, {**small, "TMA": 2, "TAIL_SPLIT": 1, "SUBTILE": 1},
                {**small, "BLOCK_N": 256, "num_warps": 8, "TMA": 2, "TAIL_SPLIT": 1}]
    flattened = [{**small, "TMA": 2, "FLATTEN": 1}, {**small, "TMA": 2, "FLATTEN": 1, "SUBTILE": 1},
                 {**small, "BLOCK_N": 256, "num_warps": 8, "TMA": 2, "FLATTEN": 1, "SUBTILE": 1, "TAIL_SPLIT": 1}]
    made_on_device = [{**cfg, "DEVICE_DESC": 1} for cfg in ({**small, "TMA": 1}, *flattened[1:], *warp_specialized)]
    for cfg in seeds + [{**small, "TMA": 1}, {**small, "TMA": 2}, {**small, "TMA": 2, "SUBTILE": 1},
                        *warp_specialized, *tail_split, *flattened, *made_on_device]:
        out = op.run(inputs, cfg)
        torch.cuda.synchronize()
        result = op.check(out, ref, problem)
        assert result.ok, f"{problem.key} {cfg}: {result.message}"
