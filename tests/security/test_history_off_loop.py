"""A long history is read and turned into a GetTransaction or ListSteps reply without holding
up other clients.

A 3 MB history of many small objects used to be parsed, its graph rebuilt and every value
encoded again: a second of CPU, and the million values made and freed held the interpreter
in long single pieces. Now the stored texts pass through as they are (``StepView`` parses
only on demand), a long history's rows are fetched off the loop (``load_steps(large=True)``),
a rebuilt graph is freed node by node, and the server hands the interpreter back every
millisecond (``core.offload``). Over real gRPC against ``agenttx serve``: while one client
reads the history, another client's calls (``Probe`` of the hostile-input suite) never wait
more than 100 ms (``DELAY_MS``, in idle-machine time: ``hostile``), and the reply is whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest

from agenttx.wire import agenttx_pb2 as pb
from server_process import start_server
from test_hostile_inputs import DELAY_MS, Server, hostile

pytestmark = pytest.mark.serial  # measures time: runs alone, after the parallel run (conftest.py)

STEPS = 300
# A value of many small objects: what is slowest to encode per byte (~10 KB a step, 3 MB in all).
VALUE = [{"id": i, "name": f"item-{i}", "tags": ["a", "b"]} for i in range(250)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("history") / "data"
    process = start_server(data_dir, "--metrics-addr", "off", timeout=60)
    channel = process.channel()
    try:
        yield Server(process, channel, process.stub(channel), data_dir)
    finally:
        channel.close()
        process.terminate()


@pytest.fixture(scope="module")
def long_history(server: Server) -> str:
    tx = server.begin()
    for n in range(1, STEPS + 1):
        args = json.dumps({"key": f"k{n}", "value": VALUE})
        assert server.step(tx, n, "kv.put", args).status == pb.STEP_STATUS_SUCCESS
    return tx


def test_get_transaction_of_a_long_history_stalls_no_one(server: Server, long_history: str) -> None:
    request = pb.GetTransactionRequest(transaction_id=long_history)
    reply, worst, _ = hostile(
        server, lambda: long_history, lambda tx: server.stub.GetTransaction(request, timeout=30)
    )
    assert not isinstance(reply, grpc.RpcError), reply
    assert reply.next_step_id == STEPS + 1
    assert len(reply.steps) == STEPS
    assert worst <= DELAY_MS, f"another client waited {worst:.0f} ms (bound {DELAY_MS:.0f})"


def test_list_steps_of_a_long_history_stalls_no_one(server: Server, long_history: str) -> None:
    request = pb.ListStepsRequest(transaction_id=long_history, page_size=500)
    page, worst, _ = hostile(
        server, lambda: long_history, lambda tx: server.stub.ListSteps(request, timeout=30)
    )
    assert not isinstance(page, grpc.RpcError), page
    assert page.total_steps == STEPS
    assert len(page.steps) >= 1
    assert json.loads(page.steps[0].arguments_json)["value"] == VALUE
    assert worst <= DELAY_MS, f"another client waited {worst:.0f} ms (bound {DELAY_MS:.0f})"
