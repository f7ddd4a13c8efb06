"""CPU cost per call of each library call and of a decorated kernel, at shapes where launching dominates.

For each op (tuned first, briefly, into a scratch database), per call, in microseconds: the CPU time of rounds
of back-to-back calls queued behind a sleeping kernel (so the GPU never holds the CPU up), median of rounds
(each round takes every row of a problem in turn, its order rotated):

    library          autotuner.<op>(...) on a cache hit: a dict lookup, then the prepared launcher (direct launch,
                     through torch's static launcher where this torch has it)
    library/launcher the same through Triton's generated launcher instead of torch's static one
    library/triton   the same with direct launch off: the prepared launcher through `kernel[grid]`
    static launcher  the floor: the output allocated and the same binary launched by torch's static launcher with
                     its arguments packed ahead, tensors as their addresses
    kept launch      the launch a hit runs after its lookup, called directly (output, arguments, launcher.go)
    launcher.go      the prepared launcher's direct call alone, with one call's arguments
    plain launch     the output allocated and `kernel[grid](...)` with the tuned config written in: the reference
    checked          the kernel module's launcher with an explicit config (every check on every call)
    torch            torch's own op
and for softmax and the tutorial matmul, decorated copies of the same kernel: `@triton.autotune` and
`@autotuner.autotune`, each on its cache hit (the matmul also with every argument by keyword, and at three shapes
in turn), beside torch's op (torch.softmax, a @ b) and the caller's own part (the same call to a kernel that
launches nothing).

    python benchmarks/launch_overhead.py [--calls 400] [--rounds 7] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import autotuner  # noqa: E402  (before triton: it picks Triton's interpreter where there is no GPU)

# isort: split
import triton  # noqa: E402

from autotuner.base.device import current_device  # noqa: E402
from autotuner.base.registry import get_op  # noqa: E402
from autotuner.base.settings import Settings  # noqa: E402
from autotuner.engine.measure.timing import cpu_per_call_us, interleaved  # noqa: E402
from autotuner.engine.tuner import Plan, tune  # noqa: E402
from autotuner.launch.lookup import Resolver, set_resolver  # noqa: E402
from autotuner.store.database import Store  # noqa: E402
from kernels import _direct  # noqa: E402
from kernels import gelu as k_gelu  # noqa: E402
from kernels import layernorm as k_layernorm  # noqa: E402
from kernels import matmul as k_matmul  # noqa: E402
from kernels import softmax as k_softmax  # noqa: E402
from kernels._rows import hold_consts, row_layout  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def switched_off(flag: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` with kernels._direct's `flag` (DIRECT: direct launches; STATIC: torch's static launcher) off."""
    def call() -> Any:
        setattr(_direct, flag, False)
        try:
            return fn()
        finally:
            setattr(_direct, flag, True)
    return call


def direct_off(fn: Callable[[], Any]) -> Callable[[], Any]:
    return switched_off("DIRECT", fn)


def first_launch(call: Callable[[], Any]) -> tuple[Any, tuple[Any, ...], Any] | None:
    """The first call of a library call, recorded: its launcher, the arguments it launched with and the output;
    None where the call makes more than one launch."""
    seen: list[tuple[Any, tuple[Any, ...]]] = []
    original = _direct.Launcher.launch

    def record(self: Any, grid: tuple[int, ...], args: tuple[Any, ...]) -> Any:
        seen.append((self, args))
        return original(self, grid, args)

    _direct.Launcher.launch = record  # type: ignore[method-assign]
    try:
        out = call()
    finally:
        _direct.Launcher.launch = original  # type: ignore[method-assign]
    return (*seen[0], out) if len(seen) == 1 else None


def static_floor(launcher: Any, args: tuple[Any, ...], out: Any) -> Callable[[], Any] | None:
    """The static-launcher floor for a library call's launch: its launcher's binary, launched by torch's static
    launcher with the arguments of one call packed ahead (tensors as addresses), after allocating an output like the
    call's."""
    if launcher._static is None:  # no static launcher here
        return None
    launch, function, warps, shared, types, kept, slots, pointers = launcher._static
    packed = _direct.static_packed(kept, slots, pointers, args)  # tensors as addresses, as a kept launch hands them
    grid = (*launcher.grid, 1, 1)[:3]
    device = launcher._device

    def floor() -> Any:
        torch.empty_like(out)
        launch(function, grid[0], grid[1], grid[2], warps, shared, types, packed,
               torch._C._cuda_getCurrentRawStream(device))
    return floor


def kept_launch(name: str, launch_args: tuple[Any, ...]) -> Callable[[], Any]:
    """The library call's kept launch (what a hit runs after its lookup), called directly with the call's
    arguments."""
    from autotuner.launch import library

    (hit,) = library._HITS[name].values()
    return lambda: hit.launch(*launch_args)


def cases(store: Store, settings: Settings) -> list[tuple[str, dict[str, Callable[[], Any]]]]:
    """(problem, {row: call}) for each op at a launch-bound shape, after tuning it briefly."""
    device = current_device()
    dt = torch.float16 if DEV == "cuda" else torch.float32

    def tuned(op_name: str, shape: str, **opts: Any) -> dict[str, Any]:
        op = get_op(op_name)
        problem = op.parse_problem(shape, str(dt).removeprefix("torch."), **opts)
        tune(op, problem, store=store, settings=settings, plan=Plan(trials=8), device=device)
        best = store.best(op=op, problem=problem, device=device)
        assert best is not None
        return best.config

    out = []
    x = torch.randn(64, 1024, device=DEV, dtype=dt)
    cfg_sm = tuned("softmax", "64x1024")
    plain = k_softmax.prepare(x, cfg_sm)
    out.append(("softmax 64x1024", {"library": lambda: autotuner.softmax(x), "plain launch": direct_off(lambda: plain(x)),
                                    "checked": lambda: k_softmax.softmax(x, cfg_sm), "torch": lambda: torch.softmax(x, -1)}))
    w, b = torch.randn(1024, device=DEV, dtype=dt), torch.randn(1024, device=DEV, dtype=dt)
    cfg_ln = tuned("layernorm", "64x1024")
    plain_ln = k_layernorm.prepare(x, w, b, 1e-5, cfg_ln)
    out.append(("layernorm 64x1024", {
        "library": lambda: autotuner.layer_norm(x, w, b, 1e-5), "plain launch": direct_off(lambda: plain_ln(x, w, b)),
        "checked": lambda: k_layernorm.layer_norm(x, w, b, 1e-5, cfg_ln),
        "torch": lambda: torch.nn.functional.layer_norm(x, (1024,), w, b, 1e-5)}))
    g = torch.randn(65536, device=DEV, dtype=dt)
    cfg_g = tuned("gelu", "65536", approximate="tanh")
    plain_g = k_gelu.prepare(g, cfg_g, "tanh")
    out.append(("gelu 65536", {"library": lambda: autotuner.gelu(g), "plain launch": direct_off(lambda: plain_g(g)),
                               "checked": lambda: k_gelu.gelu(g, cfg_g), "torch": lambda: torch.nn.functional.gelu(g, approximate="tanh")}))
    a, bm = torch.randn(64, 64, device=DEV, dtype=dt), torch.randn(64, 64, device=DEV, dtype=dt)
    cfg_mm = tuned("matmul", "64x64x64")
    plain_m = k_matmul.prepare(a, bm, cfg_mm)
    out.append(("matmul 64x64x64", {"library": lambda: autotuner.matmul(a, bm), "plain launch": direct_off(lambda: plain_m(a, bm, None)),
                                    "checked": lambda: k_matmul.matmul(a, bm, cfg_mm), "torch": lambda: a @ bm}))
    if DEV == "cuda":
        from kernels import attention as k_attention

        q = torch.randn(1, 2, 128, 64, device=DEV, dtype=dt)
        cfg_at = tuned("attention", "1x2x128x64")
        plain_a = k_attention.prepare(q, q, q, cfg_at)
        out.append(("attention 1x2x128x64", {
            "library": lambda: autotuner.attention(q, q, q), "plain launch": direct_off(lambda: plain_a(q, q, q)),
            "checked": lambda: k_attention.attention(q, q, q, cfg_at),
            "torch": lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q)}))
    calls = {"softmax": ((x,), "softmax"), "layernorm": ((x, w, b), "layer_norm"), "gelu": ((g,), "gelu"),
             "matmul": ((a, bm, None), "matmul"), "attention": ((q, q, q), "attention") if DEV == "cuda" else None}
    for problem, rows in out:
        rows["library/triton"] = direct_off(rows["library"])
        rows["library/launcher"] = switched_off("STATIC", rows["library"])
        recorded = first_launch(rows["library"])
        (tensors, name) = calls[problem.split()[0]]  # type: ignore[misc]
        rows["kept launch"] = kept_launch(name, tensors)
        if recorded is not None:
            rows["launcher.go"] = functools.partial(recorded[0].go, recorded[1])
        floor = static_floor(*recorded) if recorded is not None and DEV == "cuda" else None
        if floor is not None:
            rows["static launcher"] = floor
        else:
            print(f"{problem}: no static launcher row (the call makes more than one launch, or launches through "
                  "Triton's launcher here)", file=sys.stderr)
    return out


def hit_parts(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
              grid: Callable[[dict[str, Any]], tuple[int, ...]]) -> dict[str, Callable[[], Any]]:
    """Parts of a decorated kernel's hit, each alone with one call's arguments: its call signature (what keys the
    hit), the check a hit found twice in a row is tried with instead (autotuner.launch.same_call), and its kept
    launcher's launch at the grid its config gives (found at first use: the rows run after the kernel's first
    call)."""
    found: list[Any] = []

    def hit() -> Any:
        if not found:
            kept = kernel._hits[kernel._call_signature(args, kwargs)]
            found.extend([kept, grid(kernel._grid_args(args, kwargs, kept.meta))])
        return found

    def launch() -> Any:
        kept, at = hit()
        return kept.launcher.launch(at, args)

    return {"call signature": lambda: kernel._call_signature(args, kwargs),
            "tried check": lambda: hit()[0].same(args, kwargs), "launcher.launch": launch}


class _NoKernel:
    """`kernel[grid](...)` that launches nothing: a call made as the decorated rows make theirs (the output allocated,
    the grid function and keyword arguments built) and nothing more, the caller's own part of a hit."""

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return self.run

    def run(self, *args: Any, **kwargs: Any) -> None:
        return None


def decorated() -> list[tuple[str, dict[str, Callable[[], Any]]]]:
    """The same kernels under @triton.autotune and @autotuner.autotune, each on its cache hit."""
    from examples.tutorial_matmul import get_autotune_config
    from examples.tutorial_matmul import matmul_kernel as ours_mm

    dt = torch.float16 if DEV == "cuda" else torch.float32
    x = torch.randn(64, 1024, device=DEV, dtype=dt)
    # the kernel's other constants for 64 rows of 1024 columns held whole, as kernels.softmax.prepare sets them
    # (ROWS 1 or 2 alike: both divide the 64 rows)
    n_body, row_consts = row_layout(1024, 1024, 1024, 64, 1)
    fixed = {"SINGLE_PASS": True, "PERSISTENT": False, "STAGES": 1, **row_consts,
             **hold_consts(0)}
    meta = {"BLOCK_N": 1024, "ROWS": 1, **fixed}
    configs = [triton.Config({"BLOCK_N": 1024, "ROWS": r}, num_warps=4, num_stages=1) for r in (1, 2)]
    theirs = triton.autotune(configs=configs, key=["n_cols"])(k_softmax.softmax_kernel)
    ours = autotuner.autotune(configs=configs, key=["n_cols"], name="bench:softmax_kernel")(k_softmax.softmax_kernel)
    grid = (64,)
    rows: list[tuple[str, dict[str, Callable[[], Any]]]] = [("softmax_kernel 64x1024 (decorated)", {
        "plain launch": lambda: k_softmax.softmax_kernel[grid](x, torch.empty_like(x), 64, 1024, n_body, 1024, 1024,
                                                               **meta, num_warps=4, num_stages=1),
        "triton.autotune hit": lambda: theirs[lambda m: (triton.cdiv(64, m["ROWS"]),)](
            x, torch.empty_like(x), 64, 1024, n_body, 1024, 1024, **fixed),
        "autotuner.autotune hit": lambda: ours[lambda m: (triton.cdiv(64, m["ROWS"]),)](
            x, torch.empty_like(x), 64, 1024, n_body, 1024, 1024, **fixed),
        "torch": lambda: torch.softmax(x, -1),
        "caller's own": lambda: _NoKernel()[lambda m: (triton.cdiv(64, m["ROWS"]),)](
            x, torch.empty_like(x), 64, 1024, n_body, 1024, 1024, **fixed),
        **hit_parts(ours, (x, torch.empty_like(x), 64, 1024, n_body, 1024, 1024), fixed,
                    lambda m: (triton.cdiv(64, m["ROWS"]),)),
    })]
    a = torch.randn(64, 64, device=DEV, dtype=dt)
    b = torch.randn(64, 64, device=DEV, dtype=dt)
    tri_mm = triton.autotune(configs=get_autotune_config(), key=["M", "N", "K"])(ours_mm.fn)
    first = get_autotune_config()[0]

    def mm_args() -> tuple[Any, ...]:
        c = torch.empty(64, 64, device=DEV, dtype=dt)
        return (a, b, c, 64, 64, 64, 64, 1, 64, 1, 64, 1)

    def mm_grid(m: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(64, m["BLOCK_SIZE_M"]) * triton.cdiv(64, m["BLOCK_SIZE_N"]),)

    rows.append(("tutorial matmul 64^3 (decorated)", {
        "plain launch": lambda: ours_mm.fn[mm_grid(first.kwargs)](*mm_args(), **first.all_kwargs()),
        "plain launch, keywords": lambda: ours_mm.fn[mm_grid(first.kwargs)](
            **dict(zip(ours_mm.arg_names, mm_args(), strict=False)), **first.all_kwargs()),
        "triton.autotune hit": lambda: tri_mm[mm_grid](*mm_args()),
        "autotuner.autotune hit": lambda: ours_mm[mm_grid](*mm_args()),
        "triton.autotune hit, keywords": lambda: tri_mm[mm_grid](**dict(zip(ours_mm.arg_names, mm_args(), strict=False))),
        "autotuner.autotune hit, keywords": lambda: ours_mm[mm_grid](**dict(zip(ours_mm.arg_names, mm_args(), strict=False))),
        "torch": lambda: a @ b,
        "caller's own": lambda: _NoKernel()[mm_grid](*mm_args()),
        **hit_parts(ours_mm, mm_args(), {}, mm_grid),
    }))
    rows.append(("tutorial matmul, 3 shapes in turn (decorated)", in_turn(ours_mm, tri_mm, dt)))
    return rows


def in_turn(ours_mm: Any, tri_mm: Any, dt: torch.dtype) -> dict[str, Callable[[], Any]]:
    """The tutorial matmul called at three shapes in a fixed order, as a model's layers call one kernel: each row
    takes the next shape at every call (its inputs, and a grid function, made ahead; its output allocated)."""
    calls = []
    for m, n, k in ((64, 64, 64), (64, 128, 64), (128, 64, 128)):
        a, b = torch.randn(m, k, device=DEV, dtype=dt), torch.randn(k, n, device=DEV, dtype=dt)

        def grid(meta: dict[str, Any], m: int = m, n: int = n) -> tuple[int]:
            return (triton.cdiv(m, meta["BLOCK_SIZE_M"]) * triton.cdiv(n, meta["BLOCK_SIZE_N"]),)

        calls.append((a, b, m, n, k, grid))

    def turning(launch: Callable[..., Any]) -> Callable[[], Any]:
        turn = [0]

        def call() -> Any:
            turn[0] = i = (turn[0] + 1) % len(calls)
            return launch(*calls[i])

        return call

    def hit_of(kernel: Any) -> Callable[[], Any]:
        def launch(a: Any, b: Any, m: int, n: int, k: int, grid: Any) -> Any:
            c = torch.empty(m, n, device=DEV, dtype=dt)
            return kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                                c.stride(1))

        return turning(launch)

    return {"triton.autotune hit": hit_of(tri_mm), "autotuner.autotune hit": hit_of(ours_mm),
            "torch": turning(lambda a, b, *_: a @ b)}


def parts_table(results: dict[str, dict[str, float]], parts: list[str]) -> None:
    """A markdown table of `parts` (the first names the call, the second its first part) for the problems that
    measured that part."""
    print("| problem | " + " | ".join(parts) + " |")
    print("|---|" + "---|" * len(parts))
    for problem, r in results.items():
        if parts[1] in r:
            print(f"| {problem} | " + " | ".join(f"{r[n]:.1f}" if n in r else "" for n in parts) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400, help="per round: fewer than the launch queue holds")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/overhead.db"
        settings = Settings(db_url=url, torch_op=False)  # the library rows launch the tuned kernel, never torch's op
        set_resolver(Resolver(settings))
        store = Store(url)
        results: dict[str, dict[str, float]] = {}
        for problem, rows in [*cases(store, settings), *(decorated() if DEV == "cuda" else [])]:  # triton.autotune times on a GPU only
            # rows interleaved round by round (each round's order rotated), so that a slow spell of the host's CPU
            # falls on every row alike rather than on the one measured through it
            def per_call(name: str, rows: dict[str, Any] = rows) -> float:
                return cpu_per_call_us(rows[name], args.calls, 1, gpu=DEV == "cuda")

            samples = interleaved(list(rows), args.rounds, per_call)
            results[problem] = {name: statistics.median(s) for name, s in samples.items()}
            print(f"{problem}: " + ", ".join(f"{k} {v:.1f} us" for k, v in results[problem].items()), flush=True)
    print(f"\n{current_device().key}, torch {torch.__version__}, triton {triton.__version__}; CPU us per call, median "
          f"of {args.rounds} rounds of {args.calls} calls queued behind a sleeping kernel\n")
    names = ["library", "library/launcher", "library/triton", "static launcher", "plain launch", "checked", "torch",
             "triton.autotune hit", "autotuner.autotune hit"]
    print("| problem | " + " | ".join(names) + " | library or autotune hit vs torch |")
    print("|---|" + "---|" * (len(names) + 1))
    for problem, r in results.items():
        ours = r.get("library", r.get("autotuner.autotune hit"))
        ratio = f"{ours / r['torch']:.2f}x" if ours and "torch" in r else ""
        print(f"| {problem} | " + " | ".join(f"{r[n]:.1f}" if n in r else "" for n in names) + f" | {ratio} |")
    print("\nWhere a library call's time goes (us): the lookup (face, key, one dict lookup: the call less its kept "
          "launch), the kept launch (the output allocated, the arguments gathered, `launcher.go`), `launcher.go` "
          "alone (one call's arguments ready), the static launcher's floor and torch's op\n")
    for r in results.values():
        if "kept launch" in r:
            r["lookup"] = r["library"] - r["kept launch"]
    parts_table(results, ["library", "lookup", "kept launch", "launcher.go", "static launcher", "torch"])
    print("\nWhere a decorated kernel's hit goes (us): its call signature alone, the check a repeated hit is tried "
          "with instead, its kept launcher's launch alone (one call's arguments and grid ready), and the caller's own "
          "part (the same call made to a kernel that launches nothing: its output allocated, its arguments and grid "
          "function built); the rest is the hit's bookkeeping and the grid function's call\n")
    parts_table(results, ["autotuner.autotune hit", "caller's own", "call signature", "tried check", "launcher.launch",
                          "plain launch", "torch"])
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
