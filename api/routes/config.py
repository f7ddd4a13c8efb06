"""GET /config: the config to launch a problem with. The query's enumerations (ops, dtypes, option values) and
the shape pattern come from the registered ops."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from api.deps import State
from api.schemas import PRINTABLE, UNAVAILABLE, ConfigOut, DeviceChoiceOut, ErrorOut, NotFoundOut, dtype_names
from autotuner.launch import serving
from autotuner.store.resolution import FALLBACKS, NotFound
from search_spaces.contract import TunableOp, merge_options

FIXED = ("op", "shape", "dtype", "device", "fallback", "kernel_hash", "triton_version")


def _option_params(ops: list[TunableOp[Any]]) -> list[inspect.Parameter]:
    """One query parameter per option name any op declares: its values, or a boolean written `true` or `false`
    (nothing else: `causal=no` is a 422, not a guess)."""
    params = []
    for m in merge_options(ops):
        kind: Any = Literal["true", "false"] if m.choices is None else Literal[tuple(sorted(m.choices))]  # type: ignore[valid-type]
        params.append(inspect.Parameter(m.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=Annotated[kind | None, Query(description=", ".join(m.owners))]))
    return params


def router(ops: list[TunableOp[Any]]) -> APIRouter:
    api = APIRouter(tags=["lookup"])
    names = tuple(op.name for op in ops)
    dtypes = dtype_names(tuple(dict.fromkeys(d for op in ops for d in op.dtypes)))
    # A decorated kernel's dtype names its tensor arguments' dtypes ("float16,int64"): a pattern, not a list.
    # Left out: float16 for a built-in op; a decorated kernel's: the one tuned (serving.tuned_dtype).
    dtype_kind: Any = Literal[dtypes] | None if all(op.dtypes for op in ops) else Annotated[str | None, Query(  # type: ignore[valid-type]
        pattern=r"^[a-z0-9_]{1,16}(,[a-z0-9_]{1,16}){0,63}$", max_length=1100)]
    shapes = list(dict.fromkeys(op.problem_type.shape_pattern for op in ops))
    shape_pattern = shapes[0] if len(shapes) == 1 else "|".join(f"(?:{p})" for p in shapes)
    options = _option_params(ops)
    accepted = {*FIXED, *(p.name for p in options)}

    async def get_config(request: Request, st: State, **query: Any) -> Response:
        """The config to launch with: the exact tuned result, else the nearest's, else the default. 404 when the values
        name no problem or, with `fallback=none`, nothing exact is stored; 300 when no device is named and the database
        knows several."""
        unknown = sorted(set(request.query_params) - accepted)
        if unknown:
            raise serving.InputError(unknown[0], f"unknown query parameter {unknown[0]!r}; accepted: "
                                                 f"{', '.join(sorted(accepted))}")
        opts = {p.name: query[p.name] for p in options}

        def resolve() -> tuple[int, bytes, str]:
            dtype = query["dtype"]
            # a bad request is told so whether or not the database answers
            parsed = serving.parse_request(query["op"], query["shape"], dtype, opts) if dtype is not None else None
            store = st.store.full()
            if parsed is None:  # what was tuned, else the op's default (float16 for the built-in ops)
                named = serving.op_named(query["op"])
                dtype = serving.tuned_dtype(store, named, query["shape"], opts) or serving.default_dtype(named)
                parsed = serving.parse_request(query["op"], query["shape"], dtype, opts)
            op_, problem = parsed
            serving.check_key_types(store, op_, problem)
            dev = serving.pick_device(store, query["device"])
            try:
                answer = serving.answer_config(store, op_, problem, dev, fallback=query["fallback"],
                                               kernel_hash=query["kernel_hash"],
                                               triton_version=query["triton_version"])
            except NotFound as exc:
                return 404, ErrorOut(detail=str(exc)).model_dump_json().encode(), "none"
            return 200, ConfigOut(**dataclasses.asdict(answer)).model_dump_json().encode(), answer.source

        async def compute() -> tuple[int, bytes, str]:
            return await run_in_threadpool(resolve)

        entry = await st.config_cache.get(request.scope["query_string"], compute)
        st.metrics.lookups.labels(entry.source).inc()
        return Response(entry.body, status_code=entry.status, media_type="application/json")

    kw = inspect.Parameter.KEYWORD_ONLY
    get_config.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request),
        inspect.Parameter("st", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=State),
        inspect.Parameter("op", kw, annotation=Annotated[Literal[names], Query(description=", ".join(names))]),  # type: ignore[valid-type]
        inspect.Parameter("shape", kw, annotation=Annotated[str, Query(
            max_length=1000, pattern=shape_pattern,
            description="each op's form: " + "; ".join(f"{op.name} {op.problem_type.layout}" for op in ops))]),
        inspect.Parameter("dtype", kw, default=None, annotation=dtype_kind),
        inspect.Parameter("device", kw, default=None, annotation=Annotated[str | None, Query(
            max_length=200, pattern=PRINTABLE, description="Device key, e.g. 'NVIDIA H100 80GB HBM3 (sm_90)'; may be "
                                                           "left out when the database knows exactly one device")]),
        inspect.Parameter("fallback", kw, default="nearest", annotation=Literal[FALLBACKS]),  # type: ignore[valid-type]
        *options,
        inspect.Parameter("kernel_hash", kw, default=None, annotation=Annotated[str | None, Query(
            pattern=r"^[0-9a-f]{1,64}$", description="the caller's kernel hash; default: the server's")]),
        inspect.Parameter("triton_version", kw, default=None, annotation=Annotated[str | None, Query(
            max_length=32, pattern=PRINTABLE, description="the caller's Triton version; default: the server's")]),
    ])
    api.add_api_route("/config", get_config, methods=["GET"], response_model=None, responses={
        200: {"model": ConfigOut},
        300: {"model": DeviceChoiceOut, "description": "No device named, and the database knows several"},
        404: {"model": NotFoundOut, "description": "The values name no problem or device, or fallback=none and "
                                                   "nothing exact is stored"},
        **UNAVAILABLE})
    return api
