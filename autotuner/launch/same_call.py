"""Whether a call's arguments are like those of a call made before: its tensors of the same dtypes, devices, shapes,
strides and 16-byte alignment, its other arguments of the same types and values. A library call and a decorated
kernel keep such a check with each kept launch, and one kept launch is tried before the call's key is built:
a loop launching one kernel on like inputs pays one check in C++ (torch's `TensorGuards`, what torch.compile's guards
run) and a comparison, not the key's tuples and their hash. The check is stricter than the key (requires_grad and
dispatch keys too): a call it turns away takes the key's path as before, never a wrong launch. What is tried is the
hit that followed the last one (`follow`): a call repeated follows itself, and a cycle of calls (a model's layers
launching one kernel at several shapes, in the same order each step) follows its own order. A hit is tried after
itself once it followed itself, and after another hit once it followed that one twice in a row, so calls that
alternate in no fixed order seldom pay a check that fails. The pickers of arguments by position (`picker`,
`aligner`) serve the check and a library call's key alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any, Protocol

import torch

PLAIN = frozenset({int, float, bool, str, type(None)})  # what a check compares by value (and a key keeps)
_NO_KWARGS: Mapping[str, Any] = {}


class Check(Protocol):
    def __call__(self, a: tuple[Any, ...], kw: Mapping[str, Any] = ..., /) -> bool: ...


def never(a: tuple[Any, ...], kw: Mapping[str, Any] = _NO_KWARGS, /) -> bool:
    """The check of arguments that cannot be checked so, and of a hit no longer tried first."""
    return False


def _guards(tensors: list[torch.Tensor]) -> Any:
    """torch's check of these tensors' dtype, device, shape, strides and dispatch keys; None where this torch has
    none or refuses them."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        sizes: Any = [list(t.size()) for t in tensors]
        strides: Any = [list(t.stride()) for t in tensors]
        return TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)
    except Exception:  # a torch without it, or a tensor it does not take: the key's path alone
        return None


def picker(positions: tuple[int, ...]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """The arguments at `positions`, as a tuple (itemgetter gives a bare value for one position)."""
    if len(positions) == 1:
        (i,) = positions
        return lambda a: (a[i],)
    return itemgetter(*positions)


def aligner(positions: tuple[int, ...]) -> Callable[[tuple[Any, ...]], tuple[int, ...]]:
    """Each tensor's data pointer modulo 16 (0 for None), written out for up to three tensors: this runs on every
    call."""
    if len(positions) == 1:
        (i,) = positions
        return lambda a: (a[i].data_ptr() % 16 if a[i] is not None else 0,)
    if len(positions) == 2:
        i, j = positions
        return lambda a: (a[i].data_ptr() % 16 if a[i] is not None else 0,
                          a[j].data_ptr() % 16 if a[j] is not None else 0)
    if len(positions) == 3:
        i, j, k = positions
        return lambda a: (a[i].data_ptr() % 16 if a[i] is not None else 0,
                          a[j].data_ptr() % 16 if a[j] is not None else 0,
                          a[k].data_ptr() % 16 if a[k] is not None else 0)
    return lambda a: tuple(a[i].data_ptr() % 16 if a[i] is not None else 0 for i in positions)


def check(args: tuple[Any, ...], kwargs: Mapping[str, Any] | None = None) -> Check:
    """A check that a later call's (args, kwargs) are like these; `never` where these cannot be checked so (no
    tensor, an argument neither a tensor nor a plain value, or no TensorGuards here). Keyword arguments count as
    positions after the positional ones, their names in order."""
    keys = tuple(kwargs or ())
    flat = (*args, *kwargs.values()) if kwargs else args
    tensor_at = tuple(i for i, v in enumerate(flat) if isinstance(v, torch.Tensor))
    if not tensor_at:
        return never
    other_at = tuple(i for i in range(len(flat)) if i not in tensor_at)
    values = tuple(flat[i] for i in other_at)
    types = tuple(map(type, values))
    if not PLAIN.issuperset(types):
        return never
    tensors = picker(tensor_at)
    guards = _guards(list(tensors(flat)))
    if guards is None:
        return never
    aligned = aligner(tensor_at)
    align = aligned(flat)
    n = len(args)
    checked = guards.check
    if not other_at and not keys and len(tensor_at) == 1:  # one tensor alone (softmax, gelu's x)
        (i,), (mod16,) = tensor_at, align

        def one(a: tuple[Any, ...], kw: Mapping[str, Any] = _NO_KWARGS, /) -> bool:
            return len(a) == n and not kw and checked(a[i]) and a[i].data_ptr() % 16 == mod16

        return one
    others = picker(other_at) if other_at else None

    def same(a: tuple[Any, ...], kw: Mapping[str, Any] = _NO_KWARGS, /) -> bool:
        if len(a) != n:
            return False
        if kw or keys:  # the names in order: a value moved to another name is another call
            if tuple(kw) != keys:
                return False
            a = (*a, *kw.values())
        if others is not None:
            o = others(a)
            if tuple(map(type, o)) != types or o != values:  # (types first: 1, 1.0 and True compare equal)
                return False
        return checked(*tensors(a)) and aligned(a) == align

    return same


class Followed:
    """A kept launch as `follow` reads it (the base of a library call's and a decorated kernel's): its check, the
    hit found after it last, and whether that one followed it the time before as well."""

    __slots__ = ("same", "after", "sure")

    def __init__(self, same: Check) -> None:
        self.same = same
        self.after: Followed | None = None
        self.sure = False


def follow(state: list[Any], hit: Followed | None, tried: Followed | None) -> None:
    """After a call that looked its key up and found `hit` (a `Followed`; None: none kept yet), having tried
    `tried`'s check first (None: none): `state` is [the hit the next call tries first, the hit this call found]. The
    hit found by the call before learns that `hit` followed it, and the next call tries `hit`'s successor (`passed`).
    A hit is never tried again once its check turned away a call of its own key (a requires_grad tensor, a scalar
    argument that changes with each call)."""
    if hit is None:
        state[1] = None
        return
    before = state[1]
    if before is not None:
        if before.after is hit:
            before.sure = True
        else:
            before.after, before.sure = hit, False
    if tried is not None and tried is hit:
        tried.same = never  # (a check, not None: another thread may be about to call the one it read)
    passed(state, hit)


def passed(state: list[Any], hit: Followed) -> None:
    """After a call that found `hit` (by its check, or `follow`'s lookup): the next call tries the hit that followed
    it, where that is `hit` itself, or another that followed it twice in a row, and is still checked. (For a hit
    the call before found too, `state` is as this leaves it: a caller skips it then.)"""
    after = hit.after
    state[0] = after if after is not None and (after is hit or hit.sure) and after.same is not never else None
    state[1] = hit
