"""docker-compose.yml and the Dockerfile, checked without Docker: the structure compose needs, commands that
the CLI accepts, environment variables that the settings know, and every package copied into the image."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
import yaml
from typer.main import get_command

from autotuner.base.settings import Settings
from autotuner.cli.app import build

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_has_postgres_the_api_and_a_gpu_worker():
    services = _compose()["services"]
    assert set(services) == {"postgres", "api", "worker"}
    pg = services["postgres"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    assert "pgdata" in _compose()["volumes"]
    api = services["api"]
    assert api["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(api["healthcheck"]["test"])
    worker = services["worker"]
    device = worker["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert worker["depends_on"]["api"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        assert services[name]["environment"]["AUTOTUNER_DB_URL"].startswith("postgresql+psycopg://")
        assert "@postgres:5432/" in services[name]["environment"]["AUTOTUNER_DB_URL"]


def test_compose_commands_and_variables_are_ones_autotuner_accepts():
    cli = get_command(build())
    fields = {f"AUTOTUNER_{name.upper()}" for name in Settings.model_fields}
    for name, service in _compose()["services"].items():
        env = service.get("environment", {})
        unknown = {k for k in env if k.startswith("AUTOTUNER_")} - fields
        assert not unknown, f"{name}: variables the settings do not read: {unknown}"
        if service.get("command"):
            assert service["command"][0] == "autotuner"
            sub, *args = service["command"][1:]
            command = cli.commands[sub]  # type: ignore[attr-defined]
            ctx = command.make_context(sub, list(args))  # raises on an unknown option or a bad value
            given = dict(zip(args[::2], args[1::2], strict=True))  # the compose commands are --option value pairs
            for option, value in given.items():
                param = next(p for p in command.params if option in p.opts)
                assert str(ctx.params[param.name]) == value, f"{name}: {option} {value} parsed as {ctx.params[param.name]!r}"


def test_the_image_holds_every_package_and_serves_by_default():
    dockerfile = (ROOT / "Dockerfile").read_text()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile, flags=re.M))
    assert {p.rstrip("*") for p in packages} <= copied
    assert 'pip install ".[server,postgres,predict]"' in dockerfile  # the worker fits sweeps' models
    assert re.search(r'^CMD \["autotuner", "serve", "--host", "0.0.0.0"', dockerfile, flags=re.M)
