"""Kernels as kernel libraries write them, with Triton's own autotuner and no mention of autotuner: what
`autotuner.install()` must cover (or leave to Triton, saying why). Run as a script (`python -m autotuner run --
tests/support/triton_autotuned.py N`), it launches each kernel at n=N, checks every output and prints them as JSON."""

from __future__ import annotations

import json
import sys

import torch
import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner

from tests.support.interpreter_timing import drop_64, wall_bench

CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2),
           triton.Config({"BLOCK": 128}, num_warps=4)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def scale(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


@triton.autotune(configs=CONFIGS, key=["n"], reset_to_zero=["out_ptr"],
                 prune_configs_by={"early_config_prune": drop_64})
@triton.jit
def accumulate(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Sum x into out[0] with an atomic add per block: out must start at zero."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


@triton.heuristics({"EVEN": lambda args: args["n"] % 128 == 0})  # above the autotuner: BLOCK is not chosen yet
@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def shift_above(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1.0)
    else:
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def shift_below(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) - 1.0)
    else:
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) - 1.0, mask=mask)


@triton.jit
def _negate(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, -tl.load(x_ptr + offs, mask=mask), mask=mask)


negate = Autotuner(_negate, _negate.arg_names, CONFIGS, ["n"], None, None)  # built directly, as some libraries do


HOOK_CALLS = []


def counting_hook(nargs):
    """A user's pre_hook as Triton's docs write one: one argument."""
    HOOK_CALLS.append(nargs["n"])


@triton.autotune(configs=CONFIGS, key=["n"], pre_hook=counting_hook)
@triton.jit
def hooked(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 4.0, mask=mask)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def wide_only(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """Its list's first config cannot compile (BLOCK 32 fails the assert): tuning must skip it, as Triton does."""
    tl.static_assert(BLOCK >= 64)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 2.0, mask=mask)


class OwnPrune(Autotuner):
    """A library's subclass that prunes by itself: covered, and its pruning is what is tuned."""

    def prune_configs(self, kwargs, *rest):
        return [c for c in self.configs if c.kwargs["BLOCK"] != 32]


@triton.jit
def _square(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * x, mask=mask)


square = OwnPrune(_square, _square.arg_names, CONFIGS, ["n"], None, None)


class FirstConfig(Autotuner):
    """A library's subclass whose `run` replaces Triton's (it launches its first config, never tuning)."""

    def run(self, *args, **kwargs):
        self.best_config = self.configs[0]
        return self.fn.run(*args, **kwargs, **self.configs[0].all_kwargs())


@triton.jit
def _halve(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 0.5, mask=mask)


halve = FirstConfig(_halve, _halve.arg_names, CONFIGS, ["n"], None, None)


class OwnChoice(Autotuner):
    """A library's subclass whose `run` replaces Triton's with its own choice (the fastest by its own key, kept in
    its own dict), timing each config through Triton's `_bench`, as flag_gems' LibTuner does."""

    chosen: dict

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        key = ("n", self.nargs["n"])
        if key not in self.__dict__.setdefault("chosen", {}):
            timings = {c: self._bench(*args, config=c, **kwargs) for c in self.configs}
            self.chosen[key] = min(timings, key=lambda c: timings[c][0])
        config = self.best_config = self.chosen[key]
        self.nargs = None
        return self.fn.run(*args, **kwargs, **config.all_kwargs())


@triton.jit
def _cube(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * x * x, mask=mask)


cube = OwnChoice(_cube, _cube.arg_names, CONFIGS, ["n"], None, None, do_bench=wall_bench)


class OwnBench(Autotuner):
    """A library's subclass that times configs its own way: left to Triton, so its timing keeps working."""

    def _bench(self, *args, config, **meta):
        return [float(config.kwargs["BLOCK"])] * 3  # "the smallest block is fastest"


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


double = OwnBench(_double, _double.arg_names, CONFIGS, ["n"], None, None)


def grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def launch_all(n: int) -> dict[str, list[float]]:
    """Launch every kernel at n, check each output against torch, and return the outputs."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    out = {}
    for name, kernel, expected in (("scale", scale, 3 * x), ("shift_above", shift_above, x + 1),
                                   ("shift_below", shift_below, x - 1), ("negate", negate, -x),
                                   ("square", square, x * x), ("halve", halve, x / 2), ("double", double, 2 * x),
                                   ("cube", cube, x * x * x)):
        y = torch.empty(n)
        if name == "scale":
            kernel[grid(n)](x, y, n, 3.0)
        else:
            kernel[grid(n)](x, y, n)
        torch.testing.assert_close(y, expected, msg=name)
        out[name] = y.tolist()
    total = torch.zeros(1)
    accumulate[grid(n)](x, total, n)
    torch.testing.assert_close(total, x.sum().reshape(1), rtol=1e-5, atol=1e-4)
    out["accumulate"] = total.tolist()
    return out


if __name__ == "__main__":
    print(json.dumps(launch_all(int(sys.argv[1]))))
