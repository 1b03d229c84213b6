"""The ``/v1`` operations of consequential actions and effects: preview, approve or refuse a
commit, undo and redo a step, reconcile or resolve an unknown outcome, compensate a committed
transaction (and approve or refuse a compensation), list and retry effects.

Their rows are ``SAFETY_ROWS`` of the operation table (``agenttx.api.operations.table``);
``agenttx serve`` serves these routes beside ``OPERATIONS`` (``server.py``). Without API keys
the call names who approves (``principal``, ``roles``), as the embedded API does; with keys
the approver is the key's owner whatever the body says (``Caller.acting_as``).
"""

from __future__ import annotations

from agenttx.api.http.v1.operations import http_operations
from agenttx.api.operations import SAFETY_ROWS

SAFETY_OPERATIONS = http_operations(SAFETY_ROWS)

__all__ = ["SAFETY_OPERATIONS"]
