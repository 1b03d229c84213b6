"""The JSON Schema fragments the MCP bindings (``mcp_bindings.py``) and the MCP adapter's
derived schemas share: plain values, so the table imports no adapter to declare its tools.

Every one constrains (a ``type``, an ``enum``, an ``anyOf``): the TypeScript SDK refuses a
property schema ``true`` and the Inspector flags ``{}`` (``api/mcp/catalog.py`` says what each
declared field costs a client).
"""

from __future__ import annotations

from typing import Any

TRANSACTION_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 128,
    "description": "The transaction_id begin_transaction returned.",
}

RECEIPT_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "The receipt_id preview_commit returned.",
}

# Any JSON value (a tool's output), spelled as a schema that constrains, so every client takes
# it: JSON Schema's own spelling, ``true`` or ``{}``, is refused or flagged, and a ``type``
# array is less portable than ``anyOf`` (hosts that map schemas onto one ``type``). The common
# case first: each branch tried costs the Python SDK one more subschema.
ANY_JSON: dict[str, Any] = {
    "anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean", "null")],
}

INT = {"type": "integer"}
STR = {"type": "string"}
STRS = {"type": "array", "items": STR}
BOOL = {"type": "boolean"}
NUMBER = {"type": "number"}
OBJECTS = {"type": "array", "items": {"type": "object"}}
SNAPSHOT = {
    "type": "object",
    "properties": {"transaction_id": STR, "revision": INT},
    "description": "Echo snapshot.revision as expected_revision to commit only this state.",
}
