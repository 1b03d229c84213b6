"""The layering rule written in ``agenttx/__init__.py`` holds for every module, and the public
package stays light to import.

The rule is read from that docstring (the table between the ``-- import rule --`` and ``--``
lines), so the documentation and the check cannot drift apart. It is checked twice:
statically, over the imports of every module under ``src/agenttx`` (module level and inside
functions; ``if TYPE_CHECKING:`` blocks are skipped because they never run), and at run time, by
importing every module of a package in a fresh interpreter and looking at what that loaded —
which also catches what a package's ``__init__`` pulls in transitively.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import agenttx

SRC = Path(agenttx.__file__).resolve().parent.parent
PACKAGE = SRC / "agenttx"


@dataclass(frozen=True)
class Rule:
    subject: str  # a package prefix: the rule binds that module and every module under it
    only: bool  # True: "imports only" (AgentTx imports outside `targets` are violations)
    targets: tuple[str, ...]  # prefixes allowed (only) or forbidden (never)


def covers(prefix: str, module: str) -> bool:
    """True iff ``module`` is ``prefix`` or under it (``a.b`` covers ``a.b.c``, not ``a.bc``)."""
    return module == prefix or module.startswith(prefix + ".")


def parse_rules(doc: str) -> list[Rule]:
    """The rules of the table in ``doc``; continuation lines extend the previous rule."""
    match = re.search(r"^\s*-- import rule --\n(.*?)^\s*--\s*$", doc, re.M | re.S)
    assert match, "agenttx/__init__.py's docstring lost its `-- import rule --` table"
    rules: list[Rule] = []
    for line in match.group(1).splitlines():
        words = line.split()
        if not words:
            continue
        head = re.match(r"\s*(\S+)\s+(imports only|never imports)\s+(.*)$", line)
        if head:
            subject, kind, rest = head.groups()
            rules.append(Rule(subject, kind == "imports only", tuple(rest.split())))
        else:
            assert rules, f"a continuation line before any rule: {line!r}"
            last = rules[-1]
            rules[-1] = Rule(last.subject, last.only, last.targets + tuple(words))
    return rules


RULES = parse_rules(agenttx.__doc__ or "")


def violation(rule: Rule, imported: str) -> bool:
    if rule.only:
        return covers("agenttx", imported) and not any(covers(t, imported) for t in rule.targets)
    return any(covers(t, imported) for t in rule.targets)


# ---------------------------------------------------------------- static: what the code says


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node`` that can run: not the body of a TYPE_CHECKING if."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _import_nodes_of(other)
            continue
        yield from _import_nodes_of(child)


def _import_nodes_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _import_nodes(node)


def static_imports(module: str, source: str, lazy: dict[str, str]) -> list[tuple[int, str]]:
    """(line, imported module) for every import in ``source``, resolved to full names.

    ``from P import n`` names the module ``P.n`` when that is a module of ours, else ``P``;
    ``from agenttx import Name`` names the module that ``agenttx.__getattr__`` loads for it.
    """
    is_package = module in MODULES and MODULES[module].name == "__init__.py"
    found: list[tuple[int, str]] = []
    for node in _import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = module.split(".")
            anchor = anchor if is_package else anchor[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            full = f"{base}.{alias.name}"
            if full in MODULES:
                found.append((node.lineno, full))
            elif base == "agenttx" and alias.name in lazy:
                found.append((node.lineno, lazy[alias.name]))
            else:
                found.append((node.lineno, base))
    return found


def static_violations(module: str, source: str) -> list[str]:
    lazy: dict[str, str] = agenttx._LAZY
    out = []
    for rule in RULES:
        if not covers(rule.subject, module):
            continue
        for line, imported in static_imports(module, source, lazy):
            if violation(rule, imported):
                kind = "imports only " + " ".join(rule.targets) if rule.only else "never imports"
                out.append(f"{module}:{line} imports {imported} ({rule.subject} {kind})")
    return out


def test_the_rule_table_names_the_layers_the_issue_fixes() -> None:
    subjects = {rule.subject for rule in RULES}
    assert {"agenttx.core", "agenttx.client", "agenttx.tools", "agenttx.errors"} <= subjects
    assert {"agenttx.types", "agenttx.store", "agenttx.wire"} <= subjects
    assert {"agenttx.logs", "agenttx.redaction"} <= subjects  # logs imports no core (issue 23.5)
    assert {"agenttx.integrations", "agenttx.api"} <= subjects  # the frameworks' layer (issue 25)
    for rule in RULES:  # a rule whose package was moved away would pass without checking anything
        assert any(covers(rule.subject, m) for m in MODULES), f"{rule.subject} has no modules"
        assert rule.targets, rule


def test_every_module_keeps_the_rule_statically() -> None:
    problems = [v for m, p in MODULES.items() for v in static_violations(m, p.read_text("utf-8"))]
    assert not problems, "layering broken:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("agenttx.core.x", "from agenttx.store.sqlite import SqliteStore\n", 1),
        ("agenttx.core.x", "def f():\n    import psycopg\n", 1),  # function level counts
        ("agenttx.core.x", "from ..store import sqlite\n", 1),  # relative, to a module
        ("agenttx.core.x", "from agenttx import AgentTxClient\n", 1),  # through the lazy table
        ("agenttx.core.x", "from agenttx.store.contract import Store\n", 0),
        ("agenttx.core.x", "if TYPE_CHECKING:\n    from agenttx.api import grpc_server\n", 0),
        (
            "agenttx.core.x",
            "if typing.TYPE_CHECKING:\n    pass\nelse:\n    import agenttx.cli\n",
            1,
        ),
        ("agenttx.client._x", "from agenttx.core.hints import clean_hint\n", 1),
        ("agenttx.tools.x", "import agenttx.core.refs\n", 1),
        ("agenttx.errors", "from agenttx.jsontext import compact\n", 1),
        ("agenttx.errors", "import json\nfrom agenttx import types\n", 0),
        ("agenttx.core.x", "from agenttx.effects.dispatcher import OutboxDispatcher\n", 1),
        ("agenttx.core.x", "def f():\n    from agenttx.app import open_engine\n", 1),
        ("agenttx.logs", "from agenttx.core.hints import redact\n", 1),
        ("agenttx.logs", "from agenttx.redaction import redact\n", 0),
        ("agenttx.redaction", "from agenttx.errors import InvalidArgument\n", 1),
        ("agenttx.core.x", "from agenttx.integrations import AgentTransaction\n", 1),
        ("agenttx.api.x", "import agenttx.integrations.langgraph\n", 1),
        ("agenttx.integrations.x", "from agenttx.core.engine import Engine\n", 1),
        ("agenttx.integrations.x", "from agenttx.service import TransactionService\n", 0),
    ],
)
def test_the_static_check_sees_each_kind_of_import(module: str, source: str, expected: int) -> None:
    assert len(static_violations(module, source)) == expected


# ---------------------------------------------------------------- run time: what gets loaded

_PROBE = """
import importlib, json, sys
import agenttx
before = set(sys.modules)
for name in {modules!r}:
    importlib.import_module(name)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _fresh(code: str) -> Any:
    """Run ``code`` in a fresh interpreter (so nothing this process imported counts) and
    return the JSON it printed."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def loaded_by(modules: list[str]) -> list[str]:
    """The modules a fresh interpreter loads to import ``modules`` after ``import agenttx``."""
    loaded: list[str] = _fresh(_PROBE.format(modules=modules))
    return loaded


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.subject)
def test_importing_a_package_loads_nothing_its_rule_forbids(rule: Rule) -> None:
    modules = [m for m in MODULES if covers(rule.subject, m)]
    loaded = loaded_by(modules)
    bad = [m for m in loaded if violation(rule, m) and not covers(rule.subject, m)]
    assert not bad, f"importing {rule.subject} loaded {bad}"


HEAVY = ("agenttx.core", "agenttx.store", "agenttx.embedded", "agenttx.effects", "agenttx.tools")
DRIVERS = ("psycopg", "psycopg_pool", "sqlite3", "_sqlite3")


def test_import_agenttx_client_loads_no_engine_store_or_driver() -> None:
    loaded = _fresh("import sys, json, agenttx.client; print(json.dumps(sorted(sys.modules)))")
    assert "agenttx.client" in loaded
    bad = [m for m in loaded if any(covers(p, m) for p in HEAVY + DRIVERS)]
    assert not bad, f"import agenttx.client loaded {bad}"


def test_import_agenttx_loads_only_the_bottom_layer() -> None:
    """What ``import agenttx`` may load is written in its docstring: errors and types, which
    need the standard library only (no gRPC, protobuf, pydantic, CLI or database driver)."""
    loaded = _fresh("import sys, json, agenttx; print(json.dumps(sorted(sys.modules)))")
    ours = [m for m in loaded if covers("agenttx", m)]
    assert ours == ["agenttx", "agenttx.errors", "agenttx.types"]
    third_party = ("grpc", "google", "pydantic", "click", "rich", "prometheus_client")
    frameworks = ("langgraph", "langchain_core", "agents", "pydantic_ai")  # extras (issue 25)
    bad = [m for m in loaded if any(covers(p, m) for p in third_party + frameworks + DRIVERS)]
    assert not bad, f"import agenttx loaded {bad}"


def test_a_public_name_loads_its_module_on_first_use() -> None:
    code = """
        import sys, json, agenttx
        home = agenttx._LAZY["Engine"]
        first = home in sys.modules
        engine = agenttx.Engine
        print(json.dumps([first, home in sys.modules, engine.__module__]))
    """
    assert _fresh(code) == [False, True, "agenttx"]


def test_the_lazy_table_the_type_checking_block_and_dir_agree() -> None:
    tree = ast.parse((PACKAGE / "__init__.py").read_text("utf-8"))
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom)
                assert stmt.module
                typed.update({alias.name: stmt.module for alias in stmt.names})
    assert typed == agenttx._LAZY
    assert set(agenttx._LAZY) <= set(agenttx.__all__)
    assert set(agenttx.__all__) <= set(dir(agenttx))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        _ = agenttx.NoSuchName  # type: ignore[attr-defined]  # the point of the test
