"""Each bound row's action, by the row's name: what its command does and prints beyond the
generic (``cli/rows.py``), called with the parsed values, ``as_json`` and how to reach the
server (``rows.Connect``). The command itself — its arguments, options and help — is the
row's binding (``api/operations/cli_bindings.py``); a bound row missing here gets the generic
action. Imported when a bound command is made, not before."""

from __future__ import annotations

from collections.abc import Callable

from agenttx.cli.audit import export, verify
from agenttx.cli.compensation import (
    tx_approve_compensation,
    tx_compensate,
    tx_refuse_compensation,
)
from agenttx.cli.effects import effects_list, effects_retry
from agenttx.cli.reconcile import tx_reconcile, tx_resolve
from agenttx.cli.tools import tools
from agenttx.cli.tx import tx_list, tx_rollback, tx_show
from agenttx.cli.tx_receipts import tx_approve, tx_preview, tx_refuse
from agenttx.cli.tx_step import tx_begin, tx_commit, tx_step
from agenttx.cli.tx_undo import tx_redo, tx_undo

ACTIONS: dict[str, Callable[..., None]] = {
    "begin": tx_begin,
    "execute_step": tx_step,
    "commit": tx_commit,
    "rollback": tx_rollback,
    "get_transaction": tx_show,
    "list_transactions": tx_list,
    "list_tools": tools,
    "preview_commit": tx_preview,
    "approve_commit": tx_approve,
    "refuse_commit": tx_refuse,
    "undo_step": tx_undo,
    "redo_step": tx_redo,
    "reconcile_step": tx_reconcile,
    "resolve_step": tx_resolve,
    "compensate": tx_compensate,
    "approve_compensation": tx_approve_compensation,
    "refuse_compensation": tx_refuse_compensation,
    "list_effects": effects_list,
    "retry_effect": effects_retry,
    "verify_audit": verify,
    "audit_records": export,
}
