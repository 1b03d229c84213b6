"""The engine is composed, not inherited, and the core keeps its layer: the rule written in
``agenttx/core/__init__.py``, checked on the source and on a running interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import agenttx
from agenttx.core.engine import Engine

CORE = Path(agenttx.__file__).parent / "core"
# What every core module may import from agenttx.
ALLOWED = (
    "agenttx.core",
    "agenttx.errors",
    "agenttx.types",
    "agenttx.receipts",
    "agenttx.jsontext",
    "agenttx.jsonpolicy",
    "agenttx.renamed",  # layer 1: the old names of renamed settings (Engine.open's)
    "agenttx.settings",  # layer 1: every setting, its default, range and unit (EngineConfig's)
    "agenttx.numbers",  # layer 1: the ranges of whole numbers every surface shares
    "agenttx.files",  # layer 1 (agenttx.__doc__): size-bounded reads of files the user names
    "agenttx.plural",  # layer 1: a count and its noun ("1 step", "2 steps")
    "agenttx.redaction",  # layer 1: the secrets masked in free text (hints, masking, logs)
    "agenttx.audit",
    "agenttx.store.contract",
    "agenttx.tools",
)


def agenttx_imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += (
                [f"agenttx.{a.name}" for a in node.names]
                if node.module == "agenttx"
                else [node.module]
            )
    return [n for n in names if n == "agenttx" or n.startswith("agenttx.")]


def test_core_imports_no_concrete_store_driver_or_adapter() -> None:
    for path in sorted(CORE.rglob("*.py")):
        # No exception: Engine.open, which builds the store and the dispatcher, is the
        # composition root's (agenttx.app), outside the core.
        for name in agenttx_imports(path):
            assert name.startswith(ALLOWED), f"{path.relative_to(CORE)} imports {name}"


def test_the_store_factory_imports_its_backends_lazily() -> None:
    factory = Path(agenttx.__file__).parent / "store" / "factory.py"
    tree = ast.parse(factory.read_text())
    top_level = [
        n.module
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("agenttx")
    ]
    assert all(m in ("agenttx.errors", "agenttx.store.contract") for m in top_level), top_level


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_importing_the_engine_loads_no_store_backend_or_driver(tmp_path: Path) -> None:
    loaded = _loaded_after("import agenttx.core.engine")
    for backend in ("agenttx.store.sqlite", "agenttx.store.postgres", "psycopg", "sqlite3"):
        assert backend not in loaded, backend
    # Opening on SQLite loads SQLite, and still not PostgreSQL's driver.
    url = f"sqlite:///{tmp_path / 'a.db'}"
    loaded = _loaded_after(
        "import asyncio, agenttx\n"
        "async def main():\n"
        f"    e = await agenttx.Engine.open({url!r}, background=False)\n"
        "    await e.close()\n"
        "asyncio.run(main())"
    )
    assert "agenttx.store.sqlite" in loaded
    assert "agenttx.store.postgres" not in loaded
    assert "psycopg" not in loaded


def test_engine_open_is_the_composition_roots_and_says_so_until_it_is_loaded() -> None:
    code = (
        "import json\n"
        "from agenttx.core.engine import Engine\n"
        "try:\n"
        "    Engine.open\n"
        "except AttributeError as exc:\n"
        "    before = str(exc)\n"
        "import agenttx.app\n"
        "print(json.dumps([before, Engine.open is agenttx.app.open_engine]))\n"
    )
    before, bound = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    assert "use agenttx.Engine.open" in before
    assert bound


def test_the_engine_is_one_class_made_of_parts() -> None:
    assert Engine.__mro__ == (Engine, object)
    assert agenttx.Engine is Engine


async def test_no_part_is_set_after_construction(open_engine: Any) -> None:
    """Everything ``Engine.open`` returns was built by ``__init__``: the same fields as an
    engine constructed directly from the same parts."""
    opened = await open_engine(background=False)
    direct = Engine(opened.store, opened.registry, opened.config, opened.dispatcher)
    assert set(vars(opened)) == set(vars(direct))
    # The parts share the engine's collaborators rather than reaching back to the engine.
    for name, part in vars(opened).items():
        if hasattr(part, "__dict__"):
            assert opened not in vars(part).values(), f"{name} holds the engine"
