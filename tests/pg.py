"""PostgreSQL for tests: a fresh database per test on the server at 127.0.0.1:5432.

Tests that need it run whenever it answers; under CI (``CI=true``) it is required, elsewhere
they skip with a visible reason.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator

import pytest

PG_HOST = os.environ.get("AGENTTX_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("AGENTTX_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("AGENTTX_TEST_PG_USER", "postgres")
ADMIN_URL = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/postgres"


def postgres_answers() -> bool:
    try:
        with socket.create_connection((PG_HOST, PG_PORT), timeout=1):
            return True
    except OSError:
        return False


def require_postgres() -> None:
    if postgres_answers():
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required under CI but does not answer on {PG_HOST}:{PG_PORT}")
    pytest.skip(f"PostgreSQL does not answer on {PG_HOST}:{PG_PORT}; start it to run these")


def create_database() -> str:
    import psycopg

    name = f"agenttx_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def url_for(name: str) -> str:
    return f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A URL to a new, empty database, dropped on exit (after whatever used it was closed).
    Fails under CI, skips elsewhere, if PostgreSQL does not answer."""
    require_postgres()
    name = create_database()
    try:
        yield url_for(name)
    finally:
        drop_database(name)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL to a new, empty database, dropped after the test."""
    with fresh_database() as url:
        yield url
