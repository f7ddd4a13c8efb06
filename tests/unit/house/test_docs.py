"""The documentation says what the code has: every setting, every command, every module of a room, every link."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"


def test_every_setting_is_documented():
    from autotuner.base.settings import Settings

    text = (DOCS / "operations.md").read_text()
    missing = [f"AUTOTUNER_{name.upper()}" for name in Settings.model_fields
               if f"AUTOTUNER_{name.upper()}" not in text]
    assert missing == []


def test_every_command_is_documented():
    import typer

    from autotuner.cli.app import build

    group = typer.main.get_command(build())
    names = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        sub = getattr(command, "commands", None)
        names += [f"{name} {s}" for s in sub] if sub else [name]
    text = (DOCS / "cli.md").read_text()
    assert [n for n in names if f"`autotuner {n}" not in text] == []


def test_every_strategy_is_documented_where_the_commands_take_one():
    from autotuner.engine.search.strategies import strategy_names

    text = (DOCS / "cli.md").read_text()
    listed = set(re.findall(r"--strategy ([a-z_|\\]+)", text))
    assert listed, "docs/cli.md names no --strategy choices"
    for choices in listed:
        assert set(choices.replace("\\", "").split("|")) == set(strategy_names()), choices


def test_every_module_of_a_room_is_named_in_the_design():
    """Each room's modules are named on the design's pages (the overview and a page per room), the engine's rooms'
    too; the overview stays an overview."""
    text = "\n".join(p.read_text() for p in [DOCS / "DESIGN.md", *(DOCS / "design").glob("*.md")])
    rooms = [r for r in (ROOT / "autotuner").iterdir() if (r / "__init__.py").exists()]
    rooms += [r for r in (ROOT / "autotuner/engine").iterdir() if (r / "__init__.py").exists()]
    unnamed = [str(p.relative_to(ROOT)) for room in rooms for p in room.glob("*.py")
               if p.name != "__init__.py" and f"{p.stem}" not in text]
    assert unnamed == []
    assert len((DOCS / "DESIGN.md").read_text().splitlines()) < 200


def test_every_line_of_the_docs_is_one_a_person_can_read():
    long = [f"{p.name}:{i}: {len(line)} characters" for p in [*DOCS.glob("*.md"), ROOT / "README.md"]
            for i, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 600]
    assert long == []


def test_links_between_the_documents_resolve():
    broken = []
    for doc in [ROOT / "README.md", *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(((?!\.\.\.)[^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" not in target and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_the_readme_reads_in_two_screens():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 100
