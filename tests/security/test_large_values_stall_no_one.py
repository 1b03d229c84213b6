"""Large values within the limits stall no one, over real gRPC against ``agenttx serve``.

The hostile-input suite checks inputs that must be refused; these are calls that must
succeed (or fail as ordinary steps) and are merely big: a 1 MiB argument, a 3 MB file read
back. Each used to hold the server's event loop — the redaction pre-check (0.5-1.9 s), the
SQLite write of the step row, the JSON policy's digit-run regex (up to 1 s on digit runs) —
so another client's ``GetTransaction`` waited that long. Now that client never waits more than
``DELAY_MS`` (the hostile suite's bound and harness, three tries against scheduler noise).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agenttx.wire import agenttx_pb2 as pb
from server_process import start_server
from test_hostile_inputs import DELAY_MS, Server, assert_not_internal, hostile

pytestmark = pytest.mark.serial  # measures time: runs alone, after the parallel run (conftest.py)

N = (1 << 20) - 100  # characters of a value that keeps the arguments under 1 MiB
FILE_BYTES = 3_000_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("large") / "data"
    (data_dir / "files").mkdir(parents=True)
    (data_dir / "files" / "big.txt").write_text("a" * FILE_BYTES)
    process = start_server(data_dir, "--metrics-addr", "off", timeout=60)
    channel = process.channel()
    try:
        yield Server(process, channel, process.stub(channel), data_dir)
    finally:
        channel.close()
        process.terminate()


def value_of(unit: str) -> str:
    return (unit * (N // len(unit) + 1))[:N]


CALLS = {
    "kv.put of 1 MiB of one letter": ("kv.put", {"key": "k", "value": value_of("a")}),
    "kv.put of 1 MiB of digit runs": ("kv.put", {"key": "k", "value": value_of("1" * 99 + "x")}),
    "kv.put of 1 MiB near secret names": ("kv.put", {"key": "k", "value": value_of("acces")}),
    "an unknown tool with 1 MiB": ("no.such_tool", {"value": value_of("a")}),
    "fs.read of a 3 MB file": ("fs.read", {"path": "big.txt"}),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_large_call_does_not_hold_up_another_client(server: Server, name: str) -> None:
    tool, arguments = CALLS[name]
    text = json.dumps(arguments)
    result, worst, _ = hostile(server, server.begin, lambda tx: server.step(tx, 1, tool, text))
    assert_not_internal(result)
    if tool == "no.such_tool":
        assert result.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    else:
        assert result.status == pb.STEP_STATUS_SUCCESS, result.clean_hint
    if tool == "fs.read":
        assert len(json.loads(result.output_json)["contents"]) == FILE_BYTES
    assert worst <= DELAY_MS, f"another client waited {worst:.0f} ms"
