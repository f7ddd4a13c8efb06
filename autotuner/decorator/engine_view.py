"""A decorated kernel as the engine sees it: a TunableOp whose inputs are a launch's arguments (the launching
process's own, or rebuilt by a worker from the recorded call) and whose launch is the kernel run as
`triton.autotune` times it, hooks around it."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from autotuner.decorator.configs import hook_args
from autotuner.decorator.kernel_problem import KernelProblem, pruned_keys, rebuild_args
from autotuner.decorator.spec import Hooks, KernelSpec
from kernels._backend import interpreting
from search_spaces.contract import DOT_TOLERANCE, Option, TunableOp
from search_spaces.problem import ProblemError
from search_spaces.space import config_key

COMPILE_THREADS = 16  # threads compiling a launch's configs ahead of timing (compile_ahead)


class EngineView:
    def __init__(self, spec: KernelSpec, imports: tuple[str, ...] = ()) -> None:
        self.spec, self.imports = spec, imports
        self.op = self._op()

    def call(self, named: dict[str, Any], grid: Any, config: Mapping[str, Any], capture: bool,
             hooks: Hooks | None = None) -> Any:
        """One launch as triton.autotune times it, hooks around the kernel (`hooks`: the kernel's own copy on another
        GPU); with `capture`, a copy of every tensor argument taken before the post-hook."""
        spec = self.spec
        hooks = hooks or spec.hooks
        full = self._config_hooked(named, config, grid)
        hooks.pre_hook(full)
        g = grid(full) if callable(grid) else grid
        try:
            spec.fn.run(grid=g, warmup=False, **named, **config)
        except Exception as exc:
            try:
                hooks.post_hook(full, exception=exc)
            finally:
                raise
        out = {n: v.clone() for n, v in named.items() if isinstance(v, torch.Tensor)} if capture else None
        hooks.post_hook(full, exception=None)
        return out

    def _config_hooked(self, named: dict[str, Any], config: Mapping[str, Any], grid: Any) -> dict[str, Any]:
        """The launch's arguments and the config's as Triton hands them to hooks, after the config's own pre_hook ran on
        them (it may set what the binary depends on)."""
        full = hook_args(named, config, grid)
        original = self.spec.hooked_config(config)
        if original is not None and original.pre_hook:
            original.pre_hook(full)
        return full

    def compile_ahead(self, named: dict[str, Any], grid: Any,
                      configs: list[dict[str, Any]] | None) -> tuple[int, float]:
        """Compile `configs` for this launch at once on threads (Triton's AsyncCompileMode, where it exists), so each
        timed launch finds its binary; a failed compile is left for its measurement to report. (submitted, seconds)."""
        if configs is None or interpreting():
            return 0, 0.0
        try:
            from triton.runtime._async_compile import AsyncCompileMode
        except ImportError:  # an older Triton: each config compiles at its first launch, as before
            return 0, 0.0
        t0, submitted = time.perf_counter(), 0
        workers = max(1, min(len(configs), os.cpu_count() or 1, COMPILE_THREADS))
        with ThreadPoolExecutor(workers, thread_name_prefix="autotuner-compile") as pool, \
                AsyncCompileMode(pool, ignore_errors=True):
            for config in configs:
                try:
                    full = self._config_hooked(named, config, grid)
                    g = grid(full) if callable(grid) else grid
                    self.spec.fn.run(grid=g, warmup=True, **named, **config)
                    submitted += 1
                except Exception:  # noqa: S112 - its measurement compiles it again and says why it fails
                    continue
        return submitted, time.perf_counter() - t0

    def grid_for(self, inputs: Mapping[str, Any], config: Mapping[str, Any]) -> Any:
        grids = inputs["grids"]
        if not isinstance(grids, dict):
            return grids
        g = grids.get(config_key(config))
        if g is None:
            raise ValueError(f"{self.spec.name}: the recorded call has no grid for config {config_key(config)} (the "
                             "space changed since it was recorded)")
        return tuple(g)

    def launch(self, inputs: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        self.call(dict(inputs["args"]), self.grid_for(inputs, config), config, capture=False)

    def checked(self, inputs: Mapping[str, Any], config: Mapping[str, Any]) -> Any:
        return self.call(dict(inputs["args"]), self.grid_for(inputs, config), config, capture=True)

    def reference(self, inputs: Mapping[str, Any]) -> Any:
        reference = self.spec.reference
        assert reference is not None
        copies = {n: v.clone() if isinstance(v, torch.Tensor) else v for n, v in inputs["args"].items()}
        out = reference(**copies)
        if out is None:  # the reference wrote its results into the (copied) arguments, as the kernel does
            return {n: v for n, v in copies.items() if isinstance(v, torch.Tensor)}
        if not isinstance(out, Mapping):
            raise TypeError(f"{self.spec.name}: reference must return a dict of argument name -> expected tensor, or "
                            "None after writing into its arguments")
        return dict(out)

    def inputs(self, problem: KernelProblem, device: str) -> dict[str, Any]:
        """A worker's inputs: the recorded call's arguments rebuilt (then the decorator's `make_inputs`)."""
        if not problem.call:
            raise ValueError(f"{self.spec.name} {problem.key}: no recorded call to rebuild its arguments from (record "
                             "one with AUTOTUNER_RECORD=1 or AUTOTUNER_ON_MISS=default)")
        named = rebuild_args(problem.call, device)
        if self.spec.make_inputs is not None:
            named = dict(self.spec.make_inputs(named))
        return {"args": named, "grids": problem.call["grids"]}

    def _op(self) -> TunableOp[KernelProblem]:
        spec = self.spec
        return TunableOp(
            name=spec.name, kind="kernel", problem_type=KernelProblem, space=spec.space, dtypes=(),
            description=(spec.base_fn.__doc__ or "").strip().split("\n")[0],
            call=f"{spec.base_fn.__name__}[grid](...)",
            options=(Option("call", data=True, help="a recorded launch, for workers"),),
            launch=self.launch, checked=self.checked, make_inputs=self.inputs,
            problem_from_inputs=lambda inputs: spec.keys.problem(inputs["args"]),
            reference=self.reference if spec.reference is not None else None,
            tolerance=DOT_TOLERANCE, sources=(spec.base_fn,), imports=self.imports, refine=self.refine,
            allowed=lambda problem: pruned_keys(problem.call))

    def refine(self, problem: KernelProblem) -> KernelProblem:
        """A key parsed from text as this kernel's launches make them: its key arguments in order, each a finite 64-bit
        number, a string, a bool or None; ProblemError naming what is wrong."""
        names = list(self.spec.keys.keys)
        given = dict(problem.values)
        if len(given) != len(problem.values) or set(given) != set(names):
            wanted = ",".join(f"{n}=..." for n in names) or "an empty key"
            raise ProblemError(f"{self.spec.name} is keyed by {', '.join(names) or 'nothing'}: write {wanted}; "
                               f"got {', '.join(k for k, _ in problem.values) or 'nothing'}")
        fault = problem.value_fault()
        if fault is not None:
            raise ProblemError(fault)
        if [k for k, _ in problem.values] == names:
            return problem
        return dataclasses.replace(problem, values=tuple((n, given[n]) for n in names))
