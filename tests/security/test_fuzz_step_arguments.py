"""A hypothesis fuzzer over ExecuteStep arguments and references, over real gRPC.

Each example begins a transaction on ``agenttx serve`` (a subprocess, built-in tools), makes
step 1 a ``kv.put`` of a generated JSON value, then sends step 2: a generated tool name and
generated arguments — JSON values of every kind and size class (huge integers, non-finite
numbers, deep nesting, text with escapes and lone surrogate escapes), references into step 1
with generated paths, escapes, interpolations and malformed references — as JSON text that
may also be damaged (cut short, a byte order mark, a stray character, wrapped in brackets).

Whatever is sent, the server must answer within a bound, never with INTERNAL or UNKNOWN; a
successful step's output must be JSON the policy accepts; and the transaction's history must
stay readable (``GetTransaction``, ``ListSteps``). CI runs a bounded number of examples;
``AGENTTX_STRESS=1`` runs many more.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenttx import jsonpolicy
from agenttx.wire import agenttx_pb2 as pb
from server_process import ServerProcess, start_server

STRESS = os.environ.get("AGENTTX_STRESS") == "1"
EXAMPLES = 600 if STRESS else 40
ANSWER_S = 10.0
REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}

TOOLS = [
    "kv.put",
    "kv.get",
    "kv.delete",
    "record.insert",
    "record.get",
    "fs.write",
    "fs.read",
    "effect.stage",
    "no.such_tool",
]
KEYS = ["key", "value", "path", "contents", "channel", "payload", "table", "id", "fields"]


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    process: ServerProcess = start_server(
        tmp_path_factory.mktemp("fuzz") / "data", "--metrics-addr", "off", timeout=60
    )
    channel = process.channel()
    try:
        yield process.stub(channel)
    finally:
        channel.close()
        process.terminate()


segments = st.sampled_from(
    ["key", "value", "0", "1", "2", "a", "", "\n", " ", "x" * 300, "9" * 30, "é", "${"]
)
references = st.builds(
    lambda step, path: "${steps." + str(step) + "".join("." + p for p in path) + "}",
    st.sampled_from([0, 1, 2, 3, 10**20]),
    st.lists(segments, max_size=4),
)
reference_texts = st.one_of(
    references,
    st.builds(lambda a, r, b: a + r + b, st.text(max_size=5), references, st.text(max_size=5)),
    st.sampled_from(["$${steps.1}", "${steps", "${steps.1.", "${steps.x}", "${HOME}", "$$${"]),
    st.lists(references, min_size=2, max_size=6).map("".join),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**95, max_value=10**130),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    reference_texts,
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), children, max_size=5),
    ),
    max_leaves=25,
)
arguments = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=4)


def damaged(text: str, how: int, where: float, depth: int) -> str:
    cut = int(len(text) * where)
    if how == 1:
        return text[:cut]
    if how == 2:
        return "\ufeff" + text
    if how == 3:
        return text[:cut] + "\\ud800" + text[cut:]
    if how == 4:
        return "[" * depth + text + "]" * depth
    if how == 5:
        return text[:cut] + "\x00" + text[cut:]
    return text


def call(fn: Any, request: Any) -> Any:
    try:
        return fn(request, timeout=ANSWER_S)
    except grpc.RpcError as exc:
        refused = exc
    assert refused.code() in REFUSALS, (refused.code(), refused.details())
    return None


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    first=json_values,
    tool=st.sampled_from(TOOLS),
    args=arguments,
    how=st.integers(0, 6),
    where=st.floats(0, 1),
    depth=st.sampled_from([1, 63, 65, 2000]),
)
def test_no_arguments_or_references_make_the_server_fail(
    stub: Any, first: Any, tool: str, args: dict[str, Any], how: int, where: float, depth: int
) -> None:
    tx = stub.BeginTransaction(pb.BeginTransactionRequest(agent_id="fuzz")).transaction_id
    one = json.dumps({"key": "k", "value": first})
    call(
        stub.ExecuteStep,
        pb.ExecuteStepRequest(transaction_id=tx, step_id=1, tool_name="kv.put", arguments_json=one),
    )
    info = stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx), timeout=ANSWER_S)
    text = damaged(json.dumps(args, ensure_ascii=bool(how % 2)), how, where, depth)
    reply = call(
        stub.ExecuteStep,
        pb.ExecuteStepRequest(
            transaction_id=tx,
            step_id=info.next_step_id,
            tool_name=tool,
            arguments_json=text,
        ),
    )
    if reply is not None:
        assert reply.status != pb.STEP_STATUS_UNSPECIFIED
        if reply.status == pb.STEP_STATUS_SUCCESS:
            jsonpolicy.parse(reply.output_json)  # what a tool returned keeps the policy
        else:
            assert reply.clean_hint.startswith("Hint: ")
    info = stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx), timeout=ANSWER_S)
    page = stub.ListSteps(pb.ListStepsRequest(transaction_id=tx), timeout=ANSWER_S)
    assert page.total_steps == len(info.steps)
    for record in page.steps:
        for field in (record.arguments_json, record.output_json):
            if field:
                json.loads(field)  # history is JSON (unparseable text shown as a string)
