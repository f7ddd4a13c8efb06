"""`autotuner db upgrade`: create the result database or migrate it to the latest schema."""

from __future__ import annotations

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
