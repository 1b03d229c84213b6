"""No value a client sends makes a log line long: a 1 MB tool name or transaction id, a run of
NULs that grows sixfold when escaped, a huge message argument or exception text are each cut
to a prefix and their byte count, in both log formats (``agenttx.logs.cap_field``)."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from agenttx import logs
from agenttx.wire import agenttx_pb2 as pb
from server_process import start_server

MB = 1 << 20
# A line holds a dozen fields at most: capped, they stay far under this.
LINE_BOUND = 24 * 1024


def _log_both(emit: Callable[[], None]) -> dict[str, str]:
    """What ``emit()`` logs, per format."""
    root = logging.getLogger("agenttx")
    saved = (list(root.handlers), root.level, root.propagate)
    out: dict[str, str] = {}
    try:
        for fmt in ("text", "json"):
            stream = io.StringIO()
            logs.configure(fmt, "info", stream)
            emit()
            out[fmt] = stream.getvalue()
    finally:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]
    return out


def test_a_megabyte_field_is_a_prefix_and_its_byte_count() -> None:
    log = logging.getLogger("agenttx.test")
    name = "t" * MB
    lines = _log_both(lambda: log.info("refused", extra={"tool_name": name, "step_id": 3}))
    for fmt, text in lines.items():
        assert len(text.encode()) < 2 * logs.MAX_LOG_FIELD_BYTES, fmt
        assert f"… ({MB} bytes)" in text, fmt
        assert "ttttttttttttttttttttttttttttttttttttttttt" in text, fmt  # the prefix stays
    record = json.loads(lines["json"])
    assert record["step_id"] == 3  # numbers are not touched
    assert len(record["tool_name"].encode()) <= logs.MAX_LOG_FIELD_BYTES


def test_nuls_cannot_amplify_a_line() -> None:
    """512 KiB of NULs would be 3 MB as ``\\u0000`` escapes: the cap counts the escapes."""
    log = logging.getLogger("agenttx.test")
    nuls = "\x00" * (MB // 2)
    lines = _log_both(lambda: log.info("refused", extra={"transaction_id": nuls}))
    for fmt, text in lines.items():
        assert len(text.encode()) < 2 * logs.MAX_LOG_FIELD_BYTES, (fmt, len(text))
        assert f"({MB // 2} bytes)" in text
        assert "\x00" not in text  # escaped in text mode too: no raw control character
    assert "\\u0000" in lines["text"]


def test_message_arguments_the_message_and_a_traceback_are_capped() -> None:
    log = logging.getLogger("agenttx.test")

    def emit() -> None:
        log.warning("tool %s of %d refused", "x" * MB, 7)
        log.warning("unknown id %r", {"id": "y" * MB})
        try:
            raise ValueError("z" * MB)
        except ValueError:
            log.exception("failed")

    for fmt, text in _log_both(emit).items():
        assert len(text.encode()) < logs.MAX_LOG_TRACEBACK_BYTES + 3 * LINE_BOUND, fmt
        assert "of 7 refused" in text  # a number stays a number for %d
        # The string argument, and the value in the mapping (logging takes a lone mapping
        # as the arguments themselves, for "%(name)s").
        assert text.count(f"({MB} bytes)") == 2, fmt
        assert "ValueError: zzz" in text
        assert "Traceback" in text


def test_a_structured_field_is_capped_as_its_json_text() -> None:
    log = logging.getLogger("agenttx.test")
    keys = [f"key-{i}" for i in range(100_000)]
    lines = _log_both(lambda: log.info("conflict", extra={"keys": keys, "small": ["a", "b"]}))
    record = json.loads(lines["json"])
    assert record["small"] == ["a", "b"]  # a value that fits keeps its shape
    assert record["keys"].startswith('["key-0", "key-1"')
    assert record["keys"].endswith(" bytes)")
    assert len(lines["text"].encode()) < 2 * logs.MAX_LOG_FIELD_BYTES


def test_values_within_the_cap_are_written_as_before() -> None:
    assert logs.cap_field("tx_0123") == "tx_0123"
    assert logs.cap_field(1.5) == 1.5
    assert logs.cap_field(None) is None
    fits = "é" * (logs.MAX_LOG_FIELD_BYTES // 2)  # 2 bytes each: exactly the cap
    assert logs.cap_field(fits) == fits
    assert logs.cap_field(fits + "é").endswith(f"… ({len(fits.encode()) + 2} bytes)")
    # A lone surrogate (6 bytes as written) counts as 6, and the count uses surrogatepass.
    assert logs.cap_text("\ud800" * 200).endswith("(600 bytes)")


def test_a_real_server_logs_a_megabyte_tool_name_and_id_capped(tmp_path: Path) -> None:
    """The call log of a refused ExecuteStep quotes the request's transaction id and tool
    name: a client's 1 MB of either (and NULs) makes a short line, not a 1 MB one."""
    server = start_server(tmp_path / "data")
    with server.killed_on_error():
        with server.channel() as channel:
            stub = server.stub(channel)
            for tx, tool in (("x" * MB, "t" * MB), ("\x00" * (MB // 2), "\x00" * (MB // 2))):
                with pytest.raises(grpc.RpcError) as refused:
                    stub.ExecuteStep(
                        pb.ExecuteStepRequest(
                            transaction_id=tx, step_id=1, tool_name=tool, arguments_json="{}"
                        ),
                        timeout=30,
                    )
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        deadline = time.monotonic() + 30  # the call's line is written after its reply
        while len(calls := [r for r in server.log_records() if r.get("rpc") == "ExecuteStep"]) < 2:
            assert time.monotonic() < deadline, server.log_text()[:2000]
            time.sleep(0.05)
        text = server.log_text()
        assert all(len(line.encode()) < LINE_BOUND for line in text.splitlines())
        assert calls[0]["tool_name"].endswith(f"… ({MB} bytes)")
        assert calls[0]["transaction_id"].endswith(f"… ({MB} bytes)")
        assert calls[1]["transaction_id"].endswith(f"… ({MB // 2} bytes)")
    assert server.terminate() == 0
