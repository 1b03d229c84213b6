"""Where a PostgreSQL store connects: its URL read once, and a failed connection told plainly.

The URL is libpq's, plus two parameters of AgentTx's own (``pool_size``, ``lock_pool_size``),
which are taken out before psycopg sees it. libpq would wait for a connection without limit;
unless the URL says otherwise (``connect_timeout``), a store waits 5 s, so a bad URL fails in
seconds instead of hanging.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from agenttx.errors import InvalidArgument
from agenttx.store.factory import POSTGRES_EXAMPLE, shown_url

CONNECT_TIMEOUT_S = 5


@dataclass(frozen=True, slots=True)
class Target:
    url: str  # as given, password included: never logged (see ``safe_url``)
    dsn: str  # the URL without AgentTx's parameters, for psycopg
    pool_size: int  # query connections
    # Connections that hold calls' transaction locks, a pool of their own: if calls took
    # them from the query pool, pool_size calls in flight would hold every connection and
    # wait forever for one more to run their queries.
    lock_pool_size: int
    connect_timeout_s: float  # how long one connection attempt may take
    # Added to every connection's parameters: the default connect_timeout, unless the URL
    # has its own.
    connect_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, url: str, *, pool_size: int, lock_pool_size: int) -> Target:
        where = f"cannot open PostgreSQL store {shown_url(url)}"
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # e.g. an unclosed [ of an IPv6 address
            raise InvalidArgument(
                f"{where}: the URL cannot be read ({exc}); write it as {POSTGRES_EXAMPLE}"
            ) from None
        query = parse_qs(parts.query)
        pools = _size(query.pop("pool_size", [str(pool_size)])[0], "pool_size", where)
        locks = _size(
            query.pop("lock_pool_size", [str(lock_pool_size)])[0], "lock_pool_size", where
        )
        rest = "&".join(f"{k}={v}" for k, vs in query.items() for v in vs)
        dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment))
        timeout, kwargs = float(CONNECT_TIMEOUT_S), {"connect_timeout": CONNECT_TIMEOUT_S}
        with contextlib.suppress(psycopg.Error, ValueError):  # a bad URL fails when used
            given = conninfo_to_dict(dsn).get("connect_timeout")
            if given is not None:
                # libpq reads 0 as "no limit" and anything below 2 as 2.
                seconds = float(given)
                timeout, kwargs = (max(seconds, 2.0) if seconds > 0 else 30.0), {}
        return cls(url, dsn, pools, locks, timeout, kwargs)

    def safe_url(self) -> str:
        """The URL without password or parameters, for messages."""
        return shown_url(self.url)

    def failure(self, exc: BaseException, *, connected: bool) -> str:
        """Why opening failed and what to do, on one line (libpq spreads its message over
        several); ``connected``: the first connection was made (the failure came after)."""
        if isinstance(exc, psycopg.errors.ConnectionTimeout):
            return (
                f"no answer within {self.connect_timeout_s:g} s ({exc}); the server may be down "
                "or unreachable, or set connect_timeout in the URL to wait longer"
            )
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            then = (
                "the user may not create AgentTx's tables there (it makes them on open): "
                "grant it CREATE on the database, or use a database it owns"
            )
        elif connected:
            then = "AgentTx could not set up its tables in that database"
        elif isinstance(exc, psycopg.ProgrammingError):  # libpq could not read the URL
            then = f"write the URL as {POSTGRES_EXAMPLE} (parameters as libpq names them)"
        else:
            then = (
                "check that the PostgreSQL server is running and reachable from here, and the "
                "URL's host, port, database, user and password"
            )
        return f"{reason}; {then}"


def _size(text: str, name: str, where: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise InvalidArgument(
            f"{where}: the URL's {name} must be a whole number >= 1, got {text!r}"
        )
    return int(text)
