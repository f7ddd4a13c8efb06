"""`autotuner db upgrade`: create the result database or migrate it to the latest schema. `autotuner db check`:
list the rows every read skips (autotuner.store.row_checks), and quarantine them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotuner.cli.common import DbOpt, command, console, settings


@command
def upgrade(db: DbOpt = None) -> None:
    """Create the database or migrate it to the latest schema."""
    from db.engine import head_revision, make_engine, make_folder
    from db.engine import upgrade as migrate

    engine = make_engine(settings(db).db_url)
    make_folder(engine)
    state = migrate(engine)
    what = {"empty": "created", "old": "upgraded", "current": "already current"}[state]
    console.print(f"{engine.url.render_as_string(hide_password=True)}: {what} (schema {head_revision()})")


QuarantineOpt = Annotated[Path | None, typer.Option(
    "--quarantine", help="write the rows found to this JSON file, then delete them from the database")]


@command
def check(db: DbOpt = None, quarantine: QuarantineOpt = None) -> None:
    """List the rows no read will serve (table, id and why). Exits 1 when there are any and they were not quarantined.
    """
    from autotuner.store import open_store

    store = open_store(settings(db).db_url, create=False)
    found = store.faulty_rows()
    for row in found:
        console.print(f"{row.table} {row.id}: {row.reason}")
    if not found:
        console.print("every row reads back")
        return
    if quarantine is None:
        console.print(f"{len(found)} row(s) skipped by every read; --quarantine FILE moves them out")
        raise typer.Exit(1)
    store.quarantine(found, quarantine)
    console.print(f"{len(found)} row(s) written to {quarantine} and deleted from the database")
