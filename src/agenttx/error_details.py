"""How a refused call's reason and fields travel on gRPC: trailing metadata beside the status
code and message (docs/api.md, "Errors on the wire").

Both entries are ASCII so any gRPC stack passes them on:

    agenttx-error-reason   the error's reason (WRONG_STEP, COMMIT_CONFLICT …)
    agenttx-error-fields   a compact JSON object of its fields ({"expected":2,"got":5,…})
    agenttx-next           the refusal's continuation, its next calls named by RPC, as a
                           compact JSON object ({"kind":"RetryRequest","instruction":"Send
                           the same ExecuteStep again with step_id 2: …"}), the same one
                           MCP and HTTP give (``api/continuations.py``)

The fields entry is at most ``MAX_FIELDS_BYTES`` (gRPC refuses metadata past a few KiB): lists
are shortened to fit, and "truncated" then says how many items of which list were left out.
Reading never raises: missing or malformed details read as ``("", {})``, and the client falls
back to the status code's family class. The server (``api/grpc/server.py``) writes with
``to_metadata``; the client (``client/_errors.py``) reads with ``from_metadata``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from agenttx.errors import AgentTxError

REASON_KEY = "agenttx-error-reason"
FIELDS_KEY = "agenttx-error-fields"
NEXT_KEY = "agenttx-next"
MAX_FIELDS_BYTES = 4096


def to_metadata(exc: AgentTxError) -> tuple[tuple[str, str], ...]:
    """The trailing metadata that carries ``exc``'s reason and fields."""
    return reason_metadata(exc.reason, exc.details())


def reason_metadata(reason: str, fields: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The trailing metadata that carries a refusal's ``reason`` and ``fields`` (the gRPC
    adapter sends its public error's: ``api/public_errors.py``)."""
    if not fields:
        return ((REASON_KEY, reason),)
    return ((REASON_KEY, reason), (FIELDS_KEY, _fitted(dict(fields))))


def next_metadata(continuation: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The trailing metadata entry of a refusal's ``continuation``: at most
    ``MAX_FIELDS_BYTES``, its instruction shortened (with "…") to fit."""
    cont = dict(continuation)
    text = _encoded(cont)
    instruction = str(cont.get("instruction", ""))
    while len(text) > MAX_FIELDS_BYTES and instruction:
        instruction = instruction[: len(instruction) * 3 // 4]
        cont["instruction"] = instruction + "…"
        text = _encoded(cont)
    return ((NEXT_KEY, text),) if len(text) <= MAX_FIELDS_BYTES else ()


def next_from_metadata(metadata: Iterable[tuple[str, Any]] | None) -> dict[str, Any]:
    """The continuation a call's trailing metadata carries; ``{}`` if none (never raises)."""
    for key, value in metadata or ():
        if key != NEXT_KEY:
            continue
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        try:
            decoded = json.loads(value) if isinstance(value, str) else None
        except ValueError:
            return {}
        return decoded if isinstance(decoded, dict) else {}
    return {}


def from_metadata(metadata: Iterable[tuple[str, Any]] | None) -> tuple[str, dict[str, Any]]:
    """``(reason, fields)`` from a call's trailing metadata (the client); ``("", {})`` if it
    has none."""
    reason, fields = "", {}
    for key, value in metadata or ():
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        if key == REASON_KEY and isinstance(value, str):
            reason = value
        elif key == FIELDS_KEY and isinstance(value, str):
            try:
                decoded = json.loads(value)
            except ValueError:
                continue
            if isinstance(decoded, dict):
                fields = decoded
    return reason, fields


def _encoded(fields: Mapping[str, Any]) -> str:
    # ensure_ascii: a metadata value that is not binary must be printable ASCII.
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True)


def _fitted(fields: dict[str, Any]) -> str:
    text = _encoded(fields)
    if len(text) <= MAX_FIELDS_BYTES:
        return text
    fitted = dict(fields)
    truncated: dict[str, int] = {}
    while len(text) > MAX_FIELDS_BYTES:
        lists = [name for name, value in fitted.items() if isinstance(value, list) and value]
        if not lists:
            break  # only scalars left: they are small by construction (ids, statuses)
        longest = max(lists, key=lambda name: len(_encoded({name: fitted[name]})))
        items = fitted[longest]
        kept = items[: len(items) // 2]
        truncated[longest] = truncated.get(longest, 0) + len(items) - len(kept)
        fitted[longest] = kept
        text = _encoded({**fitted, "truncated": truncated})
    return text
