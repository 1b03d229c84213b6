"""A PostgreSQL URL that cannot work fails in seconds, saying why.

The pool used to retry a bad URL for 30 s and then report only that it timed out. Now the
store connects once before any pool, so the driver's reason (refused connection, missing
database, unknown role) reaches the caller at once, with the driver's error as the cause.
"""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from agenttx.core.engine import Engine
from agenttx.errors import InternalError, InvalidArgument
from agenttx.server import ServeConfig, StartupError, start
from agenttx.store.postgres import PostgresStore
from pg import PG_HOST, PG_PORT, PG_USER, require_postgres
from server_process import free_port  # a port nothing listens on: a refused connection

FAST_S = 5.0  # "a few seconds"; the cases below fail in well under one


async def open_failure(url: str) -> tuple[InternalError, float]:
    store = PostgresStore(url)
    started = time.monotonic()
    with pytest.raises(InternalError) as caught:
        await store.open()
    elapsed = time.monotonic() - started
    # Nothing is left open: no pool keeps retrying in the background.
    assert store._pool is None
    assert store._locks is None
    return caught.value, elapsed


async def test_a_closed_port_fails_at_once_with_the_drivers_reason() -> None:
    port = free_port()
    error, elapsed = await open_failure(f"postgresql://agenttx:s3cret@127.0.0.1:{port}/agenttx")
    assert elapsed < FAST_S
    assert "Connection refused" in error.message
    assert f"postgresql://agenttx@127.0.0.1:{port}/agenttx" in error.message
    assert "s3cret" not in error.message  # the password never appears
    assert isinstance(error.__cause__, psycopg.OperationalError)
    assert "\n" not in error.message  # one line, for logs and the CLI


@pytest.mark.postgres
async def test_a_missing_database_fails_at_once_naming_it() -> None:
    require_postgres()
    name = f"agenttx_missing_{uuid.uuid4().hex[:8]}"
    error, elapsed = await open_failure(f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}")
    assert elapsed < FAST_S
    assert f'database "{name}" does not exist' in error.message
    assert isinstance(error.__cause__, psycopg.OperationalError)


@pytest.mark.postgres
async def test_an_unknown_role_fails_at_once_naming_it() -> None:
    require_postgres()
    role = f"nobody_{uuid.uuid4().hex[:8]}"
    error, elapsed = await open_failure(f"postgresql://{role}@{PG_HOST}:{PG_PORT}/postgres")
    assert elapsed < FAST_S
    assert f'role "{role}"' in error.message


async def test_an_engine_on_a_bad_url_raises_the_reason(tmp_path: Path) -> None:
    started = time.monotonic()
    # A start-up error (docs/stores.md), the store's InternalError as its cause.
    with pytest.raises(StartupError, match="Connection refused"):
        await Engine.open(
            f"postgresql://agenttx@127.0.0.1:{free_port()}/agenttx", fs_root=tmp_path / "f"
        )
    assert time.monotonic() - started < FAST_S


async def test_serve_on_a_bad_store_url_stops_with_the_reason(tmp_path: Path) -> None:
    url = f"postgresql://agenttx@127.0.0.1:{free_port()}/agenttx"
    started = time.monotonic()
    with pytest.raises(StartupError, match="Connection refused"):
        await start(
            ServeConfig(
                listen_addr="127.0.0.1:0", data_dir=tmp_path / "d", store=url, metrics_addr=None
            )
        )
    assert time.monotonic() - started < FAST_S


async def test_a_server_that_never_answers_times_out_in_seconds() -> None:
    # A socket that takes connections and says nothing: what a hung host looks like.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgresql://agenttx@127.0.0.1:{silent.getsockname()[1]}/agenttx"
        error, elapsed = await open_failure(url)
        assert 4.5 < elapsed < FAST_S + 2  # the default bound, 5 s, not the pool's 30 s
        assert "no answer within 5 s" in error.message
        assert isinstance(error.__cause__, psycopg.errors.ConnectionTimeout)
        # The URL's own connect_timeout wins (libpq counts at least 2 s).
        error, elapsed = await open_failure(url + "?connect_timeout=2")
        assert elapsed < 4.5
        assert "no answer within 2 s" in error.message


@pytest.mark.parametrize("query", ["pool_size=abc", "pool_size=0", "lock_pool_size=-2"])
def test_a_bad_pool_size_in_the_url_is_refused_by_name(query: str) -> None:
    name = query.split("=")[0]
    with pytest.raises(InvalidArgument, match=f"{name} must be a whole number"):
        PostgresStore(f"postgresql://agenttx@127.0.0.1:5432/agenttx?{query}")
