"""What a decorated kernel is, once its decorator's arguments are checked: the kernel, its configs or space, its
hooks and pruning as `triton.autotune` defines them, and how its configs are timed and checked. The miss policy,
the in-process tuning and the engine's view all work from a `KernelSpec`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import triton

from autotuner.decorator.configs import (
    LAUNCH_OPTIONS,
    AutotunerError,
    base_fn,
    check_names,
    compile_options,
    config_dict,
    constexprs,
    module_name,
)
from autotuner.decorator.kernel_problem import KernelProblem
from autotuner.decorator.keys import Bucket, Keys, Miss, bucket_functions
from search_spaces.space import Space, config_key

ON_MISS = ("tune", "nearest", "default", "error")


@dataclass(kw_only=True)
class Hooks:
    """triton.autotune's hooks around each timed launch: `pre_hook` (default: zero `reset_to_zero`, copy
    `restore_value`) and `post_hook` (default: put the copies back)."""

    reset_to_zero: list[str]
    restore_value: list[str]
    user_pre_hook: Callable[..., Any] | None = None
    user_post_hook: Callable[..., Any] | None = None
    hooks_take_reset_only: bool = False  # the hooks are a Triton Autotuner's own, which take `reset_only`
    restore_copies: dict[str, Any] = field(default_factory=dict)

    def pre_hook(self, nargs: dict[str, Any], reset_only: bool = False) -> None:
        if self.user_pre_hook is not None:
            if self.hooks_take_reset_only and reset_only:  # as Triton's run calls them: reset_only only when set
                self.user_pre_hook(nargs, reset_only=True)
            else:
                self.user_pre_hook(nargs)
            return
        for name in self.reset_to_zero:
            if nargs.get(name) is not None:
                nargs[name].zero_()
        if not reset_only:
            self.restore_copies = {n: nargs[n].clone() for n in self.restore_value if nargs.get(n) is not None}

    def post_hook(self, nargs: dict[str, Any], exception: BaseException | None) -> None:
        if self.user_post_hook is not None:
            self.user_post_hook(nargs, exception=exception)
            return
        for name, value in self.restore_copies.items():
            nargs[name].copy_(value)
        self.restore_copies = {}


@dataclass(kw_only=True)
class KernelSpec:
    fn: Any  # the JITFunction (or what wraps it: triton.heuristics, the interpreter's)
    base_fn: Any  # the Python function under it
    name: str  # in the database: module:qualname, or the decorator's `name=`
    keys: Keys
    configs: list[triton.Config]  # the list given (empty with a space)
    triton_configs: dict[str, triton.Config]  # by config key, for their own pre_hooks
    space: Space[KernelProblem]
    hooks: Hooks
    prune_configs_by: dict[str, Any]
    warmup_ms: float | None
    rep_ms: float | None
    do_bench: Callable[..., Any] | None
    reference: Callable[..., Any] | None  # (**arguments) -> expected tensors by name, or None after writing them
    make_inputs: Callable[..., Any] | None  # makes a worker's rebuilt arguments valid
    on_miss: str | None
    trials: int | None

    def prune(self, nargs: dict[str, Any], kwargs: dict[str, Any]) -> list[triton.Config]:
        """triton.autotune's pruning, called as Triton's Autotuner calls it: `early_config_prune(configs, nargs,
        **kwargs)`, then `perf_model(**nargs, **kwargs, **config.all_kwargs())` for the `top_k`; `nargs` the
        positional arguments by name, `kwargs` the launch's keyword arguments after `grid` and `warmup`."""
        pruned = list(self.configs)
        early = self.prune_configs_by.get("early_config_prune")
        perf_model = self.prune_configs_by.get("perf_model")
        if early:
            pruned = early(pruned, nargs, **kwargs)
            if not pruned:
                raise AutotunerError("No valid autotuner configs after pruning. `early_config_prune` should return "
                                     "at least one config.")  # (Triton's words: its users match them)
        if perf_model:
            top_k = self.prune_configs_by.get("top_k", 1.0)
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(pruned) * top_k))
            elif not isinstance(top_k, int):
                raise TypeError("top_k must be either 1) a float <= 1.0 or 2) an int")
            if len(pruned) > top_k:
                est = {c: perf_model(**nargs, **kwargs, **c.all_kwargs()) for c in pruned}
                pruned = sorted(est, key=est.__getitem__)[:top_k]
        return pruned

    def pruned(self, miss: Miss) -> list[dict[str, Any]] | None:
        """The list's configs left after pruning for this launch, as dicts; None for a space (searched by the
        engine). The pruning runs once per miss, as Triton's runs once per key."""
        if not self.configs:
            return None
        if miss.pruned is None:
            object.__setattr__(miss, "pruned", [config_dict(c) for c in self.prune(miss.nargs, miss.prune_kwargs)])
        return list(miss.pruned or ())

    def default(self, miss: Miss) -> dict[str, Any]:
        """The config a key launches with before it is tuned: the pruned list's first, or the space's default."""
        pruned = self.pruned(miss)
        return pruned[0] if pruned is not None else self.space.default(miss.problem, miss.device)

    def allows(self, miss: Miss, config: Mapping[str, Any]) -> bool:
        """Whether a stored config is one this launch may use: valid in the space (a listed config, under its
        constraints) and left by the pruning."""
        if self.space.violations(config, miss.problem, miss.device):
            return False
        pruned = self.pruned(miss)
        return pruned is None or config_key(config) in {config_key(c) for c in pruned}

    def hooked_config(self, config: Mapping[str, Any]) -> triton.Config | None:
        """The list's own triton.Config for a config (it may carry a pre_hook of its own)."""
        return self.triton_configs.get(config_key(config))


def make_spec(fn: Any, configs: list[triton.Config] | None, key: list[str], *, space: Space[Any] | None,
          name: str | None, prune_configs_by: dict[str, Any] | None, hooks: Hooks,
          buckets: Mapping[str, Bucket] | None, **rest: Any) -> KernelSpec:
    """The decorator's arguments, checked: every name they give must be the kernel's."""
    base = base_fn(fn)
    arg_names = list(fn.arg_names)
    name = name or f"{module_name(base)}:{base.__qualname__}"
    for what, names in (("key names", key), ("reset_to_zero names", hooks.reset_to_zero),
                        ("restore_value names", hooks.restore_value)):
        check_names(name, what, names, arg_names, "an argument")
    if configs and space is not None:
        raise ValueError(f"{name}: give configs or space, not both")
    if space is not None and prune_configs_by:
        raise ValueError(f"{name}: prune_configs_by works on a config list; a space states its own constraints")
    if rest["on_miss"] is not None and rest["on_miss"] not in ON_MISS:
        raise ValueError(f"{name}: on_miss={rest['on_miss']!r}; accepted: {', '.join(ON_MISS)}")
    params = constexprs(fn, base)
    listed = list(configs) if configs else ([] if space is not None else [triton.Config({}, num_warps=4,
                                                                                          num_stages=3, num_ctas=1)])
    for i, c in enumerate(listed):
        check_names(name, f"config {i} sets", c.kwargs, [*params, *compile_options()],
                    "a tl.constexpr parameter or compile option")
    if space is not None:
        check_names(name, "the space's parameters", space.names, [*params, *LAUNCH_OPTIONS],
                    "a tl.constexpr parameter or launch option")
    return KernelSpec(
        fn=fn, base_fn=base, name=name, keys=Keys(list(key), arg_names, bucket_functions(name, buckets, list(key))),
        configs=listed,
        triton_configs={config_key(config_dict(c)): c for c in listed},
        space=space if space is not None else Space.from_configs([config_dict(c) for c in listed]), hooks=hooks,
        prune_configs_by=dict(prune_configs_by or {}), **rest)
