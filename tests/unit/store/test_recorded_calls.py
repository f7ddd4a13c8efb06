"""A decorated kernel's call made from one recorded at another value of one key argument
(autotuner.store.recorded_calls): what follows the new value, and what is refused rather than guessed."""

from __future__ import annotations

import json

from autotuner.store.recorded_calls import derived_call

CONFIGS = [{"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 4} for bm, bn in ((16, 64), (32, 64), (64, 128), (128, 128))]


def _call(m: int, n: int = 1024, k: int = 256, grid=None) -> dict:
    grid = grid or (lambda c: [-(-m // c["BLOCK_M"]) * -(-n // c["BLOCK_N"])])  # the tutorial's 1-D grid
    return {"args": {"a": {"tensor": {"shape": [m, k], "stride": [k, 1], "dtype": "float16"}},
                     "b": {"tensor": {"shape": [k, n], "stride": [n, 1], "dtype": "float16"}},
                     "M": {"value": m}, "N": {"value": n}, "K": {"value": k}},
            "grids": {json.dumps(c, separators=(",", ":")): grid(c) for c in CONFIGS}}


def test_the_tensors_the_key_value_and_the_grid_follow_the_new_value():
    made = derived_call(_call(64), {"M": 64, "N": 1024, "K": 256}, {"M": 300, "N": 1024, "K": 256})
    assert made == _call(300)
    two_d = lambda m: (lambda c: [-(-m // c["BLOCK_M"]), -(-1024 // c["BLOCK_N"])])  # noqa: E731
    assert derived_call(_call(64, grid=two_d(64)), {"M": 64, "N": 1024, "K": 256},
                        {"M": 300, "N": 1024, "K": 256}) == _call(300, grid=two_d(300))
    persistent = _call(64, grid=lambda c: [132])  # as many programs as SMs, whatever M
    assert derived_call(persistent, {"M": 64, "N": 1024, "K": 256},
                        {"M": 300, "N": 1024, "K": 256})["grids"] == persistent["grids"]


def test_what_cannot_be_told_for_certain_is_refused():
    keys = {"M": 64, "N": 1024, "K": 256}
    assert derived_call(_call(64), keys, {"M": 300, "N": 512, "K": 256}) is None  # two values changed
    assert derived_call(_call(256), {"M": 256, "N": 1024, "K": 256}, {"M": 300, "N": 1024, "K": 256}) is None  # M = K
    strided = _call(64)
    strided["args"]["a"]["tensor"]["stride"] = [1, 64]  # a transposed view: its layout at another M is unknown
    assert derived_call(strided, keys, {"M": 300, "N": 1024, "K": 256}) is None
    tiny = _call(16, grid=lambda c: [-(-16 // c["BLOCK_M"]), -(-1024 // c["BLOCK_N"])])  # 1 along M for all
    # ceil(M / BLOCK_M) and ceil(M / BLOCK_N) both give 1 at M = 16, and differ at 300
    assert derived_call(tiny, {"M": 16, "N": 1024, "K": 256}, {"M": 300, "N": 1024, "K": 256}) is None
    odd = _call(64, grid=lambda c: [7 * c["BLOCK_M"] + 1])  # no expression it knows fits
    assert derived_call(odd, keys, {"M": 300, "N": 1024, "K": 256}) is None


def test_a_calls_pruned_configs_hold_at_its_own_key_values_only():
    """A call recorded with the configs its kernel's pruning left (what a worker measures) keeps that list; one made
    for another value drops it (the pruning there is unknown); a list that is not config keys counts as none (a
    database row can narrow a worker's search, never add to it)."""
    from autotuner.decorator.kernel_problem import pruned_keys

    left = [json.dumps(c, separators=(",", ":")) for c in CONFIGS[1:]]
    call = {**_call(64), "pruned": left}
    assert pruned_keys(call) == left
    made = derived_call(call, {"M": 64, "N": 1024, "K": 256}, {"M": 300, "N": 1024, "K": 256})
    assert made is not None and "pruned" not in made and pruned_keys(made) is None
    assert pruned_keys({**_call(64), "pruned": "all"}) is None
    assert pruned_keys({**_call(64), "pruned": [1, 2]}) is None
    assert pruned_keys(None) is None


def test_a_recorded_call_rebuilt_on_meta_has_the_layout_of_the_real_one():
    """A compile-pool process rebuilds a decorated kernel's arguments on meta tensors (no memory, no values) and
    compiles the binary the trial worker's real ones ask for: same shapes, strides, dtypes and values."""
    import torch

    from autotuner.decorator.kernel_problem import rebuild_args

    call = _call(300)
    call["args"]["idx"] = {"tensor": {"shape": [4, 8], "stride": [1, 4], "dtype": "int32"}}  # a transposed view
    meta, real = rebuild_args(call, "meta"), rebuild_args(call, "cpu")
    assert meta.keys() == real.keys()
    for name, value in real.items():
        if isinstance(value, torch.Tensor):
            assert meta[name].device.type == "meta"
            assert (meta[name].shape, meta[name].stride(), meta[name].dtype) == (value.shape, value.stride(),
                                                                                value.dtype)
        else:
            assert meta[name] == value
