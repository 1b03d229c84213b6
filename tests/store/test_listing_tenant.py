"""Listing by tenant: without a caller (the operator, embedded or a keyless server) every
tenant's transactions are listed and ``tenant`` picks one; a caller with a key sees its own
tenant only, and naming another lists nothing (no existence is revealed). Both stores."""

from __future__ import annotations

from typing import Any

import pytest

from agenttx.errors import InvalidArgument
from agenttx.types import Caller, Role


def caller(tenant: str, principal: str = "p") -> Caller:
    return Caller(principal, tenant, frozenset({Role.ADMIN}))


async def test_the_operator_lists_one_tenant_and_a_key_only_its_own(engine: Any) -> None:
    acme, globex = caller("acme"), caller("globex")
    a = (await engine.begin(agent_id="tenant-list", caller=acme)).transaction_id
    g = (await engine.begin(agent_id="tenant-list", caller=globex)).transaction_id

    async def ids(**kw: Any) -> list[str]:
        page = await engine.list_transactions_page(agent_id="tenant-list", page_size=50, **kw)
        return [t.transaction_id for t in page.transactions]

    assert set(await ids()) >= {a, g}
    assert await ids(tenant="acme") == [a]
    assert await ids(tenant="globex") == [g]
    assert await ids(caller=acme) == [a]
    assert await ids(caller=acme, tenant="acme") == [a]
    assert await ids(caller=acme, tenant="globex") == []
    page = await engine.list_transactions_page(agent_id="tenant-list", tenant="acme")
    assert [t.tenant for t in page.transactions] == ["acme"]


async def test_a_tenant_that_is_no_tenant_name_is_refused_naming_the_rule(engine: Any) -> None:
    with pytest.raises(InvalidArgument, match="not a tenant name"):
        await engine.list_transactions_page(tenant="x" * 10_000)
