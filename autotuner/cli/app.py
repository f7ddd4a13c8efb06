"""The commands in one Typer app, in `autotuner --help` order, built after the plugins load (their ops bring options):
`app = build()`."""

from __future__ import annotations

import sys
from typing import Any

import typer

from autotuner.base.registry import add_module_scanner, add_op_finder, load_plugins
from autotuner.base.settings import Settings

METAVARS = {"str": "TEXT", "text": "TEXT", "int": "N", "int range": "N", "float": "X", "float range": "X",
            "path": "PATH"}


class Command(typer.core.TyperCommand):
    """A command whose --help names each value's kind in words (TEXT, N, X), not Typer's `<str>` or
    `<float range>` placeholders; ranges still follow as `[x>=1]`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            word = METAVARS.get(param.type.name)
            if word is None or getattr(param, "is_flag", False):
                continue
            if param.metavar is None and not isinstance(param, typer.core.TyperArgument):
                param.metavar = word
            if isinstance(param, typer.core.TyperArgument):  # its kind column asks the type itself
                kind = type(param.type)
                param.type = type(f"Named{kind.__name__}", (kind,), {"get_metavar": lambda self, param, ctx, w=word: w})()


def _covered_op(name: str) -> Any:
    """A covered `@triton.autotune` kernel's op by `module:qualname`, importing the decorator (and torch) only when such
    a name is asked for."""
    from autotuner.decorator.install import find_op

    return find_op(name)


def _helion_ops(module: Any) -> list[Any]:
    """The ops of a plugin module's Helion kernels (the decorator and its Helion support imported only where the
    module imported Helion)."""
    if "helion" not in sys.modules:
        return []
    from autotuner.decorator.helion_cache import module_ops

    return module_ops(module)


def build() -> typer.Typer:
    """The app with every command (the plugins loaded first)."""
    add_module_scanner(_helion_ops)
    load_plugins(Settings().plugins)
    add_op_finder(_covered_op)
    from autotuner.cli import bench, database, install, ops, replay, service, show, transfer, tune

    app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False,
                      help="Autotune Triton kernels and serve the results.")
    app.command("tune", cls=Command)(tune.tune)
    app.command("show", cls=Command)(show.show)
    app.command("ops", cls=Command)(ops.ops)
    app.command("replay", cls=Command)(replay.replay)
    app.command("export", cls=Command)(transfer.export)
    app.command("import", cls=Command)(transfer.import_)
    app.command("bench", cls=Command)(bench.bench)
    app.command("report", cls=Command)(bench.report)
    app.command("run", context_settings=install.SCRIPT, cls=Command)(install.run)
    app.command("install", context_settings=install.SCRIPT, cls=Command)(install.install)
    app.command("serve", cls=Command)(service.serve)
    app.command("worker", cls=Command)(service.worker)
    db_app = typer.Typer(no_args_is_help=True, help="Manage the result database.")
    db_app.command("upgrade", cls=Command)(database.upgrade)
    db_app.command("check", cls=Command)(database.check)
    app.add_typer(db_app, name="db")
    return app
