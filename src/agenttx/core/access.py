"""Who may do what to a transaction: the one access rule, checked before the engine acts.

A transaction belongs to the tenant and the principal that began it (its row's ``tenant``, its
body's ``principal``); neither ever changes. For a caller (``agenttx.types``):

- another tenant's transaction does not exist: ``NotFound``, word for word the error of an
  unknown id, so a caller cannot learn that an id is taken;
- its own transactions allow everything;
- ``admin`` allows everything in its tenant;
- ``approver`` reads every transaction of its tenant (and approves their commits);
- otherwise ``PermissionDenied``.

Reading covers everything of a transaction: its view, steps, events, audit records, receipts
and its effects' payloads. A listing across transactions (effects) applies the same rule as
a filter in its store query (``read_owner``), so it shows exactly what a read would allow.

``None`` as the caller is embedded use: no check (the process owns the store). A transaction
begun before keys existed has no principal, so only an admin of its tenant reaches it.
"""

from __future__ import annotations

import enum

from agenttx.core.images import TxImages
from agenttx.core.limits import check_transaction_id
from agenttx.errors import NotFound, PermissionDenied, clip
from agenttx.store.contract import Store, TxRow
from agenttx.types import Caller, Role

PRINCIPAL_KEY = "principal"  # the body key holding who began the transaction


class Action(enum.Enum):
    READ = "read"  # get, list steps, watch, audit records
    ACT = "act"  # step, commit, rollback, reconcile, cancel
    APPROVE = "approve"  # approve a previewed commit


_VERB = {Action.READ: "read", Action.ACT: "act on", Action.APPROVE: "approve"}


def owner_of(row: TxRow) -> str:
    return str(row.body.get(PRINCIPAL_KEY, ""))


def reads_others(caller: Caller) -> bool:
    """True iff ``caller``'s roles let it read transactions another principal of its tenant
    began: an admin's or an approver's."""
    return caller.has(Role.ADMIN) or caller.has(Role.APPROVER)


def read_owner(caller: Caller | None) -> str | None:
    """The principal whose transactions alone ``caller`` may read — the READ rule of
    ``allowed`` as a filter a store query applies — or None when it may read every one of its
    tenant (an admin, an approver; the operator, ``None``, reads every tenant's)."""
    if caller is None or reads_others(caller):
        return None
    return caller.principal


def allowed(caller: Caller, row: TxRow, action: Action) -> bool:
    """True iff ``caller`` may do ``action`` to the transaction of ``row`` (same tenant)."""
    if owner_of(row) == caller.principal or caller.has(Role.ADMIN):
        return True
    return action in (Action.READ, Action.APPROVE) and reads_others(caller)


def permits(caller: Caller, row: TxRow, action: Action) -> bool:
    """True iff ``caller`` may do ``action`` to ``row``'s transaction, tenant included (a
    listing shows exactly the rows that permit READ)."""
    return row.tenant == caller.tenant and allowed(caller, row, action)


class Access:
    def __init__(self, store: Store, images: TxImages) -> None:
        self.store = store
        self.images = images  # a cached image answers without a read: tenant, owner never change

    def may(self, caller: Caller, row: TxRow, action: Action) -> bool:
        return permits(caller, row, action)

    async def check(self, caller: Caller | None, transaction_id: str, action: Action) -> None:
        """Raise unless ``caller`` may do ``action`` to the transaction; a missing transaction
        passes (the call itself then says NotFound, as it would without keys)."""
        if caller is None:
            return
        check_transaction_id(transaction_id)  # the id's byte limit before it reaches the store
        rt = self.images.cache.get(transaction_id)
        row = rt.row if rt is not None else await self.store.get_transaction(transaction_id)
        if row is None:
            return
        if row.tenant != caller.tenant:
            raise NotFound(f"transaction `{clip(transaction_id)}` not found")
        if not allowed(caller, row, action):
            # Reading and approving are an approver's too; acting is the owner's or an admin's.
            roles = "the admin role" if action is Action.ACT else "the admin or approver role"
            raise PermissionDenied(
                f"transaction {transaction_id} belongs to another principal; "
                f"{caller.principal!r} needs {roles} to {_VERB[action]} it"
            )
