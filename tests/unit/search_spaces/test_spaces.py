"""Spaces: constraints read from the device, rejections with reasons, defaults that are valid, clear errors."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import UnknownOpError, builtin_ops, get_op, op_names, register_op, unregister_op
from search_spaces.problem import ProblemError
from search_spaces.space import ConfigError, config_key
from tests.support.devices import A100, H100

LANDSCAPES = Path(__file__).resolve().parents[2] / "data" / "landscapes"
PROBLEMS = {op.name: list(dict.fromkeys(e.shape for e in (*op.examples, *op.gpu_examples))) for op in builtin_ops()}


def test_op_names():
    """The built-in ops (every search_spaces module declaring an OP, by module name) come first; plugins and
    decorated kernels (other tests import some) follow."""
    import pkgutil

    import search_spaces

    declaring = sorted(m.name for m in pkgutil.iter_modules(search_spaces.__path__)
                       if hasattr(__import__(f"search_spaces.{m.name}", fromlist=["OP"]), "OP"))
    assert {"attention", "gelu", "layernorm", "matmul", "softmax"} <= set(declaring)
    assert [op.name for op in builtin_ops()] == op_names()[:len(declaring)] == declaring


def test_an_op_module_added_to_search_spaces_is_registered(tmp_path, monkeypatch):
    """Adding a built-in op is its own module: a search_spaces module declaring an OP is found, with its library
    call, and nothing else is edited."""
    import search_spaces
    from autotuner.launch import library

    module = tmp_path / "doubled.py"
    module.write_text(DOUBLED_OP)
    monkeypatch.setattr(search_spaces, "__path__", [*search_spaces.__path__, str(tmp_path)])
    found = [op for op in builtin_ops() if op.name == "doubled"]
    assert len(found) == 1 and found[0].library is not None
    register_op(found[0], replace=True)
    try:
        assert "double" in library.names()
        x = torch.arange(6.0)
        assert torch.equal(library.call("double")(x), 2 * x)
    finally:
        unregister_op("doubled")
        library.forget("double")


DOUBLED_OP = """
import torch
from search_spaces.contract import LibraryCall, TunableOp
from search_spaces.softmax import SPACE, SoftmaxProblem


def double(x):
    \"\"\"2 * x.\"\"\"
    return (x,)


OP = TunableOp(
    name="doubled", problem_type=SoftmaxProblem, space=SPACE, dtypes=("float32",),
    launch=lambda inputs, config: 2 * inputs["x"], make_inputs=lambda p, d: {"x": torch.ones(p.rows, p.cols)},
    problem_from_inputs=lambda inputs: SoftmaxProblem(*inputs["x"].reshape(-1, inputs["x"].shape[-1]).shape,
                                                      "float32"),
    reference=None,
    library=LibraryCall(face=double, signature=lambda x: (x.shape, x.dtype), tensors=(0,),
                        inputs=lambda x: {"x": x.reshape(1, -1)}, prepare=lambda x, config: (lambda x: 2 * x),
                        run=lambda x, config: 2 * x, launch_args=(0,)),
)
"""




def test_shared_memory_limit_comes_from_the_device(small_smem_device):
    op = get_op("matmul")
    problem = op.parse_problem("4096x4096x4096", "float16")
    big = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4}
    assert op.space.violations(big, problem, H100) == []  # 128 KiB fits in 227 KiB
    reasons = op.space.violations(big, problem, small_smem_device)
    assert any("shared memory 131072 B" in r and "65536 B" in r for r in reasons), reasons
    with pytest.raises(ConfigError, match="shared memory"):
        op.space.validate(big, problem, small_smem_device)
    full = op.space.complete(big)  # with SPLIT_K=1, which a config may leave out
    assert full in op.space.candidates(problem, H100)
    assert full not in op.space.candidates(problem, small_smem_device)
    rejected = {tuple(sorted(r.config.items())): r.reason for r in op.space.enumerate(problem, small_smem_device).rejected}
    assert "shared memory" in rejected[tuple(sorted(full.items()))]


def test_matmul_shared_memory_agrees_with_the_hopper_landscapes():
    """Whole matmul spaces timed on H100s and H200s (tests/data/landscapes): each config that failed there is
    over the shared memory the space allows now (64x256x64 tiles with 8 warps and 5 stages, flattened, C stored
    in halves: the accumulator half moved between warpgroups), and none that ran is."""
    from autotuner.engine.search.replay import load_landscape
    from search_spaces.matmul import smem_bytes

    op = get_op("matmul")
    failed = ran = 0
    for path in sorted(LANDSCAPES.glob("matmul_*_h[12]00*.json")):
        landscape = load_landscape(path)
        fields = landscape.problem
        problem = op.parse_problem(f"{fields['M']}x{fields['N']}x{fields['K']}", fields["dtype"])
        for config in landscape.configs:
            fits = smem_bytes(config, problem) <= H100.smem_per_block
            if landscape.times[config_key(config)] is None:
                failed += 1
                assert not fits, (path.name, config)
                assert any("shared memory" in r for r in op.space.violations(config, problem, H100))
            else:
                ran += 1
                assert fits, (path.name, config, smem_bytes(config, problem))
    assert failed == 8 and ran > 20000  # (four configs on each of two 4708-config landscapes)


def test_matmul_pointer_stages_on_ampere_and_ada_hold_one_stage_less():
    """Triton's pipeliner on compute capability 8.x keeps num_stages - 1 stages of the pointer kernel in shared
    memory (every pointer config near the limit compiled for sm_80, sm_86 and sm_89: benchmarks/RESULTS.md), so a
    config that fits that way is in the space there, and one that does not is refused saying so."""
    op = get_op("matmul")
    problem = op.parse_problem("4096x4096x4096", "float16")
    ada = DeviceInfo("NVIDIA GeForce RTX 4090", (8, 9), 128, 24 << 30, 101376, "cuda:0")
    wide = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4}
    assert op.space.violations(wide, problem, A100) == []  # 3 x 48 KiB of the A100's 163 KiB
    square = {**wide, "BLOCK_N": 128}
    assert op.space.violations(square, problem, ada) == []  # 3 x 32 KiB of 99 KiB
    assert op.space.default(problem, ada)["num_stages"] == 4
    reasons = op.space.violations({**square, "num_stages": 5}, problem, ada)
    assert any("shared memory 131072 B ((num_stages - 1) x (A tile + B tile))" in r for r in reasons), reasons
    # Hopper holds every stage: the same config needs 4 x 48 KiB there
    assert any("shared memory 196608 B" in r for r in op.space.violations(wide, problem, dataclasses.replace(
        H100, smem_per_block=166912)))


def test_matmul_one_tile_tma_kernel_stores_a_16_bit_c_tile_through_the_pipeline_buffers():
    """Once its loop is done, the one-tile TMA kernel's float16 C tile goes out through the pipeline's buffers
    (compiled for sm_90 under Triton 3.6 and 3.9: benchmarks/RESULTS.md), so 128x256x64 keeps 4 stages through TMA
    as through pointers; a float32 C tile is counted on top."""
    op = get_op("matmul")
    half, single = op.parse_problem("4096x4096x4096", "float16"), op.parse_problem("4096x4096x4096", "float32")
    wide = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "TMA": 1, "num_warps": 8, "num_stages": 4}
    assert op.space.violations(wide, half, H100) == []  # 4 x 48 KiB, the 64 KiB C tile in them
    reasons = op.space.violations({**wide, "num_stages": 5}, half, H100)
    assert any("the larger of num_stages x (A tile + B tile) and the C tile" in r for r in reasons), reasons
    narrow = {**wide, "BLOCK_K": 32}  # float32: 4 x 48 KiB and a 128 KiB C tile
    assert any("+ C tile + barriers" in r for r in op.space.violations(narrow, single, H100))
    assert op.space.violations({**narrow, "num_stages": 2}, single, H100) == []
    assert op.space.violations(narrow, half, H100) == []


def test_matmul_split_k_only_where_tiles_do_not_fill_the_device():
    op = get_op("matmul")
    skinny, square = op.parse_problem("32x4096x4096", "float16"), op.parse_problem("4096x4096x4096", "float16")
    cfg = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "SPLIT_K": 4, "num_warps": 4, "num_stages": 4}
    assert op.space.violations(cfg, skinny, H100) == []  # 64 tiles on 132 SMs, 8 K steps per split
    big = {**cfg, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}
    assert any("already fill" in r for r in op.space.violations(big, square, H100))
    assert any("per split (at least 1024" in r for r in op.space.violations({**cfg, "SPLIT_K": 8},
                                                                            op.parse_problem("32x4096x4096"), H100))
    # Decode's skinny tiles: 16 rows where M <= 16, K steps of 256 only where the tiles leave SMs idle.
    assert op.space.violations({**cfg, "BLOCK_M": 16}, op.parse_problem("16x4096x4096"), H100) == []
    assert any("BLOCK_M=16 is for M <= 16" in r for r in op.space.violations({**cfg, "BLOCK_M": 16}, skinny, H100))
    long_k = {**cfg, "BLOCK_K": 256, "num_stages": 3}
    assert op.space.violations(long_k, skinny, H100) == []
    assert any("BLOCK_K=256 is for" in r for r in op.space.violations({**big, "BLOCK_K": 256, "num_stages": 2},
                                                                      square, H100))
    # A config that leaves SPLIT_K out (written before it existed) means SPLIT_K=1.
    old = {k: v for k, v in big.items() if k != "SPLIT_K"}
    assert op.space.validate(old, square, H100)["SPLIT_K"] == 1
    assert not any(c["SPLIT_K"] > 1 for c in op.space.candidates(square, H100))


def test_matmul_accumulators_must_fit_in_registers():
    op = get_op("matmul")
    square = op.parse_problem("4096x4096x4096", "float16")
    cfg = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "TMA": 0, "num_warps": 8, "num_stages": 3}
    assert op.space.violations(cfg, square, H100) == []  # 128 accumulators per thread
    assert op.space.violations({**cfg, "num_warps": 4}, square, H100) == [
        "4 warps for a 128x256 tile hold 256 accumulators per thread (at most 128: beyond that the kernel spills "
        "registers)"]
    assert not any(c["BLOCK_M"] * c["BLOCK_N"] > 128 * 32 * c["num_warps"]
                   for c in op.space.candidates(square, H100))


def test_matmul_tma_rules_and_seeds():
    op = get_op("matmul")
    square, skinny = op.parse_problem("4096x4096x4096", "float16"), op.parse_problem("32x4096x4096", "float16")
    cfg = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "TMA": 1, "num_warps": 8, "num_stages": 3}
    assert op.space.violations(cfg, square, H100) == []
    # The TMA store goes out through a C tile in shared memory: the one-tile kernel's in the pipeline's buffers (4
    # stages fit, as through pointers), the persistent kernel's apart from them (4 stages do not fit) ...
    assert op.space.violations({**cfg, "TMA": 0, "num_stages": 4}, square, H100) == []
    assert op.space.violations({**cfg, "num_stages": 4}, square, H100) == []
    assert any("+ C tile" in r for r in op.space.violations({**cfg, "TMA": 2, "num_stages": 4}, square, H100))
    # ... but storing the C tile in halves, which needs half of it
    assert op.space.violations({**cfg, "TMA": 2, "SUBTILE": 1, "num_stages": 4}, square, H100) == []
    assert any("SUBTILE=1" in r for r in op.space.violations({**cfg, "SUBTILE": 1}, square, H100))  # TMA=1
    split = {**cfg, "BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 1, "SPLIT_K": 2, "num_warps": 4}
    assert op.space.violations(split, skinny, H100) == []  # the one-tile TMA kernel splits K as the pointer one does
    for persistent in (2, 3):
        assert f"SPLIT_K=2: TMA={persistent} (a program per SM) works with SPLIT_K=1 only" in op.space.violations(
            {**split, "TMA": persistent}, skinny, H100)
    assert any("Hopper" in r for r in op.space.violations(cfg, square, A100))
    seeds = op.space.seeds(square, H100)
    assert {c["TMA"] for c in seeds} == {0, 1, 2, 3} and all(c in op.space.candidates(square, H100) for c in seeds)
    # A program per SM needs more tiles than SMs: 4096 x 512 in 128 x 256 tiles is 64 tiles for 132 SMs.
    wide = op.parse_problem("4096x512x4096", "float16")
    assert any("give every program one tile" in r for r in op.space.violations({**cfg, "TMA": 2}, wide, H100))
    assert op.space.violations({**cfg, "TMA": 3}, square, H100) == []
    assert op.space.seeds(square, A100) == []
    # M=32: the big tiles are too big; decode's thin tiles instead (split-K, K steps of 256), each valid
    thin = op.space.seeds(skinny, H100)
    assert [(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["SPLIT_K"], c["TMA"]) for c in thin] == [
        (32, 64, 128, 2, 0), (32, 32, 256, 1, 1), (32, 64, 256, 1, 0)]
    assert all(op.space.violations(c, skinny, H100) == [] for c in thin)
    assert op.space.default(square, H100)["TMA"] == 0  # the default stays the tutorial's pointer kernel
    # K-heavy: 32 tiles of 128 x 256 (64 of 128 x 128) leave SMs idle; TMA with K split to fill them comes first,
    # at 3 where a power of two would fill fewer (36 tiles: 108 programs)
    long_k = op.parse_problem("1024x1024x16384", "float16")
    first = op.space.seeds(long_k, H100)[:2]
    assert [(c["BLOCK_N"], c["TMA"], c["SPLIT_K"]) for c in first] == [(128, 1, 2), (256, 1, 4)]
    assert all(c in op.space.candidates(long_k, H100) for c in first)
    assert op.space.seeds(op.parse_problem("768x1536x32768", "bfloat16"), H100)[0]["SPLIT_K"] == 3
    assert not any(c["SPLIT_K"] > 1 for c in seeds)  # 4096^3 fills the SMs without
    # FLATTEN is the persistent kernel's (not the warp-specialized one's), and the seeds use it
    assert op.space.violations({**cfg, "TMA": 2, "SUBTILE": 1, "FLATTEN": 1, "num_stages": 4}, square, H100) == []
    assert any("FLATTEN=1" in r for r in op.space.violations({**cfg, "TMA": 3, "FLATTEN": 1}, square, H100))
    assert any(c.get("FLATTEN") for c in seeds)




def test_attention_shared_memory_and_causal_rules(small_smem_device):
    op = get_op("attention")
    problem = op.parse_problem("1x1x4096x128", "float16", causal=True)
    cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3}
    assert any("shared memory" in r for r in op.space.violations(cfg, problem, small_smem_device))
    cfg = {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1}
    assert any("BLOCK_N > BLOCK_M" in r for r in op.space.violations(cfg, problem, H100))  # runs, but slower
    assert op.space.violations(cfg, op.parse_problem("1x1x4096x128", "float16"), H100) == []
    # through TMA the barriers and a scratch come on top of the tiles (up to 1 KiB and 64 B more, compiled for
    # sm_90): a device whose shared memory the tiles alone fill runs the pointer loads only
    full = op.parse_problem("1x1x4096x128", "float16")
    cfg = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
    tiles_only = dataclasses.replace(H100, smem_per_block=(128 + 2 * 3 * 64) * 128 * 2)
    assert op.space.violations({**cfg, "TMA": 0}, full, tiles_only) == []
    assert any("barriers" in r for r in op.space.violations({**cfg, "TMA": 1}, full, tiles_only))


def test_variants_measured_slower_are_declared_but_not_searched():
    """Attention's persistent grid and matmul's device-made descriptors run (tests/integration/test_kernels.py) but lost on the
    GPU's time wherever measured, so each space declares them at 0 only: a config asking for them is refused with
    the space's values, and the grid holds none."""
    att, mm = get_op("attention"), get_op("matmul")
    big = att.parse_problem("4x32x2048x128", "float16")
    cfg = {"BLOCK_M": 128, "BLOCK_N": 64, "TMA": 1, "num_warps": 4, "num_stages": 2}
    assert att.space.violations({**cfg, "PERSIST": 0}, big, H100) == []
    assert any("PERSIST=2 is outside the space" in r for r in att.space.violations({**cfg, "PERSIST": 2}, big, H100))
    square = mm.parse_problem("4096x4096x4096")
    flat = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "TMA": 2, "SUBTILE": 1, "FLATTEN": 1,
            "num_warps": 8, "num_stages": 4}
    assert mm.space.violations(flat, square, H100) == []
    assert any("DEVICE_DESC=1 is outside" in r for r in mm.space.violations({**flat, "DEVICE_DESC": 1}, square, H100))
    assert not any(c["PERSIST"] for c in att.space.grid()) and not any(c["DEVICE_DESC"] for c in mm.space.grid())


def test_attention_default_uses_tma_only_on_hopper(small_smem_device):
    op = get_op("attention")
    big = op.parse_problem("4x32x2048x128", causal=True)
    hopper, older = op.space.default(big, H100), op.space.default(big, small_smem_device)
    assert hopper == {"BLOCK_M": 128, "BLOCK_N": 64, "TMA": 1, "PERSIST": 0, "num_warps": 4, "num_stages": 2}
    assert older["TMA"] == 0 and op.space.violations(older, big, small_smem_device) == []
    assert op.space.violations(hopper, big, H100) == []
    assert op.space.default(op.parse_problem("1x16x8192x64", "bfloat16", causal=True), H100)["num_warps"] == 8


def test_attention_seeds_are_valid_where_they_can_run(small_smem_device):
    op = get_op("attention")
    big, tiny = op.parse_problem("4x32x2048x128", causal=True), op.parse_problem("1x2x37x64")
    seeds = op.space.seeds(big, H100)
    assert seeds and all(op.space.violations(c, big, H100) == [] for c in seeds)
    assert all(c in op.space.candidates(big, H100) for c in seeds)
    assert op.space.seeds(big, small_smem_device) == []  # TMA needs Hopper; the tiles need more shared memory
    assert all(c["BLOCK_M"] <= 64 for c in op.space.seeds(tiny, H100))  # 128-row tiles are too big for 37 rows


def test_tiles_larger_than_the_problem_are_rejected():
    op = get_op("matmul")
    problem = op.parse_problem("32x4096x4096")
    cands = op.space.candidates(problem, H100)
    assert cands and all(c["BLOCK_M"] == 32 for c in cands)
    softmax = get_op("softmax")
    reasons = softmax.space.violations({"BLOCK_N": 4096, "ROWS": 1, "num_warps": 4, "num_stages": 1},
                                       softmax.parse_problem("8x1000"), H100)
    assert any("larger than useful" in r for r in reasons)


def test_hold16_only_for_16_bit_rows_held_whole_with_many_elements_a_thread():
    """HOLD16=1 (a 16-bit row held as loaded): in the softmax and layernorm spaces for 16-bit rows held whole by
    one program where a thread holds at least 32 elements; never for float32, streamed rows or SPLIT."""
    for name in ("softmax", "layernorm"):
        op = get_op(name)
        half, single = op.parse_problem("1024x32768", "float16"), op.parse_problem("1024x32768", "float32")
        held = [c for c in op.space.candidates(half, H100) if c["HOLD16"]]
        assert held and all(c["BLOCK_N"] >= 32768 and c["ROWS"] * c["BLOCK_N"] // (32 * c["num_warps"]) >= 32
                            for c in held)
        assert not any(c["HOLD16"] for c in op.space.candidates(single, H100))
        whole = {"BLOCK_N": 32768, "ROWS": 1, "num_warps": 16, "num_stages": 1, "HOLD16": 1}
        assert op.space.violations(whole, half, H100) == []
        assert any("this one is 32-bit" in r for r in op.space.violations(whole, single, H100))
        assert any("streamed in blocks of 4096" in r
                   for r in op.space.violations({**whole, "BLOCK_N": 4096, "num_warps": 4}, half, H100))
        short = op.parse_problem("4096x1024", "bfloat16")
        assert any("puts 16 in each (at least 32)" in r
                   for r in op.space.violations({**whole, "BLOCK_N": 1024, "num_warps": 2}, short, H100))
    softmax = get_op("softmax")
    few = softmax.parse_problem("8x65536", "float16")
    assert not any(c["HOLD16"] and c["SPLIT"] > 1 for c in softmax.space.candidates(few, H100))
    assert softmax.space.seeds(softmax.parse_problem("1024x32768", "bfloat16"), H100)[0]["HOLD16"] == 1


def test_config_outside_the_space_names_the_parameter():
    op = get_op("softmax")
    problem = op.parse_problem("8x1000")
    with pytest.raises(ConfigError, match=r"ROWS=3 is outside the space; accepted: \[1, 2, 4, 8, 16\]"):
        op.space.validate({"BLOCK_N": 1024, "ROWS": 3, "num_warps": 4, "num_stages": 1}, problem, H100)
    with pytest.raises(ConfigError, match="unknown parameter"):
        op.space.validate({"BLOCK_N": 1024, "ROWS": 1, "num_warps": 4, "num_stages": 1, "X": 1}, problem, H100)


@pytest.mark.parametrize(
    "name, shape, dtype, opts, message",
    [
        ("matmul", "4096x4096", "float16", {}, "expected 3: MxNxK"),
        ("matmul", "4096xabc", "float16", {}, "bad shape string"),
        ("matmul", "0x4x4", "float16", {}, "at least 1"),
        ("matmul", "4x4x4", "int8", {}, "unsupported dtype 'int8'; accepted: float16, bfloat16, float32"),
        ("matmul", "4x4x4", "float16", {"epilogue": "swish"}, "unknown epilogue"),
        ("softmax", "", "float16", {}, "bad shape string"),
        ("attention", "4x32x2048", "float16", {}, "BATCHxHEADSxSEQxHEAD_DIM"),
        ("attention", "4x32x2048x96", "float16", {}, "head_dim 96 is not supported"),
        ("attention", "4x32x2048x64", "float32", {}, "accepted: float16, bfloat16"),
        ("gelu", "1000", "float16", {"approximate": "fast"}, "accepted: tanh, none"),
        ("softmax", "8x8", "float16", {"epilogue": "bias"}, "takes no option"),
    ],
)
def test_bad_problems_give_clear_errors(name, shape, dtype, opts, message):
    with pytest.raises(ValueError, match=message):
        get_op(name).parse_problem(shape, dtype, **opts)


def test_problem_keys_are_canonical():
    op = get_op("matmul")
    assert op.parse_problem("4096X4096x4096", "fp16").key == "4096x4096x4096:float16"
    assert op.parse_problem("64x64x64", "bf16", epilogue="bias_gelu").key == "64x64x64:bfloat16:bias_gelu"
    assert get_op("gelu").parse_problem("4096x4096").key == get_op("gelu").parse_problem("16777216").key
    assert get_op("softmax").parse_problem("2x3x100").key == "6x100:float16"
    assert get_op("attention").parse_problem("4x32x2048x128", causal=True).key == "4x32x2048x128:float16:causal"


def test_unknown_op_lists_the_known_ones():
    with pytest.raises(UnknownOpError, match="unknown op .conv.; known ops: attention, gelu, layernorm, matmul, softmax"):
        get_op("conv")
    assert issubclass(UnknownOpError, ValueError)
    assert isinstance(ProblemError("x"), ValueError)


def _layout(value):
    """What a compiled kernel depends on in an input: a tensor's shape, strides, dtype and offset; else the value."""
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), value.stride(), value.dtype, value.storage_offset()
    return value


@pytest.mark.parametrize("op", builtin_ops(), ids=lambda op: op.name)
def test_inputs_on_meta_have_the_layout_of_real_ones(op):
    """A compile pool process launches on meta inputs (no CUDA context, no memory: autotuner.engine.measure.compile_pool) what
    the trial worker then runs on real ones, so both must specialize the kernel alike."""
    assert op.examples
    for example in op.examples:
        problem = op.parse_problem(example.shape, example.dtype or "float16", **example.options)
        meta, real = op.make_inputs(problem, "meta"), op.make_inputs(problem, "cpu")
        assert meta.keys() == real.keys()
        for name in real:
            assert _layout(meta[name]) == _layout(real[name]), (op.name, example.shape, name)
            if isinstance(meta[name], torch.Tensor):
                assert meta[name].device.type == "meta"


def test_meta_tensors_stand_for_the_compiled_for_device_in_a_compile_only_process_alone(monkeypatch):
    """A pool compiling for GPU 1 without a context reads GPU 1's SM count and limits for its meta inputs; anywhere
    else a meta tensor stands for no device (and the kernels refuse it)."""
    from kernels import _backend

    meta = torch.device("meta")
    assert _backend.gpu_index(meta) is None
    monkeypatch.setattr(_backend, "COMPILE_ONLY", True)
    monkeypatch.setattr(_backend, "META_DEVICE", 1)
    assert _backend.gpu_index(meta) == 1 and _backend.gpu_index(torch.device("cpu")) is None


_KERNELS = '''"""{doc}"""
import triton
import triton.language as tl
{imports}
STEP = {step}

{helper}
@triton.jit
def kern(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, _h(tl.load(x_ptr + offs)) + STEP)


def launch(x):
    """{doc}"""
    kern[(1,)](x, BLOCK=16)
'''
_HELPER = '''
@triton.jit
def _h(x):
    return x * {factor}

'''


def _modules(tmp_path, name, *, doc="one", split=False, step=1, factor=2):
    """A built-in op's kernel modules written out and imported: the helper in the kernel's module, or beside it."""
    import importlib.util

    folder = tmp_path / name
    folder.mkdir()
    files = {"k": _KERNELS.format(doc=doc, step=step, imports=f"from {name}_h import _h" if split else "",
                                  helper="" if split else _HELPER.format(factor=factor))}
    if split:
        files["h"] = "import triton\n" + _HELPER.format(factor=factor)
    modules = []
    for mod in sorted(files):  # h before k, which imports it
        (folder / f"{mod}.py").write_text(files[mod])
        spec = importlib.util.spec_from_file_location(f"{name}_{mod}", folder / f"{mod}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        modules.append(module)
    return modules


def test_a_built_in_ops_hash_follows_its_code_not_where_it_lives_or_its_docstrings(tmp_path):
    """Moving a JIT helper into a module of its own, or rewording a docstring, keeps every stored result current;
    a change to a kernel's helper, its host code's constants or code makes them stale."""
    from search_spaces.kernel_identity import module_identity

    try:
        base = module_identity(*_modules(tmp_path, "base"))
        assert module_identity(*_modules(tmp_path, "moved", split=True, doc="reworded")) == base
        assert module_identity(*_modules(tmp_path, "helper", factor=3)) != base
        assert module_identity(*_modules(tmp_path, "helper_moved", split=True, factor=3)) != base
        assert module_identity(*_modules(tmp_path, "constant", step=2)) != base
    finally:
        for name in [n for n in sys.modules if n.rsplit("_", 1)[0] in ("base", "moved", "helper", "helper_moved", "constant")]:
            del sys.modules[name]


def test_every_grid_is_the_product_less_the_values_a_parameter_takes_only_with_another():
    """The grid joins the freely varying leading parameters to the checked combinations of the rest: the same
    configs, in the same order, as the whole product filtered by the only_with rules."""
    import itertools

    for op in builtin_ops():
        params = op.space.params
        at = {p.name: i for i, p in enumerate(params)}
        rules = [(at[p.name], p.implied, at[p.only_with[0]], set(p.only_with[1])) for p in params if p.only_with]
        expected = tuple(v for v in itertools.product(*(p.values for p in params))
                         if all(v[i] == implied or v[j] in where for i, implied, j, where in rules))
        assert op.space._grid_values == expected, op.name
