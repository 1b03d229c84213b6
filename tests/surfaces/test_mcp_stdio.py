"""``agenttx mcp`` as an agent app runs it: a subprocess on stdio, driven by the official SDK's
client in both protocol eras (the 2025-11-25 handshake and 2026-07-28 with server/discover),
and by a raw peer for frames no client library sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from mcp_harness import ERAS, MODERN, RawStdio, initialize, stdio_client, structured, text

pytestmark = pytest.mark.parametrize("era", ERAS)

TOOLS = {
    "begin_transaction",
    "run_step",
    "commit_transaction",
    "rollback_transaction",
    "get_transaction",
    "list_tools",
    "list_transactions",
    "preview_commit",
    "approve_commit",
    "refuse_commit",
    # issue 13.6 (the undo and redo rows of tests/surfaces/cases.py)
    "undo_step",
    "redo_step",
    "reconcile_step",
    "compensate_transaction",
    "approve_compensation",
    "refuse_compensation",  # tests/surfaces/test_compensations.py
    "find_transaction",  # served from its row alone (api/mcp/handlers.py)
}


def plan(step: int, learned: bool) -> tuple[str, dict[str, Any]]:
    """Step 2 stores a customer id that step 4 needs to exist (the root-cause scenario)."""
    return {
        1: ("record.insert", {"table": "customers", "id": "c-1"}),
        2: ("kv.put", {"key": "session/customer", "value": "c-1" if learned else "c-404"}),
        3: ("fs.write", {"path": "drafts/${steps.2.value}.json", "contents": "{}"}),
        4: (
            "record.insert",
            {
                "table": "invoices",
                "id": "i-1",
                "fields": {"customer": "${steps.2.value}"},
                "references": {"customer": "customers"},
            },
        ),
    }[step]


async def test_tools_are_listed_with_schemas_annotations_and_instructions(
    era: str, tmp_path: Path
) -> None:
    async with stdio_client(tmp_path / "data", era) as c:
        assert c.protocol_version == (MODERN if era == "auto" else "2025-11-25")
        assert c.instructions is not None
        assert "begin_transaction" in c.instructions
        assert "next_step_id" in c.instructions
        listed = {t.name: t for t in (await c.list_tools()).tools}
    assert set(listed) == TOOLS
    for t in listed.values():
        assert t.title, t.name
        assert t.description, t.name
        assert t.input_schema["type"] == "object"
        assert t.output_schema is not None
        assert t.annotations is not None
        assert t.annotations.title
    for name in ("get_transaction", "list_tools", "list_transactions"):
        a = listed[name].annotations
        assert a is not None
        assert (a.read_only_hint, a.idempotent_hint) == (True, True), name
    commit = listed["commit_transaction"].annotations
    assert commit is not None
    assert commit.destructive_hint is True  # the one destructive act (docs/mcp.md, Tools)
    for name in ("run_step", "commit_transaction"):
        a = listed[name].annotations
        assert a is not None
        assert a.open_world_hint is True, name
    run_step = listed["run_step"].input_schema
    assert run_step["required"] == ["transaction_id", "step_id", "tool"]
    assert set(run_step["properties"]) == {
        "transaction_id",
        "step_id",
        "tool",
        "arguments",
        "reasoning",
        "dry_run",  # issue 13.3
    }


async def test_a_task_with_a_dependency_jump_a_wrong_step_id_and_a_commit(
    era: str, tmp_path: Path
) -> None:
    async with stdio_client(tmp_path / "data", era) as c:
        agenttx_tools = structured(await c.call_tool("list_tools", {}))["tools"]
        kv_put = next(t for t in agenttx_tools if t["name"] == "kv.put")
        assert kv_put["effect"] == "state"
        assert kv_put["input_schema"]["properties"]["key"]
        assert kv_put["example"]["tool"] == "kv.put"

        begun = await c.call_tool("begin_transaction", {"goal": "invoice c-1"})
        tx = structured(begun)["transaction_id"]
        assert f"run_step with transaction_id {tx} and step_id 1" in text(begun)

        learned = False
        rolled_back: list[dict[str, Any]] = []
        next_step = 1
        while next_step <= 4:
            tool, arguments = plan(next_step, learned)
            # As models send them: the step id as text, the arguments as JSON text.
            r = await c.call_tool(
                "run_step",
                {
                    "transaction_id": tx,
                    "step_id": str(next_step),
                    "tool": tool,
                    "arguments": json.dumps(arguments),
                    "reasoning": f"step {next_step} of the plan",
                },
            )
            fields = structured(r)
            assert r.is_error is False, text(r)
            assert fields["ok"] is True
            if fields["status"] == "ROLLBACK_TRIGGERED":
                rolled_back.append(fields)
                assert f"Resume with run_step step_id {fields['next_step_id']}" in text(r)
                assert fields["clean_hint"] in text(r)
                learned = "c-404" in fields["clean_hint"]
            else:
                assert fields["status"] == "SUCCESS"
                assert f"Next: run_step with step_id {next_step + 1}" in text(r)
            next_step = fields["next_step_id"]

        [jump] = rolled_back
        assert (jump["step_id"], jump["strategy"], jump["rollback_to_step"]) == (
            4,
            "DEPENDENCY_JUMP",
            2,
        )
        assert jump["next_step_id"] == 2
        assert jump["error_category"]  # the reference's vocabulary, field 9
        assert jump["constraints"] == [jump["clean_hint"]]

        # The wrong step id: refused, with a continuation naming the expected one.
        wrong = await c.call_tool(
            "run_step", {"transaction_id": tx, "step_id": 9, "tool": "kv.get", "arguments": {}}
        )
        assert wrong.is_error is True
        refusal = structured(wrong)
        assert refusal["ok"] is False
        assert refusal["error"]["code"] == "WRONG_STEP"
        assert refusal["error"]["correlationId"]
        assert refusal["continuation"]["kind"] == "RetryRequest"
        assert "step_id 5" in refusal["continuation"]["instruction"]

        info = structured(await c.call_tool("get_transaction", {"transaction_id": tx}))
        assert (info["status"], info["next_step_id"]) == ("ACTIVE", 5)
        assert next(e["raw_context"] for e in info["context"]) == "step 1 of the plan"

        committed = await c.call_tool("commit_transaction", {"transaction_id": tx})
        assert structured(committed)["committed"] is True
        assert structured(committed)["steps_committed"] == 4
        assert "Committed transaction" in text(committed)

        listed = structured(await c.call_tool("list_transactions", {"status": ["COMMITTED"]}))
        assert [t["transaction_id"] for t in listed["transactions"]] == [tx]


async def test_refusals_carry_continuations_and_protocol_errors_stay_json_rpc(
    era: str, tmp_path: Path
) -> None:
    async with stdio_client(tmp_path / "data", era) as c:
        missing = await c.call_tool(
            "run_step", {"transaction_id": "tx_nope", "step_id": 1, "tool": "kv.get"}
        )
        assert missing.is_error
        cont = structured(missing)["continuation"]
        assert (cont["kind"], cont["tool"]) == ("CallTool", "begin_transaction")

        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        typo = await c.call_tool(
            "run_step", {"transaction_id": tx, "step_id": 1, "tool": "kv.pt", "arguments": {}}
        )
        choose = structured(typo)["continuation"]
        assert choose["kind"] == "ChooseTool"
        assert choose["tools"][0] == "kv.put"
        # No step was spent on the typo.
        info = structured(await c.call_tool("get_transaction", {"transaction_id": tx}))
        assert info["next_step_id"] == 1

        bad = await c.call_tool("run_step", {"transaction_id": tx, "step_id": "one", "tool": "x"})
        assert structured(bad)["continuation"]["kind"] == "ReviseRequest"
        assert "step_id" in structured(bad)["error"]["message"]

        await c.call_tool("rollback_transaction", {"transaction_id": tx, "reason": "done"})
        ended = await c.call_tool(
            "run_step", {"transaction_id": tx, "step_id": 1, "tool": "kv.get", "arguments": {}}
        )
        cont = structured(ended)["continuation"]
        assert (cont["kind"], cont["tool"]) == ("CallTool", "begin_transaction")
        assert "ROLLED_BACK" in cont["instruction"]

        with pytest.raises(MCPError) as unknown:
            await c.call_tool("no_such_tool", {})
        assert unknown.value.code == -32602


async def test_a_tools_progress_reaches_the_caller(era: str, tmp_path: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    async with stdio_client(tmp_path / "data", era) as c:
        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        r = await c.call_tool(
            "run_step",
            {
                "transaction_id": tx,
                "step_id": 1,
                "tool": "test.progress",
                "arguments": {"steps": 3},
            },
            progress_callback=on_progress,
        )
        assert structured(r)["status"] == "SUCCESS"
    assert seen == [(1, 3, "part 1 of 3"), (2, 3, "part 2 of 3"), (3, 3, "part 3 of 3")]


async def test_a_cancelled_run_step_fails_its_step_and_runs_its_undo(
    era: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    started = anyio.Event()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        started.set()  # the tool is running (its undo is registered)

    async with stdio_client(data, era) as c:
        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await c.call_tool(
                    "run_step",
                    {
                        "transaction_id": tx,
                        "step_id": 1,
                        "tool": "test.wait",
                        "arguments": {"marker": "m1"},
                    },
                    progress_callback=on_progress,
                )

            tg.start_soon(call)
            with anyio.fail_after(60):
                await started.wait()
            tg.cancel_scope.cancel()  # the client sends notifications/cancelled
        with anyio.fail_after(60):
            while True:
                info = structured(await c.call_tool("get_transaction", {"transaction_id": tx}))
                if info["steps"] and info["steps"][-1]["status"] == "FAILED":
                    break
                await anyio.sleep(0.05)
    step = info["steps"][-1]
    assert "cancelled by its caller" in step["clean_hint"]
    assert info["status"] == "ACTIVE"
    assert info["next_step_id"] == 1  # the same step may be sent again
    assert (data / "files" / "undone" / "m1").read_text() == "undone"


# ---------------------------------------------------------------------------- raw frames


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"])
async def test_every_handshake_version_is_answered_with_itself(
    era: str, version: str, tmp_path: Path
) -> None:
    if era != "legacy":
        pytest.skip("the handshake is the legacy era's")
    peer = await RawStdio.start(tmp_path / "data")
    try:
        await peer.send(initialize(version))
        reply = await peer.receive()
        assert reply["result"]["protocolVersion"] == version
        assert "tools" in reply["result"]["capabilities"]
        assert "begin_transaction" in reply["result"]["instructions"]
        await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await peer.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        listed = await peer.receive()
        assert {t["name"] for t in listed["result"]["tools"]} == TOOLS
    finally:
        stderr = await peer.close()
    assert "MCP on stdio" in stderr  # logs go to stderr, stdout carried only frames


async def test_malformed_frames_get_json_rpc_errors(era: str, tmp_path: Path) -> None:
    if era != "legacy":
        pytest.skip("one raw run covers both eras' framing")
    peer = await RawStdio.start(tmp_path / "data")
    try:
        await peer.send(initialize("1999-01-01"))  # unknown: the newest handshake version
        assert (await peer.receive())["result"]["protocolVersion"] == "2025-11-25"
        await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await peer.send_line("{not json")
        assert (await peer.receive())["error"]["code"] == -32700
        await peer.send_line("42")
        assert (await peer.receive())["error"]["code"] == -32600
        await peer.send({"jsonrpc": "2.0", "id": 7, "method": "no/such/method"})
        assert (await peer.receive())["error"]["code"] == -32601
    finally:
        await peer.close()


async def test_a_line_over_the_limit_is_refused_without_ending_the_session(
    era: str, tmp_path: Path
) -> None:
    if era != "legacy":
        pytest.skip("one raw run covers both eras' framing")
    peer = await RawStdio.start(tmp_path / "data")
    try:
        await peer.send(initialize("2025-11-25"))
        await peer.receive()
        await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        huge = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"x": "y" * (5 << 20)}}
        await peer.send(huge)
        refused = await peer.receive()
        assert refused["error"]["code"] == -32600
        assert "too large" in refused["error"]["message"]
        await peer.send({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
        assert (await peer.receive())["id"] == 4
    finally:
        await peer.close()


async def test_sigterm_ends_the_session_cleanly(era: str, tmp_path: Path) -> None:
    if era != "legacy":
        pytest.skip("one process lifecycle run is enough")
    import asyncio
    import signal

    peer = await RawStdio.start(tmp_path / "data")
    await peer.send(initialize("2025-11-25"))
    await peer.receive()
    peer.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(peer.proc.wait(), 60) == 0
    assert peer.proc.stderr is not None
    assert "stopped" in (await peer.proc.stderr.read()).decode()


async def read_frames(peer: RawStdio, count: int) -> list[dict[str, Any]]:
    """The next ``count`` stdout lines, of any length (``RawStdio.receive`` reads at most
    64 KiB a line)."""
    import asyncio

    assert peer.proc.stdout is not None
    data = b""
    while data.count(b"\n") < count:
        chunk = await asyncio.wait_for(peer.proc.stdout.read(1 << 16), 60)
        assert chunk, "agenttx mcp closed stdout"
        data += chunk
    return [json.loads(line) for line in data.splitlines()]


async def test_a_reply_bigger_than_the_pipe_reaches_a_slow_reader_whole(
    era: str, tmp_path: Path
) -> None:
    """Replies are written by the event loop (``LoopStdout``): what the pipe cannot take at
    once waits in memory until the reader drains it, and no other reply cuts into it."""
    if era != "legacy":
        pytest.skip("one raw run covers both eras' framing")
    import asyncio

    peer = await RawStdio.start(tmp_path / "data")
    try:
        await peer.send(initialize("2025-11-25"))
        await peer.receive()
        await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"jsonrpc": "2.0", "method": "tools/call"}
        await peer.send({**call, "id": 2, "params": {"name": "begin_transaction", "arguments": {}}})
        tx = (await peer.receive())["result"]["structuredContent"]["transaction_id"]
        value = "v" * 400_000  # six times what a Linux pipe holds
        put = {"transaction_id": tx, "step_id": 1, "tool": "kv.put"}
        put["arguments"] = {"key": "big", "value": value}
        await peer.send({**call, "id": 3, "params": {"name": "run_step", "arguments": put}})
        await peer.send({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
        await asyncio.sleep(1.0)  # a slow reader: the server has had to hold the rest
        frames = {f["id"]: f for f in await read_frames(peer, 2)}
        assert frames[3]["result"]["structuredContent"]["output"]["value"] == value
        assert {t["name"] for t in frames[4]["result"]["tools"]} >= TOOLS
    finally:
        await peer.close()


async def test_a_stdout_redirected_to_a_file_gets_every_reply(era: str, tmp_path: Path) -> None:
    if era != "legacy":
        pytest.skip("one raw run covers both eras' framing")
    import asyncio

    from mcp_harness import mcp_command
    from server_process import TESTS_DIR, server_env

    replies = tmp_path / "replies.jsonl"
    with replies.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *mcp_command(tmp_path / "data"),
            cwd=TESTS_DIR,
            env=server_env(),
            stdin=asyncio.subprocess.PIPE,
            stdout=out,
            stderr=asyncio.subprocess.DEVNULL,
        )
    assert proc.stdin is not None
    lines = [
        initialize("2025-11-25"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    await proc.stdin.drain()
    for _ in range(600):  # both replies written, then the end of the session
        if replies.read_bytes().count(b"\n") >= 2:
            break
        await asyncio.sleep(0.1)
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 60) == 0
    frames = [json.loads(line) for line in replies.read_text().splitlines()]
    assert [f["id"] for f in frames] == [1, 2]
    assert {t["name"] for t in frames[1]["result"]["tools"]} >= TOOLS
