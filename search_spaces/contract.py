"""The kernel contract: what the engine needs to know about a tunable kernel, declared once per kernel. More:
docs/design/kernels.md."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar

from kernels._torch import lazy
from search_spaces.kernel_identity import kernel_identity, module_identity
from search_spaces.problem import ProblemError
from search_spaces.space import Space

if TYPE_CHECKING:
    import torch
    from typing_extensions import Self
else:
    torch = lazy(__name__)

# Max |out - ref| / max |ref|, per dtype. Dot-product ops accumulate over K and use TF32 for float32 on GPUs.
DOT_TOLERANCE: Mapping[str, float] = {"float16": 1e-2, "bfloat16": 3e-2, "float32": 1e-2}
ELEMENTWISE_TOLERANCE: Mapping[str, float] = {"float16": 5e-3, "bfloat16": 2e-2, "float32": 1e-4}


@dataclass(frozen=True)
class Comparison:
    ok: bool
    error: float
    message: str


def compare(out: torch.Tensor, ref: torch.Tensor, tol: float) -> Comparison:
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, float("inf"), f"shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}")
    o = out.float()
    r = ref.float().to(o.device)
    bad = ~torch.isfinite(o) & torch.isfinite(r)
    if bool(bad.any()):
        n = int(bad.sum())
        return Comparison(False, float("inf"), f"{n} of {o.numel()} elements are NaN/inf (unwritten or overflowed)")
    scale = float(r.abs().max()) or 1.0
    err = float((o - r).abs().max()) / scale
    if err > tol:
        return Comparison(False, err, f"max error {err:.3g} (relative to max |ref|) exceeds tolerance {tol:g}")
    return Comparison(True, err, f"max error {err:.3g} within {tol:g}")


class ProblemType(Protocol):
    """A problem type: a frozen dataclass whose fields are one problem (kept as JSON, rebuilt by
    `problem_type(**fields)`), saying its shape, dtype, key and nearest measure; ProblemBase gives defaults."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # a dataclass: asdict gives its fields
    layout: ClassVar[str]  # how a shape string is written, for messages: "MxNxK, e.g. 4096x4096x4096"
    shape_pattern: ClassVar[str]  # the regular expression of its shape strings (problem.dims_pattern)
    shape_flags: ClassVar[tuple[str, ...]]  # dimensions a command line may give one by one (matmul: M, N, K)

    @classmethod
    def parse(cls, *args: Any, **kwargs: Any) -> Self:
        """The problem named by (shape, dtype, **options); ProblemError naming what is wrong."""

    @property
    def dtype(self) -> str: ...

    @property
    def shape(self) -> str: ...

    @property
    def key(self) -> str: ...

    def dims(self) -> tuple[float, ...]:
        """The positive sizes a nearest tuned problem is measured by (log scale)."""

    def match_fields(self) -> Mapping[str, Any]:
        """What a nearest tuned problem must share: the dtype and the options, or a kernel's non-numeric keys."""

    def nearest_group(self) -> tuple[Any, ...]:
        """Problems sharing this rank first among the nearest (matmul: the same N and K)."""

    def bucket(self) -> Self:
        """The representative of this problem's bucket, whose tuned result serves it when it has none of its own
        (the built-in ops bucket their leading dimension by powers of two); itself where there are no buckets."""


P = TypeVar("P", bound=ProblemType)
INDEX_LIMIT = 2**31 - 1  # the kernels compute offsets in 32-bit integers
OWN_SEARCH = "own"  # the strategy name a generated kernel's search takes for its generator's own search
Inputs = Mapping[str, Any]
OpKind = Literal["op", "kernel"]  # op: inputs are made from the problem alone (built-in ops, plugins); kernel: an
# autotuner.autotune kernel, whose inputs are rebuilt from a launch recorded and carried with the problem


@dataclass(frozen=True)
class Option:
    """A problem option beyond shape and dtype: a closed set of strings, or a boolean."""

    name: str
    choices: tuple[str, ...] | None = None  # None: a boolean (or, with `data`, a JSON object)
    default: Any = None
    help: str = ""
    data: bool = False  # a JSON object carried with the problem (a recorded call), never a CLI or query option

    @property
    def is_flag(self) -> bool:
        return self.choices is None and not self.data

    def parse(self, value: Any) -> Any:
        """The value as the problem holds it; ValueError naming the option and what it accepts."""
        if self.data:
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"{self.name} must be a JSON object, got {type(value).__name__}")
            return value
        if self.is_flag:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "1", "yes"):
                return True
            if text in ("false", "0", "no"):
                return False
            raise ValueError(f"{self.name} must be true or false, got {value!r}")
        assert self.choices is not None
        if value not in self.choices:
            raise ValueError(f"unknown {self.name} {value!r}; accepted: {', '.join(self.choices)}")
        return value


@dataclass(frozen=True)
class MergedOption:
    """One option name across every op that declares it: the union of their values (None: a boolean), in the
    order first declared, and the ops that take it."""

    name: str
    choices: tuple[str, ...] | None
    owners: tuple[str, ...]
    help: str


def merge_options(ops: Iterable[TunableOp[Any]]) -> list[MergedOption]:
    """The query options (not the data ones) of these ops, one entry per name: what the CLI's flags and the
    HTTP query's parameters are built from."""
    merged: dict[str, MergedOption] = {}
    for op in ops:
        for o in op.query_options:
            seen = merged.get(o.name)
            if seen is None:
                merged[o.name] = MergedOption(o.name, o.choices, (op.name,), o.help)
                continue
            choices = None if seen.choices is None else \
                (*seen.choices, *(c for c in o.choices or () if c not in seen.choices))
            merged[o.name] = MergedOption(o.name, choices, (*seen.owners, op.name), seen.help)
    return list(merged.values())


@dataclass(frozen=True)
class Example:
    """A problem an op's own tests run (tests/integration/test_kernels.py, test_spaces.py, gpu/test_gpu_ops.py read them from
    the registry): in `TunableOp.examples`, small enough for Triton's interpreter and run in every dtype the op
    takes; in `TunableOp.gpu_examples`, a realistic size in `dtype`."""

    shape: str
    options: Mapping[str, Any] = field(default_factory=dict)
    dtype: str | None = None
    why: str = ""  # what the shape exercises, where it is not plain


@dataclass(frozen=True, kw_only=True)
class LibraryCall:
    """How a built-in op is launched as `autotuner.<name>(...)` (autotuner.launch.library builds the call). The call
    resolves a config once per launch signature and keeps `prepare`'s launch; `config=` launches with that config
    instead.

        face       the call's arguments in order, defaults filled (its name and docstring are the call's);
                   TypeError or ValueError for bad arguments
        signature  (arguments) -> shapes, strides, dtypes, devices and options: with the tensors' alignment
                   (`tensors`) it keys the kept launch; alone, the config an eager call resolved
        inputs     (arguments) -> the op's inputs, whose problem the lookup resolves
        prepare    (arguments, config) -> a launch taking the arguments at `launch_args`, checked once
        run        (arguments, config) -> the output, the inputs checked on this call
        torch_op   (arguments) -> the output through torch's own op (the `baseline`); launched instead where
                   the tune timed it faster (`Resolution.launches_torch`)
    """

    face: Callable[..., tuple[Any, ...]]
    signature: Callable[..., tuple[Any, ...]]
    tensors: tuple[int, ...]
    inputs: Callable[..., dict[str, Any]]
    prepare: Callable[..., Callable[..., Any]]
    run: Callable[..., Any]
    launch_args: tuple[int, ...]
    torch_op: Callable[..., Any] | None = None

    @property
    def name(self) -> str:
        return self.face.__name__


def tensor_signature(t: torch.Tensor | None) -> tuple[Any, ...] | None:
    """What of a tensor argument decides a launch, its data pointer aside (a library call's `signature`)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


# A format of `autotuner export` an op writes itself (vLLM's tuned-config files for matmul): the export's data
# (autotuner.store.transfer.export_data) -> file name -> content, and a note for each result changed or left out.
FileExport = Callable[[Mapping[str, Any]], tuple[dict[str, Any], list[str]]]


@dataclass(frozen=True, kw_only=True)
class TunableOp(Generic[P]):
    """A tunable kernel as the engine sees it. Functions take the inputs as one mapping of names to values."""

    name: str
    problem_type: type[P]  # a frozen dataclass whose fields are the problem's (ProblemType)
    space: Space[P]
    dtypes: tuple[str, ...]
    launch: Callable[[Inputs, Mapping[str, Any]], Any]  # (inputs, config) -> output
    make_inputs: Callable[[P, str], dict[str, Any]]  # (problem, torch device) -> inputs; "meta" in a compile-pool
    # process: the same shapes, strides and dtypes, values not needed (search_spaces.problem.normal)
    problem_from_inputs: Callable[[Any], P]  # (inputs) -> the problem they are
    reference: Callable[[Inputs], Any] | None  # None: the default config's output is the reference
    tolerance: Mapping[str, float] = field(default_factory=lambda: dict(ELEMENTWISE_TOLERANCE))
    options: tuple[Option, ...] = ()
    sources: tuple[ModuleType | Callable[..., Any], ...] = ()  # their source text is the result's kernel hash
    identity: str = ""  # more of what decides its binaries, in the kernel hash (a generated kernel's generator versions)
    imports: tuple[str, ...] = ()  # modules a trial process imports (as plugins) before it can find the op
    flops: Callable[[P], float] | None = None
    bytes_moved: Callable[[P], float] | None = None
    elements: Callable[[P], int] | None = None  # its largest tensor's element count (32-bit offsets in the kernels)
    refine: Callable[[P], P] | None = None  # a parsed problem as this op takes it, or ProblemError (check_problem)
    allowed: Callable[[P], Collection[str] | None] | None = None  # the config keys a problem may be measured with
    # beyond the space's constraints (a decorated kernel's configs left by its pruning at the recorded launch); None:
    # every valid config
    checked: Callable[[Inputs, Mapping[str, Any]], Any] | None = None  # a launch whose outputs are compared
    # (default: `launch`); for a kernel writing into its arguments, their copies taken before any restore
    search: Callable[..., tuple[Any, ...]] | None = None  # a generated kernel's search, which a worker runs instead
    # of the engine's: (problem, device, the job's store, budget, strategy name: a registered one or OWN_SEARCH) ->
    # (config, ms, run id)
    baseline: Callable[[Inputs], Any] | None = None  # torch's own version, for speedups
    variants: Mapping[str, Callable[[Inputs], Any]] = field(default_factory=dict)  # more torch versions to bench
    description: str = ""
    call: str = ""  # how a program launches it, for people: "autotuner.softmax(x)"
    kind: OpKind = "op"
    library: LibraryCall | None = None  # the built-in ops' `autotuner.<name>(...)`
    exports: Mapping[str, FileExport] = field(default_factory=dict)  # export formats of this op's own
    examples: tuple[Example, ...] = ()  # what its tests run in the interpreter (odd sizes, masks and tails), every dtype
    gpu_examples: tuple[Example, ...] = ()  # what the GPU tier runs: realistic sizes, each in its dtype

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)

    @property
    def query_options(self) -> tuple[Option, ...]:
        """The options a person or a query names (`--epilogue`, `causal=true`): not the data ones."""
        return tuple(o for o in self.options if not o.data)

    def option(self, name: str) -> Option:
        return next(o for o in self.options if o.name == name)

    def parse_problem(self, shape: object, dtype: object = "float16", **options: Any) -> P:
        """The problem named by a shape string, a dtype and options, checked as every door checks it (the command
        line, GET /config, POST /jobs, an import: `check_problem`); ValueError naming what is wrong."""
        given = {k: v for k, v in options.items() if v is not None}
        unknown = sorted(k for k in given if k not in self.option_names)
        if unknown:
            accepted = ", ".join(self.option_names) or "none"
            raise ValueError(f"{self.name} takes no option(s) {', '.join(unknown)}; accepted: {accepted}")
        parsed = {k: self.option(k).parse(v) for k, v in given.items()}
        return self.check_problem(self.problem_type.parse(shape, dtype, **parsed))

    def check_problem(self, problem: P) -> P:
        """The problem as this op takes it, or ProblemError: its tensors within the kernels' 32-bit offsets, and
        what the op's own `refine` says (a decorated kernel: its key's names and values)."""
        if self.elements is not None:
            n = self.elements(problem)
            if n > INDEX_LIMIT:
                raise ProblemError(f"{self.name} {problem.key} has a tensor of {n:,} elements; the kernels index "
                                   f"with 32-bit offsets, so at most {INDEX_LIMIT:,}; choose a smaller shape")
        return self.refine(problem) if self.refine is not None else problem

    def problem_from_dict(self, fields: Mapping[str, Any]) -> P:
        """A problem from its stored fields (the database keeps them as JSON)."""
        return self.problem_type(**fields)

    @property
    def needs_recorded_call(self) -> bool:
        """Its problems carry the launch a worker replays (a decorated kernel): a bare shape cannot be tuned."""
        return self.kind == "kernel"

    @property
    def default_strategy(self) -> str:
        """The search a tune or job of it runs when none is named: a generated kernel's own (its generator's search
        beat ours on the kernels measured: benchmarks/RESULTS.md), else TPE."""
        return OWN_SEARCH if self.search is not None else "tpe"

    def options_of(self, problem: P) -> dict[str, Any]:
        """The problem's option values by name (what a job carries besides shape and dtype)."""
        return {name: getattr(problem, name) for name in self.option_names}

    def command_args(self, problem: P) -> str:
        """The problem as `autotuner tune` arguments: `--shape S --dtype D`, then each option away from its
        default (`--causal`, `--epilogue bias_gelu`)."""
        args = [f"--shape {problem.shape}", f"--dtype {problem.dtype}"]
        for o in self.query_options:
            value = getattr(problem, o.name)
            if value != o.default and value is not None:
                args.append(f"--{o.name}" if o.is_flag else f"--{o.name} {value}")
        return " ".join(args)

    def run(self, inputs: Inputs, config: Mapping[str, Any]) -> Any:
        return self.launch(inputs, config)

    def run_checked(self, inputs: Inputs, config: Mapping[str, Any]) -> Any:
        """A launch whose result is the output to compare with the reference."""
        return (self.checked or self.launch)(inputs, config)

    def check(self, out: Any, ref: Any, problem: P) -> Comparison:
        """An output against the reference within this op's tolerance for the problem's dtype. Outputs may be one
        tensor or a tuple of them (a kernel writing several); each is compared."""
        tol = self.tolerance.get(problem.dtype, max(self.tolerance.values(), default=1e-2))
        if isinstance(ref, Mapping):  # named outputs: those the reference names are compared
            if not isinstance(out, Mapping) or set(ref) - set(out):
                return Comparison(False, float("inf"), f"the reference names outputs {sorted(ref)}, the launch gave "
                                                       f"{sorted(out) if isinstance(out, Mapping) else type(out).__name__}")
            out, ref = tuple(out[k] for k in ref), tuple(ref.values())
        outs = out if isinstance(out, (tuple, list)) else (out,)
        refs = ref if isinstance(ref, (tuple, list)) else (ref,)
        if len(outs) != len(refs):
            return Comparison(False, float("inf"), f"{len(outs)} outputs, the reference has {len(refs)}")
        worst = Comparison(True, 0.0, "no outputs")
        for o, r in zip(outs, refs, strict=True):
            c = compare(o, r, tol)
            if not c.ok:
                return c
            worst = c if c.error >= worst.error else worst
        return worst

    @functools.cached_property
    def kernel_hash(self) -> str:
        """Hash of the kernel's sources (search_spaces.kernel_identity): a stored result is exact only while it matches.
        Modules piece by piece, a function by its kernel identity."""
        h = hashlib.sha256()
        modules = [src for src in self.sources if isinstance(src, ModuleType)]
        if modules:
            h.update(module_identity(*modules).encode())
        for src in self.sources:
            if not isinstance(src, ModuleType):
                h.update(kernel_identity(src).encode())
        if self.identity:
            h.update(self.identity.encode())
        return h.hexdigest()[:16]
