"""The service contract (issue 23.1): ``agenttx.TransactionService`` names the operations the
embedded engine and the async client both offer, and each of them — and the tracing wrapper
the server puts in front of the engine — has every one, awaitable, taking every parameter the
contract names under the same name and in the same place. mypy checks the same in
``agenttx.api.conformance``; this is the check a user can run without it."""

from __future__ import annotations

import inspect

import pytest

import agenttx
from agenttx.api.tracing import TracedEngine
from agenttx.client import AsyncAgentTxClient

OPERATIONS = [
    name
    for name, value in vars(agenttx.TransactionService).items()
    if inspect.iscoroutinefunction(value)
]


def test_the_contract_is_public_and_names_the_shared_operations() -> None:
    assert "TransactionService" in agenttx.__all__
    assert {"begin", "execute_step", "commit", "rollback", "get_transaction"} <= set(OPERATIONS)
    assert {"preview_commit", "approve_commit", "refuse_commit", "undo_step", "redo_step"} <= set(
        OPERATIONS
    )
    assert {"reconcile_step", "resolve_step", "compensate", "verify_audit"} <= set(OPERATIONS)
    assert {"list_effects", "retry_effect"} <= set(OPERATIONS)


@pytest.mark.parametrize("impl", [agenttx.Engine, AsyncAgentTxClient, TracedEngine])
@pytest.mark.parametrize("name", OPERATIONS)
def test_each_side_offers_the_operation_as_the_contract_spells_it(impl: type, name: str) -> None:
    method = vars(impl).get(name)  # defined on the class itself, not forwarded by __getattr__
    assert method is not None, f"{impl.__name__} has no {name}"
    assert inspect.iscoroutinefunction(method), f"{impl.__name__}.{name} is not awaitable"
    wanted = inspect.signature(getattr(agenttx.TransactionService, name)).parameters
    offered = inspect.signature(method).parameters
    positional = [p for p in offered.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    for index, (pname, p) in enumerate(wanted.items()):
        assert pname in offered, f"{impl.__name__}.{name} takes no {pname}"
        got = offered[pname]
        if p.kind is p.POSITIONAL_OR_KEYWORD:
            assert positional[index] is got, f"{impl.__name__}.{name}: {pname} out of place"
        if p.default is not p.empty:
            assert got.default is not got.empty, f"{impl.__name__}.{name}: {pname} needs a default"
