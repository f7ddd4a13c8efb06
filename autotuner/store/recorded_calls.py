"""A decorated kernel's call for a key nobody launched, made from a call recorded at another value of one key argument
(a sweep's point). More: docs/design/store.md."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from typing import Any

from kernels._shapes import contiguous_strides

Expr = tuple[str, ...]
ORDER = ("div", "div2", "const")  # where several kinds fit, the simplest that follows the key values explains it


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _eval(expr: Expr, values: Mapping[str, int], config: Mapping[str, Any], constant: int) -> int:
    if expr[0] == "const":
        return constant
    out = 1
    for v, p in zip(expr[1::2], expr[2::2], strict=True):
        out *= math.ceil(values[v] / config[p])
    return out


def _grid_exprs(values: Mapping[str, int], params: list[str]) -> list[Expr]:
    pairs = [(v, p) for v in values for p in params]
    return [("const",), *(("div", v, p) for v, p in pairs),
            *(("div2", v1, p1, v2, p2) for (v1, p1), (v2, p2) in itertools.combinations(pairs, 2))]


def derived_call(call: Mapping[str, Any], old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The recorded `call` (made at key values `old`) as it would be at `new`, which differs in one positive
    integer; None where that cannot be told for certain."""
    changed = [k for k in new if old.get(k) != new[k]]
    if set(old) != set(new) or len(changed) != 1:
        return None
    (name,) = changed
    a, b = old[name], new[name]
    if not (_positive_int(a) and _positive_int(b)) or any(v == a for k, v in old.items() if k != name):
        return None
    args: dict[str, Any] = {}
    for arg, spec in call["args"].items():
        if "tensor" in spec and a in spec["tensor"]["shape"]:
            t = spec["tensor"]
            if t["stride"] != list(contiguous_strides(t["shape"])):
                return None
            shape = [b if d == a else d for d in t["shape"]]
            args[arg] = {"tensor": {**t, "shape": shape, "stride": list(contiguous_strides(shape))}}
        elif arg == name:
            args[arg] = {"value": b}
        else:
            args[arg] = spec
    grids = _derived_grids(call["grids"], {k: v for k, v in old.items() if _positive_int(v)},
                           {k: v for k, v in new.items() if _positive_int(v)})
    return None if grids is None else {"args": args, "grids": grids}


def _derived_grids(grids: Mapping[str, list[int]], old: Mapping[str, int],
                   new: Mapping[str, int]) -> dict[str, list[int]] | None:
    configs = {k: json.loads(k) for k in grids}
    params = sorted({p for c in configs.values() for p, v in c.items() if _positive_int(v)})
    params = [p for p in params if all(_positive_int(c.get(p)) for c in configs.values())]
    widths = {len(g) for g in grids.values()}
    if len(widths) != 1:
        return None
    out: dict[str, list[int]] = {k: [] for k in grids}
    for i in range(widths.pop()):
        fits = [e for e in _grid_exprs(old, params)
                if all(_eval(e, old, configs[k], g[i]) == g[i] for k, g in grids.items())
                and (e[0] != "const" or len({g[i] for g in grids.values()}) == 1)]
        simplest = [e for e in fits if e[0] == min((f[0] for f in fits), key=ORDER.index)]
        answers = {tuple(_eval(e, new, configs[k], g[i]) for k, g in grids.items()) for e in simplest}
        if len(answers) != 1:
            return None
        for k, value in zip(grids, answers.pop(), strict=True):
            out[k].append(value)
    return out
