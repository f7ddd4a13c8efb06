"""`autotuner db check`: every row of the checked tables read as the store reads it, and each that fails its row
check (autotuner.store.row_checks) named with its table, id and reason; quarantined on request: written whole to a
JSON file, then deleted from the database in one transaction, so no read meets it again."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from autotuner.store.row_checks import best_fault, cross_timing_fault, job_fault, run_fault, trial_fault
from autotuner.store.rows import FaultyRow
from db import repository as repo
from db.engine import session_scope


def _best(row: Any) -> str | None:
    from autotuner.base.registry import get_op

    try:
        space = get_op(row.op).space if isinstance(row.op, str) else None
    except ValueError:  # an op this process does not know: its row's types and times still checked
        space = None
    return best_fault(row, space)


FAULTS: dict[str, Callable[[Any], str | None]] = {
    "best_configs": _best, "tuning_runs": run_fault, "trials": trial_fault, "jobs": job_fault,
    "cross_timings": cross_timing_fault}


def faulty_rows(store: Any) -> Iterator[FaultyRow]:
    """Every row of the checked tables that fails its check, table by table, in id order."""
    for table in repo.CHECKED_TABLES:
        after = 0
        while True:
            with session_scope(store.engine) as s:
                rows = repo.table_rows(s, table, after=after)
            if not rows:
                break
            for row in rows:
                reason = FAULTS[table](row)
                if reason is not None:
                    yield FaultyRow(table=table, id=row.id, reason=reason, row=dict(row._mapping))
            after = rows[-1].id


def quarantine(store: Any, rows: list[FaultyRow], path: Path) -> None:
    """Write `rows` to `path` (JSON: table, id, reason and the row as stored), then delete them from the database."""
    path.write_text(json.dumps([{"table": r.table, "id": r.id, "reason": r.reason, "row": r.row} for r in rows],
                               indent=2, default=str))
    with session_scope(store.engine) as s:
        for table in repo.CHECKED_TABLES:
            ids = [r.id for r in rows if r.table == table]
            if ids:
                repo.delete_rows(s, table, ids)
