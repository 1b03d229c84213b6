"""A store that cannot be opened is a start-up error: ``agenttx serve`` exits 1 with one line
(the store, its URL without the password, the driver's reason, what to do) and no traceback;
``Engine.open`` raises ``StartupError`` with the same words, the store's error as its cause.

The cases are the ones a user meets: PostgreSQL on a closed port (no server needed), a URL
libpq cannot read, a user without the right to create tables, a SQLite path under a file, a
directory, a file that is no database, a URL no backend takes, a schema a newer AgentTx
made."""

from __future__ import annotations

import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

import agenttx
from agenttx.errors import AgentTxError, InternalError, InvalidArgument, StartupError
from pg import ADMIN_URL, PG_HOST, PG_PORT, fresh_database
from server_process import agenttx_command, free_port, server_env

PASSWORD = "s3cret-pw"


@dataclass(frozen=True)
class BadStore:
    url: str
    shown: str  # how the message names the store (the URL without its password, or the path)
    reason: str  # the driver's words
    remedy: str  # what to do


def bad_stores(tmp_path: Path) -> dict[str, BadStore]:
    a_file = tmp_path / "plain-file"
    a_file.write_text("not a directory\n")
    a_dir = tmp_path / "a-directory.db"
    a_dir.mkdir()
    not_a_db = tmp_path / "notes.db"
    not_a_db.write_text("these are notes, not a database\n" * 100)
    port = free_port()
    return {
        "postgres closed port": BadStore(
            f"postgresql://agenttx:{PASSWORD}@127.0.0.1:{port}/agenttx",
            f"PostgreSQL store postgresql://agenttx@127.0.0.1:{port}/agenttx",
            "Connection refused",
            "check that the PostgreSQL server is running and reachable from here",
        ),
        "postgres unreadable url": BadStore(
            f"postgresql://agenttx:{PASSWORD}@127.0.0.1:{port}/agenttx?nonsense=1",
            f"PostgreSQL store postgresql://agenttx@127.0.0.1:{port}/agenttx",
            'invalid URI query parameter: "nonsense"',
            "write the URL as postgresql://user:password@host:5432/dbname",
        ),
        "sqlite under a file": BadStore(
            f"sqlite:///{a_file / 'sub' / 'agenttx.db'}",
            f"SQLite store at {a_file / 'sub' / 'agenttx.db'}",
            "Not a directory",
            f"{a_file} is a file, not a directory",
        ),
        "sqlite directory": BadStore(
            f"sqlite:///{a_dir}",
            f"SQLite store at {a_dir}",
            "unable to open database file",
            f"it is a directory: name a file, e.g. {a_dir / 'agenttx.db'}",
        ),
        "sqlite not a database": BadStore(
            f"sqlite:///{not_a_db}",
            f"SQLite store at {not_a_db}",
            "file is not a database",
            "name an AgentTx store, or a file that does not exist yet",
        ),
        "unknown scheme": BadStore(
            f"mysql://agenttx:{PASSWORD}@db/agenttx",
            "store mysql://agenttx@db/agenttx",
            "unsupported store URL scheme 'mysql'",
            "use sqlite:///path/to/agenttx.db or postgresql://",
        ),
    }


CASES = [
    "postgres closed port",
    "postgres unreadable url",
    "sqlite under a file",
    "sqlite directory",
    "sqlite not a database",
    "unknown scheme",
]


def assert_says_it_all(message: str, bad: BadStore) -> None:
    assert message.startswith(f"cannot open {bad.shown}: ")
    assert bad.reason in message
    assert bad.remedy in message
    assert PASSWORD not in message
    assert "\n" not in message


@pytest.mark.parametrize("case", CASES)
def test_serve_on_a_store_it_cannot_open_exits_with_one_line_saying_why(
    tmp_path: Path, case: str
) -> None:
    bad = bad_stores(tmp_path)[case]
    done = subprocess.run(
        agenttx_command(
            "serve",
            "--store",
            bad.url,
            "--data-dir",
            str(tmp_path / "data"),
            "--listen-addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "off",
        ),
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "INTERNAL" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("Error: ")
    assert_says_it_all(lines[0].removeprefix("Error: "), bad)
    assert "serving" not in done.stdout


@pytest.mark.parametrize("case", CASES)
async def test_an_embedded_engine_on_a_store_it_cannot_open_raises_startup_error(
    tmp_path: Path, case: str
) -> None:
    bad = bad_stores(tmp_path)[case]
    with pytest.raises(StartupError) as failed:
        await agenttx.Engine.open(bad.url, fs_root=tmp_path / "files")
    assert_says_it_all(failed.value.message, bad)
    # The store's own error is the cause (a bad URL: InvalidArgument; the driver: Internal).
    cause = failed.value.__cause__
    assert isinstance(cause, InvalidArgument | InternalError)
    assert cause.message == failed.value.message
    if case == "postgres closed port":
        assert isinstance(cause.__cause__, psycopg.OperationalError)


async def test_a_sqlite_store_a_newer_agenttx_made_says_which_release_to_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "future.db"
    engine = await agenttx.Engine.open(f"sqlite:///{path}")
    await engine.close()
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA user_version=999")
    with pytest.raises(StartupError) as failed:
        await agenttx.Engine.open(f"sqlite:///{path}")
    assert failed.value.message.startswith(f"cannot open SQLite store at {path}: ")
    assert "store schema version 999 is newer than this AgentTx" in failed.value.message
    assert "run the AgentTx release that made it (or a newer one)" in failed.value.message


@pytest.fixture
def unprivileged_url() -> Iterator[str]:
    """A fresh database and a role that may log in to it but not create tables there (the
    default for a role that does not own the database, since PostgreSQL 15)."""
    role = f"agenttx_noddl_{uuid.uuid4().hex[:8]}"
    with fresh_database() as url:
        with psycopg.connect(ADMIN_URL, autocommit=True) as c:
            c.execute(f'CREATE ROLE "{role}" LOGIN')
        try:
            yield f"postgresql://{role}:{PASSWORD}@{PG_HOST}:{PG_PORT}/{url.rsplit('/', 1)[1]}"
        finally:
            with psycopg.connect(url, autocommit=True) as c:
                c.execute(f'DROP OWNED BY "{role}"')
            with psycopg.connect(ADMIN_URL, autocommit=True) as c:
                c.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.mark.postgres
async def test_a_postgres_user_that_may_not_create_tables_is_told_what_to_grant(
    unprivileged_url: str, tmp_path: Path
) -> None:
    with pytest.raises(StartupError) as failed:
        await agenttx.Engine.open(unprivileged_url, fs_root=tmp_path / "files")
    message = failed.value.message
    assert "permission denied" in message
    assert "grant it CREATE on the database, or use a database it owns" in message
    assert PASSWORD not in message
    assert isinstance(failed.value.__cause__, AgentTxError)
    assert isinstance(failed.value.__cause__.__cause__, psycopg.errors.InsufficientPrivilege)
