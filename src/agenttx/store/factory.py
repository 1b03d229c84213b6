"""Choose a store backend from its URL; backends are imported only when asked for.

A URL no backend takes (an unknown scheme, a SQLite URL without a path, PostgreSQL without its
driver) is refused here with ``InvalidArgument``, its message in the form every store's
failure to open has: ``cannot open … store <URL without password>: <why>; <what to do>``.
"""

from __future__ import annotations

from pathlib import Path

from agenttx.errors import InvalidArgument
from agenttx.store.contract import Store

SQLITE_EXAMPLE = "sqlite:///path/to/agenttx.db"
POSTGRES_EXAMPLE = "postgresql://user:password@host:5432/dbname"


def shown_url(url: str) -> str:
    """``url`` as messages show it: without its password and without its parameters (a libpq
    URL may carry ``?password=…``). Never raises, whatever the URL holds."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url.split("?", 1)[0]
    rest = rest.split("?", 1)[0].split("#", 1)[0]
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    if at:
        netloc = f"{userinfo.split(':', 1)[0]}@{host}"
    return f"{scheme}://{netloc}{slash}{path}"


def open_store(url: str, *, sync_writes: bool = False) -> Store:
    """A store for ``url`` (not yet opened): ``sqlite:///relative/or/absolute/path.db`` or
    ``postgresql://user@host:5432/db?pool_size=10``."""
    if url.startswith("sqlite:///"):
        from agenttx.store.sqlite import SqliteStore

        path = url.removeprefix("sqlite:///")
        if not path:
            raise InvalidArgument(
                f"cannot open SQLite store {url}: the URL names no file; write it as "
                f"{SQLITE_EXAMPLE}"
            )
        return SqliteStore(Path(path), sync_writes=sync_writes)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from agenttx.store.postgres import PostgresStore
        except ImportError as exc:
            # The driver is the optional extra `agenttx[postgres]`; any other import error is a bug.
            if not (exc.name or "").startswith("psycopg") and "pq wrapper" not in str(exc):
                raise
            raise InvalidArgument(
                f"cannot open PostgreSQL store {shown_url(url)}: "
                f"{url.split(':', 1)[0]}:// store URLs need the PostgreSQL driver (psycopg), "
                "which is not installed: pip install 'agenttx[postgres]'"
            ) from exc

        return PostgresStore(url)
    if url.startswith("sqlite:"):
        raise InvalidArgument(
            f"cannot open SQLite store {url}: a SQLite URL starts with three slashes; write it "
            f"as sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise InvalidArgument(
        f"cannot open store {shown_url(url)}: unsupported store URL scheme {scheme!r}; use "
        f"{SQLITE_EXAMPLE} or {POSTGRES_EXAMPLE}"
    )
