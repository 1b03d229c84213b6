"""``agenttx`` with its standard output a pipe, as a script or ``| grep`` sees it: plain
lines, no colour, no line wrapped, tables as tab-separated rows with every column and every
cell whole (long agent names, ids, the commands to run next); on a terminal (a pty here) the
same commands keep their tables and colours."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

from agenttx.client import AgentTxClient
from server_process import ServerProcess, agenttx_command, server_env, start_server

# Longer than any terminal line, so a table sized to 80 columns would have to fold or cut it.
AGENT = "billing-agent-of-the-north-american-region-" + "x" * 90
LABEL = "nightly-reconciliation-run-" + "y" * 60


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("piped") / "data")
    with proc.killed_on_error():
        yield proc
    assert proc.terminate() == 0, proc.log_text()


def piped(server: ServerProcess, *args: str) -> str:
    """The command's standard output through a pipe (no COLUMNS: rich would assume 80)."""
    done = subprocess.run(
        agenttx_command(*args, "--server", server.address),
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\x1b[" not in done.stdout  # no colour codes in a pipe
    return done.stdout


@pytest.fixture(scope="module")
def committed(server: ServerProcess) -> str:
    """A committed transaction of AGENT with a label and one released effect."""
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id=AGENT, labels=[LABEL]).transaction_id
        client.execute_step(
            tx,
            1,
            "effect.stage",
            {"channel": "file", "payload": {"n": 1}, "idempotency_key": f"piped-{tx}"},
        )
        client.commit(tx)
    return tx


def test_tx_list_prints_every_column_and_whole_cells(server: ServerProcess, committed: str) -> None:
    lines = piped(server, "tx", "list", "--agent", AGENT).splitlines()
    assert lines[0].split("\t") == [
        "transaction",
        "status",
        "agent",
        "next",
        "updated",
        "labels",
        "reason",
    ]
    (row,) = [line.split("\t") for line in lines[1:-1]]
    assert row[:3] == [committed, "COMMITTED", AGENT]
    assert row[5] == LABEL
    assert lines[-1] == "1 transaction"


def test_effects_list_prints_every_header_and_whole_ids(
    server: ServerProcess, committed: str
) -> None:
    lines = piped(server, "effects", "list", "--tx", committed).splitlines()
    assert lines[0].split("\t") == [
        "id",
        "transaction",
        "step",
        "channel",
        "status",
        "tries",
        "queued",
    ]
    (row,) = [line.split("\t") for line in lines[1:-1]]
    assert row[1:4] == [committed, "1", "file"]


def test_tx_preview_prints_the_command_to_run_on_one_line(server: ServerProcess) -> None:
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="previewer").transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "piped/" + "k" * 100, "value": "v" * 100})
    text = piped(server, "tx", "preview", tx)
    receipt = next(line.split()[1] for line in text.splitlines() if line.startswith("receipt"))
    (command,) = [line for line in text.splitlines() if line.startswith("next: ")]
    assert command == (f"next: agenttx tx commit {tx} --receipt-id {receipt} --expected-revision 2")
    assert f"\n  state  kv/piped/{'k' * 100}: (absent) → " in text  # the key whole, one line


def test_tx_find_prints_its_fields_as_rows_and_its_receipts_as_a_table(
    server: ServerProcess,
) -> None:
    # A command the operation table derives (cli/rows.py) prints as the written ones do.
    with AgentTxClient(server.address) as client:
        tx = client.begin(agent_id="finder").transaction_id
        client.execute_step(tx, 1, "kv.put", {"key": "found", "value": 1})
        receipt = client.preview_commit(tx).receipt_id
        client.commit(tx, receipt_id=receipt)
    lines = piped(server, "tx", "find", "--receipt-id", receipt).splitlines()
    assert lines[0] == "field\tvalue"
    header = next(i for i, line in enumerate(lines) if line.startswith("receipt_id\tstatus\t"))
    facts = dict(line.split("\t") for line in lines[1:header])
    assert facts["transaction.transaction_id"] == tx
    assert facts["transaction.status"] == "COMMITTED"
    assert facts["result.ending"] == "committed"
    assert facts["result.commit_receipt_id"] == receipt
    assert lines[header + 1].split("\t")[0] == receipt
    assert len(lines) == header + 2  # one receipt, one row


def test_json_is_unchanged_by_the_pipe(server: ServerProcess, committed: str) -> None:
    (listed,) = json.loads(piped(server, "tx", "list", "--agent", AGENT, "--json"))
    assert (listed["transaction_id"], listed["agent_id"]) == (committed, AGENT)


def test_a_terminal_keeps_the_table_and_its_colours(server: ServerProcess, committed: str) -> None:
    main, secondary = os.openpty()
    try:
        done = subprocess.run(
            agenttx_command("tx", "list", "--agent", AGENT, "--server", server.address),
            stdout=secondary,
            stderr=subprocess.PIPE,
            timeout=60,
            env=server_env({"COLUMNS": "200"}),
            check=False,
        )
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the pty's other end is closed and everything was read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(main)
    text = b"".join(chunks).decode()
    assert done.returncode == 0, text + done.stderr.decode()
    assert "\x1b[" in text  # coloured
    assert "\t" not in text
    header = next(line for line in text.splitlines() if "transaction" in line)
    assert "status" in header  # one table row, spaced by rich
    assert "agent" in header
    assert "COMMITTED" in text
