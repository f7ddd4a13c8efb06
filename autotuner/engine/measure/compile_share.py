"""Compiles shared between hosts: with `AUTOTUNER_COMPILE_SECRET` set, trial workers and compile pools keep Triton's
compile-cache files in the database, signed, and load what another host compiled under Triton's own cache key. More:
docs/design/engine.md."""

from __future__ import annotations

import os

from autotuner.engine.measure import processes

MANAGER = "autotuner.engine.measure.compile_share_backend:LocalFirstManager"
BACKEND = "autotuner.engine.measure.compile_share_backend:DatabaseBackend"
SECRET_VAR, URL_VAR = "AUTOTUNER_COMPILE_SECRET", "AUTOTUNER_DB_URL"


def share(secret: str | None, db_url: str | None) -> bool:
    """Give the children started from now on the variables that share their compiles through `db_url` (None: the
    default database); whether they will. Nothing without a secret, or where TRITON_CACHE_MANAGER is the user's."""
    if not secret or os.environ.get("TRITON_CACHE_MANAGER", MANAGER) != MANAGER:
        processes.child_environment({})
        return False
    env = {"TRITON_CACHE_MANAGER": MANAGER, "TRITON_REMOTE_CACHE_BACKEND": BACKEND, SECRET_VAR: secret}
    if db_url:
        env[URL_VAR] = db_url
    processes.child_environment(env)
    return True
