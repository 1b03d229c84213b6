"""schemathesis hooks of ``test_http_schemathesis.py`` (``SCHEMATHESIS_HOOKS``): the check
"a request the document admits is accepted", less the refusals no document can foresee.

Two refusals depend on the server's state, not on the request's shape: a ``page_token`` that
no earlier page gave (it must name a transaction the caller's listing holds) and a
``to_step`` not below the transaction's next step. Both are a 400 naming what to send
instead; docs/testing.md explains them. Every other 4xx to a request the document admits fails
the run, as the built-in check would.
"""

from __future__ import annotations

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
        raise


def _message(response: Any) -> str:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return ""
    return str(message)
