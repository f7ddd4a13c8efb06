"""Schemathesis against the app's own OpenAPI schema: generated valid and invalid requests to every operation.

No input may produce a 500, every answer must match the documented status codes, content types and response
schemas, schema-valid requests are accepted and schema-invalid ones refused. Writes are sent with the server's token so the job body validation is exercised, not only the 401.
"""

from __future__ import annotations

import contextlib

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from api.app import create_app
from autotuner.base.settings import Settings
from tests.conftest import _fresh_pg_database
from tests.integration.test_api import TOKEN, seed

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def api_schema(request, tmp_path_factory):
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('schema') / 'schema.db'}"
        else:
            url = stack.enter_context(_fresh_pg_database())
        seed(url)
        app = create_app(Settings(db_url=url, token=TOKEN, config_cache_s=0))
        yield schemathesis.openapi.from_asgi("/openapi.json", app)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_check_passes(case):
    """All of schemathesis' checks, "schema-valid data must be accepted" among them: the schema states each op's
    shape pattern, dtypes and options (POST /jobs has one body per op), so a request it admits names a problem;
    values that are each valid but name nothing together (GET /config with another op's shape) answer 404, and a
    job the schema admits that no kernel here can run (a product of dimensions beyond 32-bit offsets, query heads
    that do not group) a 409 naming why: no check is excluded."""
    case.call_and_validate(headers=AUTH)
