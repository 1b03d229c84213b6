"""A long history is read without holding up other clients: the server on PostgreSQL.

The same two tests as ``test_history_off_loop.py`` (imported from it, so they stay one copy),
with ``agenttx serve --store postgresql://…`` on a fresh database of its own: while one client
reads a 300-step, 3 MB history through ``GetTransaction`` or ``ListSteps``, another client's
calls never wait more than 100 ms (``DELAY_MS``, in idle-machine time). On PostgreSQL the
history's rows come through the driver, not ``sqlite3``: ``load_steps(large=True)`` reads
them on a thread and a synchronous connection of the store's own (``store/postgres_bulk.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pg import fresh_database
from server_process import start_server
from test_history_off_loop import (
    long_history,
    test_get_transaction_of_a_long_history_stalls_no_one,
    test_list_steps_of_a_long_history_stalls_no_one,
)
from test_hostile_inputs import Server

# Measures time: runs alone, after the parallel run (conftest.py). Needs PostgreSQL: fails
# under CI=true if it does not answer, skips with the reason elsewhere (pg.require_postgres).
pytestmark = [pytest.mark.serial, pytest.mark.postgres]

__all__ = [
    "long_history",
    "test_get_transaction_of_a_long_history_stalls_no_one",
    "test_list_steps_of_a_long_history_stalls_no_one",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``agenttx serve`` on a fresh PostgreSQL database, for the module (the history is
    written once); the database is dropped after the server stopped."""
    with fresh_database() as url:
        data_dir = tmp_path_factory.mktemp("history-pg") / "data"
        process = start_server(data_dir, "--store", url, "--metrics-addr", "off", timeout=60)
        channel = process.channel()
        try:
            yield Server(process, channel, process.stub(channel), data_dir)
        finally:
            channel.close()
            process.terminate()
