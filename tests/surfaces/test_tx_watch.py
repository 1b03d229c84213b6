"""``agenttx tx watch <id>`` follows a transaction live: each revision and each step attempt
(with the rewind and root cause of a failure) as it lands, until the transaction ends."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agenttx.client import AgentTxClient
from server_process import ServerProcess, agenttx_command, server_env, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # cluster_tools: cluster.slow_note, an outside step that stays RUNNING a while.
    proc = start_server(tmp_path_factory.mktemp("watch") / "data", "--tools", "cluster_tools")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0


def _watch(server: ServerProcess, tx: str, out: Path, *args: str) -> subprocess.Popen[bytes]:
    with out.open("wb") as sink:
        return subprocess.Popen(
            agenttx_command("tx", "watch", tx, "--server", server.address, *args),
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=server_env({"COLUMNS": "200"}),
        )


def _wait_for(out: Path, text: str, timeout: float = 60) -> None:
    # 60 s: the watcher is a new CLI process; its imports alone take 10+ s on a busy machine.
    deadline = time.monotonic() + timeout
    while text not in out.read_text():
        assert time.monotonic() < deadline, out.read_text()
        time.sleep(0.05)


def test_watch_prints_each_change_and_ends_with_the_transaction(
    server: ServerProcess, tmp_path: Path
) -> None:
    out = tmp_path / "watch.txt"
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="watched").transaction_id
        proc = _watch(server, tx, out)
        _wait_for(out, "rev 1")  # the current state first
        client.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 7}})
        client.execute_step(tx, 2, "record.get", {"table": "users", "id": "${steps.1.value.id}"})
        client.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 8}})
        client.commit(tx)
    assert proc.wait(timeout=60) == 0
    text = out.read_text()
    assert "step 1.1 kv.put SUCCESS" in text
    assert "step 2.1 record.get FAILED Hint:" in text
    assert "DEPENDENCY_JUMP to step 1 (root cause: step 1)" in text
    assert text.rstrip().splitlines()[-1].split()[4] == "COMMITTED"


def test_watch_prints_a_step_running_then_its_success_its_undo_and_aligned_rows(
    server: ServerProcess, tmp_path: Path
) -> None:
    out = tmp_path / "watch.txt"
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="watched").transaction_id
        proc = _watch(server, tx, out)
        _wait_for(out, "rev 1")
        slow = threading.Thread(
            target=client.execute_step,
            args=(tx, 1, "cluster.slow_note", {"name": "watched", "seconds": 4}),
        )
        slow.start()
        _wait_for(out, "step 1.1 cluster.slow_note RUNNING")
        slow.join()
        _wait_for(out, "step 1.1 cluster.slow_note SUCCESS")
        client.execute_step(tx, 2, "kv.put", {"key": "k", "value": 1})
        client.undo_step(tx)
        _wait_for(out, "step 2.1 kv.put undone")
        client.rollback(tx)  # compensates step 1: ROLLING_BACK, then ROLLED_BACK
    assert proc.wait(timeout=60) == 0
    text = out.read_text()
    assert "step 1.1 cluster.slow_note undone" in text
    rows = [line for line in text.splitlines() if re.match(r"\d{4}-\d\d-\d\d ", line)]
    assert any(" ROLLING_BACK " in row for row in rows), text
    # Every row's columns start where the others' do, whatever the status and its colour.
    assert len({row.index(" next step ") for row in rows}) == 1, text
    assert len({row.index(" rev ") for row in rows}) == 1, text


def test_watch_json_prints_one_object_per_event(server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "watch.jsonl"
    with AgentTxClient(server.address) as client:
        tx = client.begin().transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
        proc = _watch(server, tx, out, "--json")
        _wait_for(out, '"revision": 2')
        client.rollback(tx)
    assert proc.wait(timeout=60) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["event"]["revision"] for e in lines] == [2, 3]
    assert [s["tool_name"] for s in lines[0]["steps"]] == ["kv.put"]
    assert lines[-1]["event"]["status"] == "ROLLED_BACK"


def test_watching_an_unknown_transaction_fails_with_its_reason(server: ServerProcess) -> None:
    done = subprocess.run(
        agenttx_command("tx", "watch", "tx_missing", "--server", server.address),
        capture_output=True,
        text=True,
        timeout=30,
        env=server_env(),
        check=False,
    )
    assert done.returncode == 1
    assert "NOT_FOUND" in done.stderr
