"""schemathesis hooks of ``test_http_schemathesis.py`` (``SCHEMATHESIS_HOOKS``): the check
"a request the document admits is accepted", less the refusals no document can foresee.

Two refusals depend on the server's state, not on the request's shape: a ``page_token`` that
no earlier page gave (it must name a transaction the caller's listing holds) and a
``to_step`` not below the transaction's next step. Both are a 400 naming what to send
instead. And JSON Schema counts characters, while the engine's text limits are UTF-8 bytes:
a text within its ``maxLength`` (the byte limit) but over it in bytes is refused by a message
naming the bytes, which passes only when the request holds non-ASCII text (in ASCII the two
counts agree, so such a refusal fails the run). docs/testing.md explains all three. Every
other 4xx to a request the document admits fails the run, as the built-in check would.
"""

from __future__ import annotations

import json
import re
from typing import Any

import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

STATE_DEPENDENT = (
    "cannot continue the listing after",  # a page_token no earlier page gave
    "must be lower than the next step",  # a to_step at or past the transaction's next step
)


@schemathesis.check
def documented_requests_accepted(ctx: Any, response: Any, case: Any) -> bool | None:
    try:
        return positive_data_acceptance(ctx, response, case)
    except AssertionError:
        message = _message(response)
        if response.status_code == 400 and any(m in message for m in STATE_DEPENDENT):
            return None
        if response.status_code == 400 and _BYTES.search(message) and not _ascii(case):
            return None
        raise


_BYTES = re.compile(r"\b\d+ bytes\b")


def _ascii(case: Any) -> bool:
    """Whether every text the request sends is ASCII (its body, query and path)."""
    parts = [getattr(case, name, None) for name in ("body", "query", "path_parameters")]
    return json.dumps(parts, ensure_ascii=False, default=str).isascii()


def _message(response: Any) -> str:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return ""
    return str(message)
