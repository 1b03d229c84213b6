"""schemathesis over the running server's ``/openapi.json``: a real ``agenttx serve
--http-addr --api-keys`` and the ``schemathesis`` command against it, every check on (the
examples, coverage, fuzzing and stateful phases; valid and invalid requests; no 5xx; replies,
headers and statuses as documented; a 405 names the methods in ``Allow``; a request without
the key is refused), so the document says exactly what the server takes and returns; and
once more against a server without keys, whose document differs (no bearer scheme, a begin
names who acts).

Bounded for the suite: ``AGENTTX_SCHEMATHESIS_EXAMPLES`` (default 4, 100 with
``AGENTTX_STRESS=1``) examples per operation,
derandomized (``--generation-deterministic``: the same cases every run). The event streams
stay open while their transaction does, so they get a run of their own without the stateful
phase (which would watch open transactions), and ``test_event_streams_match_their_schema``
reads a whole stream, event by event, against the document's event schema.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agenttx.auth.keys import new_secret
from http_harness import http_base, request, sse_events, start_http_server
from keyed_server import key_file
from server_process import TESTS_DIR, ServerProcess

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("schemathesis")

# Per suite, as the model and MCP fuzzers have theirs; AGENTTX_STRESS=1 searches long (100
# examples: all three runs took 3.5 min on a quiet 2-core machine and found nothing).
STRESS = os.environ.get("AGENTTX_STRESS") == "1"
EXAMPLES = int(os.environ.get("AGENTTX_SCHEMATHESIS_EXAMPLES", "100" if STRESS else "4"))
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


@dataclass
class Keyed:
    server: ServerProcess
    base: str
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    root = tmp_path_factory.mktemp("schemathesis")
    key = new_secret()
    (root / "keys.toml").write_text(key_file({"ops": (key, "acme", "admin")}))
    proc = start_http_server(root / "data", "--api-keys", str(root / "keys.toml"))
    with proc.killed_on_error():
        yield Keyed(proc, http_base(proc), key)
        assert "Traceback" not in proc.log_text()
    assert proc.terminate() == 0


def _schemathesis(keyed: Keyed, cwd: Path, *args: str, request_timeout: float = 30) -> str:
    """One ``schemathesis run`` with every check, bounded and derandomized; its summary."""
    command = [
        str(SCHEMATHESIS),
        "run",
        f"{keyed.base}/openapi.json",
        *(("--header", f"Authorization: Bearer {keyed.key}") if keyed.key else ()),
        "--checks",
        "all",
        # Replaced by the hook's documented_requests_accepted (its docstring says why).
        "--exclude-checks",
        "positive_data_acceptance",
        "--max-examples",
        str(EXAMPLES),
        "--generation-deterministic",  # and no example database
        "--workers",
        "1",
        "--request-timeout",
        str(request_timeout),
        "--no-color",
        *args,
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks", "PYTHONPATH": str(TESTS_DIR)}
    run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-4000:]
    summary = run.stdout[run.stdout.index("SUMMARY") :]
    print(summary)  # what ran, in the test's log (pytest -s or a failure)
    return summary


def test_schemathesis_finds_nothing(keyed: Keyed, tmp_path: Path) -> None:
    summary = _schemathesis(keyed, tmp_path, "--exclude-path-regex", "/events$")
    # Every operation but the two streams ran, in every phase (the document has no examples).
    assert "Tested: 23" in summary, summary
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in summary, summary


def test_schemathesis_finds_nothing_without_keys(tmp_path: Path) -> None:
    # The document of a server without keys: no bearer scheme, and a begin names who acts.
    proc = start_http_server(tmp_path / "data")
    with proc.killed_on_error():
        open_server = Keyed(proc, http_base(proc), "")
        summary = _schemathesis(open_server, tmp_path, "--exclude-path-regex", "/events$")
        assert "Tested: 23" in summary, summary
    assert proc.terminate() == 0


def test_schemathesis_finds_nothing_in_the_streams(keyed: Keyed, tmp_path: Path) -> None:
    # No stateful phase: it would watch the open transactions the other run made, and such a
    # stream sends nothing until its transaction changes. A stream schemathesis cuts at its
    # request timeout (/v1/events never ends) is judged on what it read.
    summary = _schemathesis(
        keyed,
        tmp_path,
        "--include-path-regex",
        "/events$",
        "--phases",
        "coverage,fuzzing",
        request_timeout=3,
    )
    assert "Tested: 2" in summary, summary


def _event_schema(document: dict[str, Any], path: str) -> dict[str, Any]:
    content = document["paths"][path]["get"]["responses"]["200"]["content"]
    return dict(content["text/event-stream"]["schema"])


def _check_event(document: dict[str, Any], schema: dict[str, Any], event: dict[str, Any]) -> None:
    """One event as schemathesis reads it (``event``, ``id``, ``data`` as text) against the
    document's event schema, and its ``data`` against the schema the event's kind names."""
    resolver = {**schema, "components": document["components"]}
    jsonschema.validate(event, resolver)
    [kind] = [k for k in schema["oneOf"] if k["properties"]["event"]["const"] == event["event"]]
    data = kind["properties"]["data"]
    assert data["contentMediaType"] == "application/json"
    jsonschema.validate(
        json.loads(event["data"]), {**data["contentSchema"], "components": document["components"]}
    )


def test_event_streams_match_their_schema(keyed: Keyed) -> None:
    base = keyed.base
    document = request(base, "GET", "/openapi.json").json
    assert document["security"] == [{"apiKey": []}]
    tx = request(base, "POST", "/v1/transactions", {}, headers=keyed.auth).json["transaction_id"]
    path = "/v1/transactions/{transaction_id}/events"
    schema = _event_schema(document, path)
    # Watched from its start: its state, the step, the commit; the stream ends with it.
    stream = _raw_events(base, f"/v1/transactions/{tx}/events", keyed.auth)
    events = [next(stream)]
    step = {"step_id": 1, "tool_name": "kv.put", "arguments": {"key": "k", "value": 1}}
    for call, body in (
        (f"/v1/transactions/{tx}/steps", step),
        (f"/v1/transactions/{tx}/commit", {}),
    ):
        assert request(base, "POST", call, body, headers=keyed.auth).status == 200
    events += list(stream)
    assert [e["event"] for e in events] == ["transaction"] * len(events)
    assert len(events) >= 3, events
    for event in events:
        _check_event(document, schema, event)
    assert json.loads(events[-1]["data"])["status"] == "COMMITTED"
    assert _event_schema(document, "/v1/events") == schema


def _raw_events(base: str, path: str, headers: dict[str, str]) -> Iterator[dict[str, Any]]:
    """Each event's fields as text, as the SSE format carries them (``sse_events`` parses
    ``data``)."""
    for parsed in sse_events(base, path, headers=headers):
        fields = {k: parsed.pop(k) for k in ("id", "event")}
        yield {**{k: v for k, v in fields.items() if v is not None}, "data": json.dumps(parsed)}
