"""Choose a store backend from its URL; backends are imported only when asked for."""

from __future__ import annotations

from pathlib import Path

from agenttx.errors import InvalidArgument
from agenttx.store.contract import Store


def open_store(url: str, *, sync_writes: bool = False) -> Store:
    """A store for ``url`` (not yet opened): ``sqlite:///relative/or/absolute/path.db`` or
    ``postgresql://user@host:5432/db?pool_size=10``."""
    if url.startswith("sqlite:///"):
        from agenttx.store.sqlite import SqliteStore

        path = url.removeprefix("sqlite:///")
        if not path:
            raise InvalidArgument("sqlite URL needs a file path: sqlite:///path/to/agenttx.db")
        return SqliteStore(Path(path), sync_writes=sync_writes)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from agenttx.store.postgres import PostgresStore
        except ImportError as exc:
            # The driver is the optional extra `agenttx[postgres]`; any other import error is a bug.
            if not (exc.name or "").startswith("psycopg") and "pq wrapper" not in str(exc):
                raise
            raise InvalidArgument(
                f"{url.split(':', 1)[0]}:// store URLs need the PostgreSQL driver (psycopg), "
                "which is not installed: pip install 'agenttx[postgres]'"
            ) from exc

        return PostgresStore(url)
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise InvalidArgument(
        f"unsupported store URL scheme {scheme!r}; use sqlite:///path/to/agenttx.db or "
        "postgresql://user@host:5432/dbname"
    )
