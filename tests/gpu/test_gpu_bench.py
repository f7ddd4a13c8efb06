"""GPU tier: `autotuner bench`'s reference rows on a CUDA device: the copy of as many bytes as a memory-bound
problem moves, and SDPA's flash backend beside the default for attention."""

from __future__ import annotations

import pytest
import torch

from autotuner.analysis.bench import COPY, DEFAULT, bench
from autotuner.base.device import current_device
from autotuner.base.registry import get_op

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: no CUDA device here"),
]


def test_a_memory_bound_problem_is_timed_against_a_copy_of_its_bytes():
    device = current_device()
    op = get_op("softmax")
    problem = op.parse_problem("4096x4096", "float16")
    result = bench(op, problem, device, store=None, use_compile=False, rounds=2)
    copy, default = result.row(COPY), result.row(DEFAULT)
    assert copy is not None and copy.ms and default is not None and default.ms
    # 64 MiB moved: the copy's rate is a real transfer's (between 0.5 and 5 TB/s on any current GPU), and no
    # softmax reads and writes the same bytes much faster than the copy does
    assert 500 < copy.gbs < 5000, copy
    assert default.ms > 0.7 * copy.ms, (default, copy)


def test_matmul_is_not_set_against_a_copy():
    op = get_op("matmul")
    result = bench(op, op.parse_problem("1024x1024x1024", "float16"), current_device(), store=None,
                   use_compile=False, rounds=1)
    assert result.row(COPY) is None


def test_attention_is_timed_against_sdpa_default_and_its_flash_backend():
    op = get_op("attention")
    problem = op.parse_problem("2x8x1024x64", "float16", causal=True)
    result = bench(op, problem, current_device(), store=None, use_compile=False, rounds=2)
    flash = result.row("sdpa flash backend")
    assert flash is not None and flash.ms and flash.error is not None and not flash.note, flash
    assert result.row("torch eager").ms
