"""Alembic environment: migrations run on the connection db.engine hands over (no ini file, no URL here)."""

from __future__ import annotations

from alembic import context

from db.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `autotuner db upgrade` (db.engine.upgrade), which passes a connection")

context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
