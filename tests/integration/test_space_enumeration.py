"""Every op's whole space enumerated on a device of tests.support.devices: the default valid and among the
candidates, and a kernel variant's own options varying only with it (seconds each: matmul's space is large)."""

from __future__ import annotations

import dataclasses

import pytest

from autotuner.base.registry import builtin_ops, get_op
from search_spaces.space import ConfigError, Param
from tests.support.devices import H100

PROBLEMS = {op.name: list(dict.fromkeys(e.shape for e in (*op.examples, *op.gpu_examples))) for op in builtin_ops()}


@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("dev", ["h100", "small"])
def test_default_is_valid_and_in_candidates(name, dev, small_smem_device):
    device = H100 if dev == "h100" else small_smem_device
    op = get_op(name)
    for shape in PROBLEMS[name]:
        for dtype in op.dtypes:
            problem = op.parse_problem(shape, dtype)
            cands = op.space.enumerate(problem, device)
            default = op.space.default(problem, device)
            assert default in cands.valid
            assert len(cands.valid) + len(cands.rejected) == len(list(op.space.grid()))
            assert all(r.reason for r in cands.rejected)


def test_options_of_one_kernel_vary_only_with_it():
    """A parameter declared `only_with` another takes its other values only where that one has the named values
    (matmul's SPLIT_K with the one-tile kernels, SUBTILE, TAIL_SPLIT and FLATTEN with the persistent ones); the grid
    leaves the rest out, and leaves out no config the constraints would let through."""

    op = get_op("matmul")
    grid = list(op.space.grid())
    assert all(c["SPLIT_K"] == 1 for c in grid if c["TMA"] >= 2)
    assert any(c["SPLIT_K"] > 1 for c in grid if c["TMA"] == 0) and any(c["SPLIT_K"] > 1 for c in grid if c["TMA"] == 1)
    assert all(not (c["FLATTEN"] or c["TAIL_SPLIT"]) for c in grid if c["TMA"] != 2)
    assert all(not c["SUBTILE"] for c in grid if c["TMA"] < 2) and any(c["SUBTILE"] for c in grid if c["TMA"] == 3)
    assert all(list(c) == list(op.space.names) for c in grid[:50])
    everywhere = dataclasses.replace(op.space, params=tuple(dataclasses.replace(p, only_with=None)
                                                            for p in op.space.params))
    assert len(list(everywhere.grid())) > 5 * len(grid)
    for shape in ("4096x4096x4096", "32x4096x4096", "1024x1024x1024"):
        problem = op.parse_problem(shape, "bfloat16")
        assert op.space.candidates(problem, H100) == everywhere.candidates(problem, H100)
    with pytest.raises(ConfigError, match="needs an implied value"):
        dataclasses.replace(op.space, params=(*op.space.params, Param("X", (0, 1), only_with=("TMA", (1,)))))
    with pytest.raises(ConfigError, match="vary everywhere"):
        dataclasses.replace(op.space, params=(*op.space.params, Param("X", (0, 1), 0, only_with=("FLATTEN", (1,)))))
