"""Every op, every dtype it supports, several configs of its space, on odd shapes, against the reference.

Launchers fill outputs with NaN first, so an element the kernel never writes fails the comparison.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import triton

from autotuner.base.registry import builtin_ops, get_op
from kernels._counters import row_words, zeroed_counters
from tests.conftest import pick_configs
from tests.support.devices import H100


def _params():
    """Each built-in op's own examples (TunableOp.examples), in every dtype it takes: a new op is tested here by
    declaring them."""
    for op in builtin_ops():
        for dtype in op.dtypes:
            for e in op.examples:
                yield pytest.param(op.name, e.shape, dtype, dict(e.options),
                                   id=f"{op.name}-{e.shape}-{dtype}-{'-'.join(map(str, e.options.values()))}")


def test_every_built_in_op_declares_what_its_tests_run():
    assert all(op.examples and op.gpu_examples for op in builtin_ops()), \
        [op.name for op in builtin_ops() if not (op.examples and op.gpu_examples)]


@pytest.mark.parametrize("name, shape, dtype, opts", list(_params()))
def test_op_matches_reference(name, shape, dtype, opts, device):
    op = get_op(name)
    problem = op.parse_problem(shape, dtype, **opts)
    valid = op.space.candidates(problem, device)
    assert valid, f"no valid config for {problem}"
    configs = pick_configs(valid, op.space.default(problem, device), n_random=2, seed=hash(shape) % 1000)
    inputs = op.make_inputs(problem, device.torch_device)
    ref = op.reference(inputs)
    for config in configs:
        out = op.run(inputs, config)
        assert out.dtype == problem.torch_dtype
        result = op.check(out, ref, problem)
        assert result.ok, f"{name} {problem.key} {config}: {result.message}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_persistent_softmax_walks_every_row_block(dtype, device):
    """PERSIST=k: k programs per "SM" (the interpreter counts the host's cores) each walk row blocks, held whole,
    in a pipelined loop; rows that do not fill the last block, a row count below the grid, and leading dimensions
    that flatten into rows."""
    op = get_op("softmax")
    for shape in ("37x100", "3x2x130", "1x64"):
        problem = op.parse_problem(shape, dtype)
        inputs = op.make_inputs(problem, device.torch_device)
        ref = op.reference(inputs)
        for cfg in ({"BLOCK_N": 128 if problem.cols > 64 else 64, "ROWS": 2, "num_warps": 2, "num_stages": 1,
                     "PERSIST": 1},
                    {"BLOCK_N": 256, "ROWS": 1, "num_warps": 4, "num_stages": 1, "PERSIST": 4}):
            result = op.check(op.run(inputs, cfg), ref, problem)
            assert result.ok, f"{problem.key} {cfg}: {result.message}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_softmax_rows_with_and_without_masks_and_tails(dtype, device):
    """Rows held whole, with tiles inside the problem (no masks: BLOCK_N = cols, ROWS dividing the rows) and past
    its edges, a row of a little more than a power of two in two tiles (80: 64 + 16; 70: 64 and a tail of 6; 65,
    an odd stride: 64 + 16, no tail), and rows streamed in blocks; columns past the last multiple of 16 in a tile
    of their own (100, 1000 and 24 columns; 1000 with strides that are multiples of 8 but not 16), a program per
    row block and persistent, 16-bit rows also held as loaded (HOLD16); rows with -inf entries, one -inf but a
    single value, and one all -inf (NaN, as torch's)."""
    op = get_op("softmax")
    for shape in ("8x64", "6x256", "7x100", "3x2x128", "5x1000", "4x24", "6x80", "5x70", "3x65"):
        problem = op.parse_problem(shape, dtype)
        inputs = op.make_inputs(problem, device.torch_device)
        x = inputs["x"].view(-1, problem.cols)
        x[0, ::3] = float("-inf")
        x[1] = float("-inf")
        x[1, problem.cols // 2] = 1.0
        ref = op.reference(inputs)
        block = max(32, triton.next_power_of_2(problem.cols))
        for rows, warps, persist in ((1, 1, 0), (2, 2, 0), (4, 1, 1), (2, 1, 4)):
            for hold in (0, 1) if dtype != "float32" else (0,):  # 16-bit rows also held as loaded
                cfg = {"BLOCK_N": block, "ROWS": rows, "num_warps": warps, "num_stages": 1, "PERSIST": persist,
                       "HOLD16": hold}
                result = op.check(op.run(inputs, cfg), ref, problem)
                assert result.ok, f"{problem.key} {cfg}: {result.message}"
        for rows, stages in ((1, 1), (2, 2)):  # streamed in blocks of 32
            cfg = {"BLOCK_N": 32, "ROWS": rows, "num_warps": 1, "num_stages": stages}
            result = op.check(op.run(inputs, cfg), ref, problem)
            assert result.ok, f"{problem.key} {cfg}: {result.message}"
    x = torch.randn(4, 64, device=device.torch_device).to(getattr(torch, dtype))
    x[2] = float("-inf")
    for hold in (0, 1) if dtype != "float32" else (0,):
        out = op.run({"x": x}, {"BLOCK_N": 64, "ROWS": 2, "num_warps": 1, "num_stages": 1, "HOLD16": hold})
        ref = torch.softmax(x.float(), -1)
        assert out[2].isnan().all() and ref[2].isnan().all()
        torch.testing.assert_close(out[[0, 1, 3]].float(), ref[[0, 1, 3]], atol=2e-3, rtol=2e-2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_layernorm_rows_with_and_without_masks_and_tails(dtype, device):
    """Layernorm's row held whole, inside the problem (no masks) and past its edges, in two tiles (160: 128 + 32;
    129, an odd stride: 128 + 16; 140: 128 and a tail of 12), and streamed in blocks; columns past the last
    multiple of 16 in a tile of their own (1000, 200, 140, 24 and 7 columns), 16-bit rows also held as loaded
    (HOLD16); with weight and bias, with neither, and with the leading dimensions flattened."""
    op = get_op("layernorm")
    for shape in ("8x64", "6x256", "7x128", "3x2x128", "5x1000", "4x24", "3x7", "6x200", "4x160", "3x129", "5x140"):
        problem = op.parse_problem(shape, dtype)
        full = op.make_inputs(problem, device.torch_device)
        for inputs in (full, {**full, "weight": None, "bias": None}):
            ref = op.reference(inputs)
            whole = max(32, triton.next_power_of_2(problem.cols))
            for block, rows, warps, stages, hold in ((whole, 1, 1, 1, 0), (whole, 2, 2, 1, 0), (whole, 4, 1, 1, 0),
                                                     (whole, 2, 1, 1, 1), (32, 1, 1, 1, 0), (32, 2, 1, 2, 0)):
                if hold and dtype == "float32":
                    continue
                cfg = {"BLOCK_N": block, "ROWS": rows, "num_warps": warps, "num_stages": stages, "HOLD16": hold}
                result = op.check(op.run(inputs, cfg), ref, problem)
                assert result.ok, f"{problem.key} {cfg} weight={inputs['weight'] is not None}: {result.message}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_split_softmax_cuts_rows_over_programs(dtype, device):
    """SPLIT=s: each row cut into s chunks over two launches (partial max and sum, then the row written) or one
    (SYNC=1): columns that do not fill the last chunk, chunks left empty, leading dimensions, a row of -inf but
    one value; and the configs the launcher refuses, with the reason."""
    op = get_op("softmax")
    for shape, split, block in (("3x1000", 4, 64), ("2x3x130", 8, 32), ("5x4100", 2, 1024), ("1x96", 4, 32)):
        problem = op.parse_problem(shape, dtype)
        inputs = op.make_inputs(problem, device.torch_device)
        if shape == "3x1000":
            inputs["x"][1] = float("-inf")
            inputs["x"][1, 777] = 3.0  # all of row 1 in one chunk's single value
        ref = op.reference(inputs)
        held = triton.next_power_of_2(-(-problem.cols // split))
        for cfg in ({"BLOCK_N": block, "ROWS": 1, "num_warps": 2, "num_stages": 1, "SPLIT": split},
                    {"BLOCK_N": block, "ROWS": 1, "num_warps": 2, "num_stages": 2, "SPLIT": split},
                    # one launch: chunks held whole, a row's programs waiting for each other (the interpreter runs
                    # them one after another, so all but the last read the rest of their row themselves)
                    {"BLOCK_N": held, "ROWS": 1, "num_warps": 2, "num_stages": 1, "SPLIT": split, "SYNC": 1}):
            words = row_words(inputs["x"].device, problem.rows, split)  # this layout's, as earlier launches left them
            sense = int(words[0] >> 31) & 1
            for _ in range(3):  # later launches find the words the one before left
                out = op.run(inputs, cfg)
                result = op.check(out, ref, problem)
                assert result.ok, f"{problem.key} {cfg}: {result.message}"
                if cfg.get("SYNC"):  # every word of the layout carries this launch's sense, the last one's other
                    sense = 1 - sense
                    assert ((words >> 31) & 1).tolist() == [sense] * (problem.rows * split)
    # words in no launch's state (a row's senses mixed, as no launch leaves them): each program waits out its
    # polls and reads its row itself, so the result is still right
    problem = op.parse_problem("3x1000", dtype)
    inputs = op.make_inputs(problem, device.torch_device)
    words = row_words(inputs["x"].device, problem.rows, 4)
    words.copy_(torch.tensor([0, 1 << 31, 0, 1 << 31] * problem.rows, dtype=torch.int64))
    cfg = {"BLOCK_N": 256, "ROWS": 1, "num_warps": 2, "num_stages": 1, "SPLIT": 4, "SYNC": 1}
    assert op.check(op.run(inputs, cfg), op.reference(inputs), problem).ok
    words.zero_()  # (launches keep a mixed row mixed: only a write from outside makes one)
    with pytest.raises(ValueError, match="need BLOCK_N >= 250"):
        op.run({"x": torch.randn(3, 1000)}, {"BLOCK_N": 128, "ROWS": 1, "num_warps": 1, "num_stages": 1, "SPLIT": 4,
                                             "SYNC": 1})
    with pytest.raises(ValueError, match="SYNC=1 .* is for SPLIT > 1"):
        op.run(inputs, {"BLOCK_N": 32, "ROWS": 1, "num_warps": 1, "num_stages": 1, "SYNC": 1})
    with pytest.raises(ValueError, match="ROWS=1 and PERSIST=0"):
        op.run(inputs, {"BLOCK_N": 32, "ROWS": 2, "num_warps": 1, "num_stages": 1, "SPLIT": 2})
    with pytest.raises(ValueError, match="power of two from 1 to 64"):
        op.run(inputs, {"BLOCK_N": 32, "ROWS": 1, "num_warps": 1, "num_stages": 1, "SPLIT": 3})


def test_rows_are_split_only_where_they_are_too_few(device):
    space = get_op("softmax").space
    logits = get_op("softmax").parse_problem("32x128256", "bfloat16")  # a batch of a vocabulary's logits
    one_launch, two = space.seeds(logits, H100)[:2]
    # 128 programs of 32768 columns, one to an SM
    assert [one_launch[k] for k in ("SPLIT", "SYNC", "BLOCK_N", "num_warps")] == [4, 1, 32768, 16]
    assert (two["SPLIT"], two["SYNC"]) == (16, 0) and all(space.violations(c, logits, H100) == [] for c in (one_launch, two))
    seed = two
    # 512 programs of 8192 columns over 4 warps: three to an SM by their registers, 396 on the device at once
    crowded = {**one_launch, "SPLIT": 16, "BLOCK_N": 8192, "num_warps": 4}
    assert "132 SMs at once (at most 396" in " ".join(space.violations(crowded, logits, H100))
    # ... which is enough for 8 rows of 151936 columns in 32 such programs each
    qwen = get_op("softmax").parse_problem("8x151936", "float32")
    assert space.violations({**crowded, "SPLIT": 32}, qwen, H100) == []
    assert space.seeds(qwen, H100)[0] == {**crowded, "SPLIT": 32}
    assert "BLOCK_N=32768" in " ".join(space.violations({**one_launch, "BLOCK_N": 65536}, logits, H100))
    many = get_op("softmax").parse_problem("1024x32768", "float16")
    assert "already give each" in " ".join(space.violations({**seed, "num_stages": 1}, many, H100))
    assert "shorter than BLOCK_N=4096" in " ".join(space.violations({**seed, "SPLIT": 64}, logits, H100))
    assert "columns per chunk (at least 1024)" in " ".join(
        space.violations({**seed, "BLOCK_N": 512, "SPLIT": 64}, get_op("softmax").parse_problem("32x32768"), H100))
    assert not any(c["SPLIT"] > 1 for c in space.candidates(many, H100))


def test_the_persistent_row_loop_is_for_whole_rows_and_enough_of_them(device):
    space = get_op("softmax").space
    problem = get_op("softmax").parse_problem("1024x32768", "float16")
    whole = {"BLOCK_N": 32768, "ROWS": 1, "num_warps": 16, "num_stages": 1, "PERSIST": 1}
    assert space.violations(whole, problem, H100) == []
    # first a program per row holding its 16-bit row as loaded (HOLD16), then the persistent loop
    assert space.seeds(problem, H100) == [{**whole, "PERSIST": 0, "SPLIT": 1, "SYNC": 0, "HOLD16": 1},
                                            {**whole, "SPLIT": 1, "SYNC": 0, "HOLD16": 0}]
    assert "streams 32768 columns" in " ".join(space.violations({**whole, "BLOCK_N": 8192}, problem, H100))
    assert "there is none" in " ".join(space.violations({**whole, "num_stages": 2}, problem, H100))
    few = get_op("softmax").parse_problem("200x32768", "float16")  # 200 rows: one program per SM is enough
    assert "already gives each program at most one" in " ".join(space.violations({**whole, "PERSIST": 4}, few, H100))
    # the row loop stages two 2x32768 fp32 tiles ahead: 512 KiB, over the 227 KiB of shared memory
    wide = get_op("softmax").parse_problem("1024x32768", "float32")
    assert "shared memory" in " ".join(space.violations({**whole, "ROWS": 2}, wide, H100))


@pytest.mark.parametrize("shape", [(64, 1024), (8, 1, 300), (2, 4, 30, 64), (2, 3, 1, 1), (7,), (), (3, 0, 5)], ids=str)
def test_a_kept_launch_allocates_what_torch_empty_allocates(shape, device):
    """kernels._direct.new_output (the kernel modules' output allocation) gives a new tensor of the shape, dtype,
    device and strides torch.empty gives, never the same storage twice, and NaN while poisoning is on."""
    from kernels import _checks, _direct

    dtype, where = torch.float16, device.torch_device
    old = _checks.poison_outputs(False)
    try:
        outs = [_direct.new_output(torch.Size(shape), dtype, where) for _ in range(3)]
        expected = torch.empty(shape, dtype=dtype, device=where)
        for out in outs:
            assert (out.shape, out.stride(), out.dtype, out.device) == \
                (expected.shape, expected.stride(), expected.dtype, expected.device)
        if outs[0].numel():
            assert len({o.data_ptr() for o in outs}) == 3
            outs[0].fill_(1.0)
            outs[1].fill_(2.0)
            assert (outs[0] == 1.0).all()  # storage of its own, not a view of a template another call shares
        _checks.poison_outputs(True)
        assert torch.isnan(_direct.new_output(torch.Size(shape), dtype, where)).all()
    finally:
        _checks.poison_outputs(old)


def test_a_kept_launch_allocates_through_torchs_strided_allocator(device):
    """The kept launch's allocation skips torch's dispatcher where the device type has a strided allocator (the CPU's
    under the interpreter, CUDA's on a GPU: one path), and takes torch.empty_strided where it has none (meta)."""
    from kernels import _checks, _direct

    old = _checks.poison_outputs(False)
    try:
        where = device.torch_device
        _direct.new_output((4, 8), torch.float32, where)
        allocate = _direct._OUTPUTS[((4, 8), torch.float32, where)][0]
        assert allocate is getattr(torch._C._dynamo.guards, f"_empty_strided_{torch.device(where).type}")
        meta = _direct.new_output((4, 8), torch.bfloat16, torch.device("meta"))
        assert (meta.device.type, meta.shape, meta.stride(), meta.dtype) == ("meta", (4, 8), (8, 1), torch.bfloat16)
    finally:
        _checks.poison_outputs(old)


def test_check_catches_an_unwritten_element(device):
    op = get_op("softmax")
    problem = op.parse_problem("4x100", "float32")
    inputs = op.make_inputs(problem, device.torch_device)
    out = op.run(inputs, op.space.default(problem, device))
    out[2, 17] = float("nan")
    assert not op.check(out, op.reference(inputs), problem).ok
    out[2, 17] = 0.5
    assert not op.check(out, op.reference(inputs), problem).ok


def test_matmul_accepts_strided_operands(device):
    op = get_op("matmul")
    a = torch.randn(70, 40).half()
    b = torch.randn(50, 40).half().t()  # (40, 50), column-major
    cfg = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 2}
    out = op.run({"a": a, "b": b}, cfg)
    assert op.check(out, op.reference({"a": a, "b": b}), op.parse_problem("70x50x40")).ok


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape, epilogue", [("37x48x72", "none"), ("70x40x56", "bias_gelu"), ("64x32x40", "relu")])
def test_matmul_tma_matches_reference_at_the_edges(shape, epilogue, dtype, device, monkeypatch):
    """Rows aligned to 16 bytes go through the TMA kernels (the pointer kernel is taken away here, so a fallback
    fails): a tile per program (TMA=1), a program per SM walking the tiles (TMA=2; the interpreter counts the host's
    cores as SMs, so programs take several tiles each), that with its tile and K loops flattened (FLATTEN=1: its
    epilogue finds its tile by a counter of its own) and warp-specialized (TMA=3), each persistent kind also
    storing its C tile in halves (SUBTILE=1), and kinds of each with descriptors the kernel makes itself
    (DEVICE_DESC=1); tiles past the edges of M, N and K load zeros and store nothing."""
    km = importlib.import_module("kernels.matmul")
    op = get_op("matmul")
    problem = op.parse_problem(shape, dtype, epilogue=epilogue)
    inputs = op.make_inputs(problem, device.torch_device)
    ref = op.reference(inputs)
    monkeypatch.setattr(km, "matmul_kernel", None)
    kinds = ((1, 0, 0, 0), (2, 0, 0, 0), (2, 1, 0, 0), (2, 0, 1, 0), (2, 1, 1, 0), (3, 0, 0, 0), (3, 1, 0, 0),
             (1, 0, 0, 1), (2, 1, 1, 1), (3, 1, 0, 1))
    for tma, subtile, flatten, device_desc in kinds:
        if tma == 3 and dtype == "float32":
            continue  # refused: see test_launchers_reject_bad_input_clearly
        for cfg in ({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "num_warps": 8, "num_stages": 2},
                    {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1, "num_warps": 8, "num_stages": 3}):
            cfg = {**cfg, "TMA": tma, "SUBTILE": subtile, "FLATTEN": flatten, "DEVICE_DESC": device_desc}
            result = op.check(op.run(inputs, cfg), ref, problem)
            assert result.ok, f"{problem.key} {cfg}: {result.message}"


@pytest.mark.parametrize("sms", [3, 5])
@pytest.mark.parametrize("shape, epilogue", [("80x32x80", "bias_gelu"), ("96x64x64", "none"), ("40x72x56", "relu")])
def test_matmul_tail_split_computes_the_last_wave_in_halves(shape, epilogue, sms, device, monkeypatch):
    """TAIL_SPLIT=1: the tiles of the last, partial wave are computed as half-width tiles (tiles past the edges
    included). The SM count is fixed here (the interpreter counts the host's cores), so the partial waves are
    known: of 3, 6, and 6 or 9 tiles on 3 and 5 SMs, with and without SUBTILE (the whole tiles' store), with
    the whole tiles' loop flattened, and with the kernel making its descriptors (the half-width ones too)."""
    km = importlib.import_module("kernels.matmul")
    monkeypatch.setitem(importlib.import_module("kernels._backend")._SMS, None, sms)
    monkeypatch.setattr(km, "matmul_kernel", None)
    op = get_op("matmul")
    problem = op.parse_problem(shape, "float16", epilogue=epilogue)
    inputs = op.make_inputs(problem, device.torch_device)
    ref = op.reference(inputs)
    for cfg in ({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 1, "num_warps": 4, "num_stages": 2},
                {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "SUBTILE": 1, "num_warps": 4,
                 "num_stages": 2},
                {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "SUBTILE": 1, "FLATTEN": 1, "num_warps": 4,
                 "num_stages": 2},
                {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "SUBTILE": 1, "DEVICE_DESC": 1,
                 "num_warps": 4, "num_stages": 2}):
        cfg = {**cfg, "TMA": 2, "TAIL_SPLIT": 1}
        result = op.check(op.run(inputs, cfg), ref, problem)
        assert result.ok, f"{problem.key} on {sms} SMs {cfg}: {result.message}"


def test_matmul_tma_falls_back_to_pointers_where_rows_are_not_aligned(device):
    km = importlib.import_module("kernels.matmul")
    op = get_op("matmul")
    cfg = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "TMA": 1, "num_warps": 4, "num_stages": 2}
    a, b = torch.randn(70, 40).half(), torch.randn(50, 40).half().t()  # b column-major
    assert not km._tma_ready(a, b)
    assert op.check(op.run({"a": a, "b": b}, cfg), op.reference({"a": a, "b": b}), op.parse_problem("70x50x40")).ok
    a, b = torch.randn(37, 53).half(), torch.randn(53, 29).half()  # rows of 106 and 58 bytes
    assert not km._tma_ready(a, b)
    assert op.check(op.run({"a": a, "b": b}, cfg), op.reference({"a": a, "b": b}), op.parse_problem("37x29x53")).ok
    assert km._tma_ready(torch.randn(37, 56).half(), torch.randn(56, 32).half())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape, epilogue, split, block_m", [("32x64x256", "none", 4, 32), ("40x96x200", "bias_gelu", 2, 32),
                                                             ("70x33x520", "relu", 8, 32), ("33x32x96", "bias", 3, 32),
                                                             ("12x64x272", "bias", 4, 16)])
def test_matmul_split_k_matches_reference_and_leaves_counters_at_zero(shape, epilogue, split, block_m, dtype, device):
    op = get_op("matmul")
    problem = op.parse_problem(shape, dtype, epilogue=epilogue)
    inputs = op.make_inputs(problem, device.torch_device)
    cfg = {"BLOCK_M": block_m, "BLOCK_N": 32, "BLOCK_K": 16 if problem.K < 256 else 32, "GROUP_M": 1,
           "SPLIT_K": split, "num_warps": 4, "num_stages": 2}
    _split_k_matches_twice(op, problem, inputs, cfg)


def _split_k_matches_twice(op, problem, inputs, cfg):
    """Two launches of a split-K config match the reference, each leaving the tile counters at zero (the second
    reuses the counters the first left behind)."""
    ref = op.reference(inputs)
    for _ in range(2):
        result = op.check(op.run(inputs, cfg), ref, problem)
        assert result.ok, f"{problem.key} {cfg}: {result.message}"
        assert int(zeroed_counters(inputs["a"].device, 1).abs().sum()) == 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape, epilogue, split", [("32x64x256", "none", 4), ("40x96x200", "bias_gelu", 3),
                                                    ("12x64x272", "bias", 4), ("64x32x448", "relu", 6)])
def test_matmul_tma_split_k_matches_reference_and_leaves_counters_at_zero(shape, epilogue, split, dtype, device):
    """The one-tile TMA kernel's split-K: the tile's last program stores it through the descriptor (12x64x272 in
    32-deep steps gives its last split none)."""
    op = get_op("matmul")
    problem = op.parse_problem(shape, dtype, epilogue=epilogue)
    inputs = op.make_inputs(problem, device.torch_device)
    km = importlib.import_module("kernels.matmul")
    assert km._tma_ready(inputs["a"], inputs["b"])  # (else the launch would go through pointers)
    cfg = {"BLOCK_M": 16 if problem.M < 16 else 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "SPLIT_K": split,
           "TMA": 1, "num_warps": 4, "num_stages": 2}
    _split_k_matches_twice(op, problem, inputs, cfg)


def test_rowwise_ops_take_leading_dimensions(device):
    x = torch.randn(2, 3, 129)
    for name, extra in (("softmax", {}), ("layernorm", {"weight": None, "bias": None, "eps": 1e-5})):
        op = get_op(name)
        inputs = {"x": x, **extra}
        out = op.run(inputs, {"BLOCK_N": 64, "ROWS": 2, "num_warps": 1, "num_stages": 2})
        assert out.shape == x.shape
        assert op.check(out, op.reference(inputs), op.parse_problem("6x129", "float32")).ok


@pytest.mark.parametrize(
    "name, inputs, config, message",
    [
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(6, 3).half()}, None, "inner dimensions differ"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).float()}, None, "one dtype"),
        ("matmul", {"a": torch.randn(4, 5).double(), "b": torch.randn(5, 3).double()}, None, "accepted: float16"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half(), "epilogue": "bias"}, None, "needs a bias"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half(), "epilogue": "swish"}, None, "unknown epilogue"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()}, {"BLOCK_M": 32}, "missing"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()},
         {"BLOCK_M": 48, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1}, "power of two"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()},
         {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "TMA": 4}, "TMA.*must be one of 0, 1, 2, 3"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()},
         {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "TMA": 3, "num_warps": 4}, "TMA=3.*8 warps"),
        ("matmul", {"a": torch.randn(4, 5).float(), "b": torch.randn(5, 3).float()},
         {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "TMA": 3, "num_warps": 8}, "TMA=3.*float16"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()},
         {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "TMA": 1, "SUBTILE": 1}, "SUBTILE=1.*TMA=2 and 3"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()},
         {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "TMA": 3, "num_warps": 8, "TAIL_SPLIT": 1},
         "TAIL_SPLIT=1.*for TMA=2"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()},
         {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "TMA": 3, "num_warps": 8, "FLATTEN": 1},
         "FLATTEN=1.*for TMA=2"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()},
         {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "DEVICE_DESC": 1}, "DEVICE_DESC=1.*for TMA=1, 2 and 3"),
        ("attention", {"q": torch.randn(1, 1, 8, 64).half(), "k": torch.randn(1, 1, 8, 64).half(),
                       "v": torch.randn(1, 1, 8, 64).half()},
         {"BLOCK_M": 16, "BLOCK_N": 16, "PERSIST": 3}, "PERSIST.*must be one of 0, 1, 2"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()},
         {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "TMA": 2, "SPLIT_K": 2},
         "TMA=2 .a program per SM. works with SPLIT_K=1 only"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()},
         {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "SPLIT_K": 17}, "SPLIT_K.*from 1 to 16, got 17"),
        ("matmul", {"a": torch.randn(4, 5).half(), "b": torch.randn(5, 3).half()},
         {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1, "SPLIT_K": 0}, "SPLIT_K.*from 1 to 16, got 0"),
        ("softmax", {"x": torch.randn(4, 6)}, {"BLOCK_N": 32, "ROWS": 1, "PERSITS": 1},
         "unknown config parameter.*PERSITS; known: .*PERSIST"),
        ("softmax", {"x": torch.randn(4, 6)}, {"BLOCK_N": 32, "ROWS": 1, "HOLD16": 1}, "HOLD16=1.*32-bit"),
        ("softmax", {"x": torch.randn(4, 64).half()}, {"BLOCK_N": 32, "ROWS": 1, "HOLD16": 1},
         "HOLD16=1.*streamed in blocks of 32"),
        ("softmax", {"x": torch.randn(4, 64).half()}, {"BLOCK_N": 32, "ROWS": 1, "SPLIT": 2, "HOLD16": 1},
         "HOLD16=1.*SPLIT=2"),
        ("layernorm", {"x": torch.randn(4, 64).half(), "weight": None, "bias": None, "eps": 1e-5},
         {"BLOCK_N": 64, "ROWS": 1, "HOLD16": 2}, "HOLD16 must be 0 or 1"),
        ("layernorm", {"x": torch.randn(4, 64), "weight": None, "bias": None, "eps": 1e-5},
         {"BLOCK_N": 64, "ROWS": 1, "HOLD16": 1}, "HOLD16=1.*32-bit"),
        ("softmax", {"x": torch.randn(4, 6).half().t()}, None, "contiguous in its last dimension"),
        ("softmax", {"x": torch.randn(4, 6).int()}, None, "accepted"),
        ("softmax", {"x": torch.randn(0, 6)}, None, "empty"),
        ("softmax", {"x": [1.0, 2.0]}, None, "must be a torch.Tensor"),
        ("layernorm", {"x": torch.randn(4, 6), "weight": torch.randn(5), "bias": None, "eps": 1e-5}, None, "to match"),
        ("layernorm", {"x": torch.randn(4, 6), "weight": None, "bias": None, "eps": -1.0}, None, "eps must be"),
        ("gelu", {"x": torch.randn(4, 6), "approximate": "sigmoid"}, None, "accepted: tanh, none"),
        ("gelu", {"x": torch.randn(4, 6).t()}, None, "contiguous"),
        ("attention", {"q": torch.randn(1, 1, 8, 32).half(), "k": torch.randn(1, 1, 8, 32).half(),
                       "v": torch.randn(1, 1, 8, 32).half()}, None, "head_dim 32"),
        ("attention", {"q": torch.randn(1, 1, 8, 64).float(), "k": torch.randn(1, 1, 8, 64).float(),
                       "v": torch.randn(1, 1, 8, 64).float()}, None, "accepted: float16, bfloat16"),
        ("attention", {"q": torch.randn(1, 1, 8, 64).half(), "k": torch.randn(1, 1, 9, 64).half(),
                       "v": torch.randn(1, 1, 9, 64).half()}, None, "k and v \\(batch, kv_heads, seq"),
        ("attention", {"q": torch.randn(1, 4, 8, 64).half(), "k": torch.randn(1, 3, 8, 64).half(),
                       "v": torch.randn(1, 3, 8, 64).half()}, None, "heads a multiple of kv_heads"),
    ],
)
def test_launchers_reject_bad_input_clearly(name, inputs, config, message):
    op = get_op(name)
    if config is None:
        config = {p.name: p.values[0] for p in op.space.params}
    with pytest.raises((TypeError, ValueError), match=message):
        op.run(inputs, config)


def test_cuda_tensors_are_refused_on_the_interpreter(device):
    if not device.is_interpreter:
        pytest.skip("interpreter-only check")
    meta = torch.empty(4, 6, device="meta")
    with pytest.raises(ValueError, match="must be on the CPU"):
        get_op("softmax").run({"x": meta}, {"BLOCK_N": 32, "ROWS": 1, "num_warps": 1, "num_stages": 1})


@pytest.mark.parametrize("group", [1, 2, 5])
def test_causal_attention_runs_every_block_in_head_groups(group, monkeypatch, device):
    """Causal launches order query blocks longest first within groups of heads (sized for the L2): a group
    of one, groups that leave a partial last one (5 heads in twos), and one group of all must each run every
    (head, query block) exactly once."""
    ka = importlib.import_module("kernels.attention")  # the package exports a function of the same name
    op = get_op("attention")
    problem = op.parse_problem("5x1x70x64", "float16", causal=True)
    inputs = op.make_inputs(problem, device.torch_device)
    kv_bytes = 2 * 70 * 64 * 2
    monkeypatch.setattr(ka, "L2_SHARE", (group + 0.5) * kv_bytes / ka.DEFAULT_L2_BYTES)
    assert ka.causal_group(inputs["q"]) == group
    ref = op.reference(inputs)
    for tma in (0, 1):
        cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "TMA": tma, "num_warps": 1, "num_stages": 2}
        result = op.check(op.run(inputs, cfg), ref, problem)
        assert result.ok, f"group {group} {cfg}: {result.message}"


@pytest.mark.parametrize("sms", [2, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_persistent_attention_walks_every_query_block_once(causal, sms, monkeypatch, device):
    """PERSIST=k: k programs per SM walk the (batch, head, query block)s the grid apart, in the launch's order
    (causal: longest first within head groups). On 2 and 3 SMs (fixed here) each program takes several blocks,
    the last ones fewer; through pointers, through the launcher's descriptors (seq 64) and through descriptors
    each block makes (seq 70, whose tiles would cross into the next head)."""
    monkeypatch.setitem(importlib.import_module("kernels._backend")._SMS, None, sms)
    op = get_op("attention")
    for shape in ("2x3x64x64", "3x1x70x128"):
        problem = op.parse_problem(shape, "float16", causal=causal)
        inputs = op.make_inputs(problem, device.torch_device)
        ref = op.reference(inputs)
        for tma, persist in ((0, 1), (1, 1), (1, 2)):
            cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "TMA": tma, "PERSIST": persist, "num_warps": 1, "num_stages": 2}
            result = op.check(op.run(inputs, cfg), ref, problem)
            assert result.ok, f"{problem.key} on {sms} SMs {cfg}: {result.message}"


@pytest.mark.parametrize("seq", [64, 70])
def test_causal_attention_with_key_blocks_wider_than_query_blocks(seq, device):
    """BLOCK_N > BLOCK_M (outside the space, slower, but a caller may pass it): the masked key block starts
    before the query block (seq 64: every block full; 70: the last key block runs past the end)."""
    op = get_op("attention")
    problem = op.parse_problem(f"1x2x{seq}x64", "float16", causal=True)
    inputs = op.make_inputs(problem, device.torch_device)
    ref = op.reference(inputs)
    for bm, bn, tma in ((16, 32, 0), (16, 64, 1), (32, 64, 1)):
        cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "TMA": tma, "num_warps": 1, "num_stages": 2}
        result = op.check(op.run(inputs, cfg), ref, problem)
        assert result.ok, f"{problem.key} {cfg}: {result.message}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_attention_descriptors_are_made_once_where_the_rows_stack(dtype, device):
    """Contiguous q, k, v whose seq is a multiple of both blocks get launcher-made TMA descriptors over
    (batch*heads*seq, head_dim); each program must still read and write only its own (batch, head). Views
    whose heads do not stack, or a seq that would let a tile cross into the next head, fall back to
    descriptors made per program, with the same result."""
    ka = importlib.import_module("kernels.attention")
    op = get_op("attention")
    cfg = {"BLOCK_M": 32, "BLOCK_N": 16, "TMA": 1, "num_warps": 1, "num_stages": 2}
    problem = op.parse_problem("2x3x64x64", dtype, causal=True)
    inputs = op.make_inputs(problem, device.torch_device)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    assert ka._host_descriptors(cfg, q, k, v, q) is not None
    assert ka._host_descriptors({**cfg, "BLOCK_M": 128}, q, k, v, q) is None  # 128-row tiles cross heads
    # (batch, seq, heads, head_dim) in memory, seen as (batch, heads, seq, head_dim): rows do not stack
    bshd = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)]
    assert ka._host_descriptors(cfg, *bshd, q) is None
    for causal in (True, False):
        ref = op.reference({**inputs, "causal": causal})
        for qkv in ((q, k, v), bshd):
            out = ka.attention(*qkv, cfg, causal=causal)
            result = op.check(out, ref, problem)
            assert result.ok, f"{problem.key} causal={causal}: {result.message}"


def test_attentions_host_descriptors_are_tritons_own_made_without_checking_again(device):
    """The descriptors a kept attention launch makes on every call are Triton's class, equal to those Triton's checked
    constructor makes; what that constructor would refuse, prepare refused before (a block Triton's checks refuse
    is taken here without a word)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    ka = importlib.import_module("kernels.attention")
    cfg = {"BLOCK_M": 32, "BLOCK_N": 16, "TMA": 1, "num_warps": 1, "num_stages": 2}
    q = torch.randn(2, 3, 64, 64, device=device.torch_device)
    made = ka._host_descriptors(cfg, q, q, q, q)
    checked = [TensorDescriptor(q, [2 * 3 * 64, 64], [64, 1], [block, 64]) for block in (32, 16, 16, 32)]
    assert [type(d) for d in made] == [TensorDescriptor] * 4 and made == checked
    with pytest.raises((AssertionError, ValueError)):  # (Triton's versions raise either)
        TensorDescriptor(q, [384, 64], [64, 1], [3, 64])  # not a power of two
    from kernels._descriptors import Prechecked

    assert type(Prechecked(q, [384, 64], [64, 1], [3, 64])) is TensorDescriptor


def test_state_a_captured_launch_may_use_is_never_freed(device):
    """A CUDA graph that captured a launch keeps using the counters and words it was given: counters outgrown by a
    later launch stay referenced, and a layout's words are the same tensor however many layouts come after."""
    import gc
    import weakref

    from kernels import _counters

    dev = torch.device(device.torch_device)
    first = zeroed_counters(dev, 1)
    kept = weakref.ref(first)
    bigger = zeroed_counters(dev, first.numel() + 1)
    assert bigger.numel() > first.numel() and zeroed_counters(dev, 1) is bigger
    words = row_words(dev, 7, 4)
    for rows in range(1, 600):  # more layouts than any bound a cache might have
        row_words(dev, rows + 1000, 2)
    del first
    gc.collect()
    assert kept() is not None and row_words(dev, 7, 4) is words
    assert any(t is kept() for t in _counters._OUTGROWN)
