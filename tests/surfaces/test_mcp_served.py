"""What the MCP tools call (``agenttx.api.mcp.served``): the engine bound to the caller it acts
for (``ActingFor``, a typed class mypy checks against the contract), so every call of a tool
is scoped by that caller, and nothing else of the engine is reachable through it."""

from __future__ import annotations

import inspect

import pytest

import agenttx
from agenttx.api.mcp.served import ActingFor, embedded
from agenttx.api.tracing import TracedEngine
from agenttx.types import Caller, Role

pytestmark = pytest.mark.stores("sqlite")

# Every call the binding makes for its caller: each public method but ``list_tools``.
_SCOPED = sorted(
    name
    for name, value in vars(ActingFor).items()
    if callable(value) and not name.startswith("_") and name != "list_tools"
)


def _key(principal: str, tenant: str = "acme") -> Caller:
    return Caller(principal, tenant, frozenset({Role.AGENT}))


@pytest.mark.parametrize("impl", [agenttx.Engine, TracedEngine])
@pytest.mark.parametrize("name", _SCOPED)
def test_each_call_the_binding_scopes_takes_the_caller(impl: type, name: str) -> None:
    method = vars(impl).get(name)  # spelled on the class, not forwarded by __getattr__
    assert method is not None, f"{impl.__name__} has no {name}"
    caller = inspect.signature(method).parameters.get("caller")
    assert caller is not None, f"{impl.__name__}.{name} takes no caller"
    assert caller.kind is caller.KEYWORD_ONLY, f"{impl.__name__}.{name}: caller by name only"


def test_the_scoped_calls_are_the_contract_and_the_engine_s_own() -> None:
    contract = {n for n, v in vars(agenttx.TransactionService).items() if inspect.isfunction(v)}
    contract.discard("__init__")
    own = {"cancel_step", "list_transactions_page"}
    assert set(_SCOPED) == {n for n in contract if not n.startswith("_")} | own
    assert "list_tools" not in _SCOPED  # the same for every caller


async def test_a_bound_engine_acts_for_its_caller_only(engine: agenttx.Engine) -> None:
    alice, bob = embedded(engine, _key("alice")), embedded(engine, _key("bob"))
    tx = (await alice.service.begin("agent")).transaction_id
    assert (await alice.service.get_transaction(tx)).transaction_id == tx
    with pytest.raises(agenttx.PermissionDenied):
        await bob.service.get_transaction(tx)
    with pytest.raises(agenttx.NotFound):  # another tenant's does not exist for it
        await embedded(engine, _key("alice", "other")).service.get_transaction(tx)
    rows, _ = await bob.listings.transactions([], "", 50, "")
    assert rows == []
    rows, _ = await alice.listings.transactions([], "", 50, "")
    assert [r["transaction_id"] for r in rows] == [tx]
    # The unbound engine, and what only the engine has, are out of reach of a tool.
    with pytest.raises(AttributeError):
        alice.service.store  # type: ignore[attr-defined]  # noqa: B018
    assert bob.as_caller(_key("alice")).caller == _key("alice")
