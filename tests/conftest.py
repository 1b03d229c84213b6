"""Shared fixtures: every test gets its own store, sandbox and outbox under ``tmp_path``.

Engine-level tests run on every store backend, as the store contract does
(``store_contract.py``): a test that asks for ``engine``, ``open_engine`` or ``store_url``
runs twice,
``[sqlite]`` on a SQLite file under ``tmp_path`` and ``[postgres]`` on a fresh PostgreSQL
database (``pg.py``; required under ``CI=true``, else a visible skip). All engines a test
opens share its one store, so a test that closes an engine and opens another sees the same
data on both backends.

A test that is about one backend (SQLite files, WAL, fsync counts, a SQLite process crash) or
that picks its stores itself (``url=``) says so with a marker, on the test or the module::

    pytestmark = pytest.mark.stores("sqlite")

``stores(*names)`` lists the backends ``engine``/``open_engine``/``store_url`` run it on
(default: all of ``STORES``). A ``[postgres]`` test also carries the ``postgres`` marker, so
``-m "not postgres"`` leaves only SQLite.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import agenttx
from pg import (
    fresh_database,
    pg_url,  # noqa: F401 - a fixture every test may ask for: a new PG database
)

# The tests live in layer folders (tests/core, tests/store, tests/surfaces, ...). The support
# modules beside this file are found by name from each of them (pytest puts this folder on the
# path for this conftest), and so is a test module that a test of another folder imports.
# So no layer folder may hold a conftest.py of its own: on the path as a top-level
# ``conftest`` it would shadow this one for ``from conftest import …`` (a package folder's,
# ``surfaces.conftest``, does not).
_TESTS = Path(__file__).resolve().parent
sys.path[:0] = [str(d) for d in sorted(_TESTS.iterdir()) if d.is_dir() and d.name.isidentifier()]
# The framework suites' shared checks (tests/integrations/scenarios.py) assert as tests do:
# rewritten, so a failing check shows its values; registered before any test imports them.
pytest.register_assert_rewrite("scenarios")

STORES = ("sqlite", "postgres")

# The top-level module of each framework extra (pyproject.toml), as an import names it.
FRAMEWORK_EXTRAS = {
    "langgraph": "langgraph",
    "langchain_core": "langgraph",
    "agents": "openai-agents",
    "pydantic_ai": "pydantic-ai",
    "fastmcp": "pydantic-ai",
}


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """A test module that cannot be imported because a framework extra is not installed is
    skipped, saying which extra to install; under ``CI=true``, where every extra is, that
    stays the error it is (the tests of the frameworks never skip in CI)."""
    report = yield
    if report.failed and isinstance(collector, pytest.Module) and not _in_ci():
        said = str(report.longrepr)
        # The framework's own module missing, or agenttx.integrations.<framework> saying so.
        named = re.search(r"pip install 'agenttx\[([\w-]+)\]'", said)
        missing = [x for m, x in FRAMEWORK_EXTRAS.items() if f"No module named '{m}'" in said]
        extra = missing[0] if missing else named[1] if named else ""
        if extra:
            report.outcome = "skipped"
            report.longrepr = (
                str(collector.path),
                0,
                f"Skipped: the {extra} extra is not installed "
                f"(pip install 'agenttx[{extra}]', or make test)",
            )
    return report


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"  # as pg.py reads it


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "stores(*names): the store backends (sqlite, postgres) the engine and open_engine "
        "fixtures run this test on; default all",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_backend" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("stores")
    names = tuple(marker.args) if marker else STORES
    unknown = set(names) - set(STORES)
    if unknown or not names:
        raise pytest.UsageError(f"stores({', '.join(names)}): backends are {', '.join(STORES)}")
    metafunc.parametrize(
        "store_backend",
        [
            pytest.param(name, id=name, marks=[pytest.mark.postgres] if name == "postgres" else [])
            for name in names
        ],
        indirect=True,
    )


class FakeClock:
    """A clock tests move by hand instead of sleeping."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agenttx.db'}"


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str:
    """The backend this run of the test uses (set by ``pytest_generate_tests``)."""
    return str(request.param)


@pytest.fixture
def store_url(store_backend: str, tmp_path: Path) -> Iterator[str]:
    """This test's store: a SQLite file under ``tmp_path``, or a new PostgreSQL database
    dropped after the test (after every engine on it was closed)."""
    if store_backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'agenttx.db'}"
        return
    with fresh_database() as url:
        yield url


@pytest.fixture
async def open_engine(store_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    """A factory: ``await open_engine(**kwargs)`` opens an engine on this test's store (or on
    ``url=`` if given); every engine opened is closed at the end."""
    engines: list[agenttx.Engine] = []

    async def factory(**kwargs: Any) -> agenttx.Engine:
        kwargs.setdefault("fs_root", tmp_path / "files")
        kwargs.setdefault("outbox_path", tmp_path / "outbox.jsonl")
        url = kwargs.pop("url", None) or store_url
        engine = await agenttx.Engine.open(url, **kwargs)
        engines.append(engine)
        return engine

    yield factory
    for engine in engines:
        await engine.close()


@pytest.fixture
async def engine(open_engine: Any) -> agenttx.Engine:
    return await open_engine()  # type: ignore[no-any-return]
