"""Shared fixtures: every test gets its own SQLite file and sandbox under tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import agenttx


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
async def open_engine(tmp_path: Path) -> AsyncIterator[Any]:
    """A factory: ``await open_engine(**kwargs)`` opens an engine on this test's database;
    every engine opened is closed at the end."""
    engines: list[agenttx.Engine] = []

    async def factory(**kwargs: Any) -> agenttx.Engine:
        kwargs.setdefault("fs_root", tmp_path / "files")
        kwargs.setdefault("outbox_path", tmp_path / "outbox.jsonl")
        url = kwargs.pop("url", f"sqlite:///{tmp_path / 'agenttx.db'}")
        engine = await agenttx.Engine.open(url, **kwargs)
        engines.append(engine)
        return engine

    yield factory
    for engine in engines:
        await engine.close()


@pytest.fixture
async def engine(open_engine: Any) -> agenttx.Engine:
    return await open_engine()  # type: ignore[no-any-return]
