"""`autotuner ops`: the ops this installation can tune (built in, plugins, decorated kernels imported), each with
its shape layout, dtypes, options and how a program launches it."""

from __future__ import annotations

from rich.table import Table

from autotuner.cli.common import JsonOpt, command, console, print_json


@command
def ops(as_json: JsonOpt = False) -> None:
    """List the ops: name, how a shape is written, dtypes, options, and how a program launches it."""
    from autotuner.base.registry import ops as registered

    rows = [{"op": op.name, "kind": op.kind, "layout": op.problem_type.layout,
             "shape_flags": list(op.problem_type.shape_flags), "dtypes": list(op.dtypes),
             "options": {o.name: list(o.choices) if o.choices else "true/false" for o in op.query_options},
             "call": op.call, "description": op.description} for op in registered()]
    if as_json:
        print_json(rows)
        return
    table = Table(title="ops")
    for column in ("op", "shape", "dtypes", "options", "launched by"):
        table.add_column(column)
    for r in rows:
        shape = r["layout"] + (f" (or --{' --'.join(r['shape_flags'])})" if r["shape_flags"] else "")
        options = "; ".join(f"--{k} {'|'.join(v) if isinstance(v, list) else ''}".strip()
                            for k, v in r["options"].items())
        table.add_row(r["op"], shape, ", ".join(r["dtypes"]) or "(its tensors')", options, r["call"])
    console.print(table)
