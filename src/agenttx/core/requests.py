"""Request idempotency: a mutating call retried with the same ``request_id`` and payload gets
the stored reply instead of running again; the same id with another payload is refused.

Where the reply is looked up and stored, so the common call costs no write of its own:

- **Lookup**: begin (no transaction yet) reads the stored reply first. Every other call looks
  it up once it holds the transaction's lock (``TxImages.locked`` with its ``Request``): on
  PostgreSQL in the same pipeline as the advisory lock and the row read, on SQLite a read on
  the reader connection. Under the lock no twin on the same transaction can slip in between.
- **Store**: begin, a successful state step and a commit that delivers nothing right away put
  their reply into their own durable write (``create_transaction``, ``finish_step``,
  ``commit``: the same SQLite commit, the same PostgreSQL statement or transaction). That
  insert is "first wins": if the id was taken meanwhile (a twin on another transaction or
  method), the store raises ``AlreadyExists`` and none of the write happened; the call then
  answers with what is stored. A step with an outside effect claims its id in the RUNNING
  write (``start_step``), before the outside call, so no other request can take the id once
  that call may have happened. Everything else — failed steps and their rewinds, rollbacks,
  refusals, an outside step's final reply, a commit that delivered effects (its reply counts
  them) — stores its reply with ``put_request``, a write of its own.
- **Never stored**: a transient refusal (``AgentTxError.transient``: store full, unavailable,
  deadline, a revision conflict, a store failure or shutdown), a cancellation (the call's
  task cancelled, or the step's tool cancelled by its caller: ``Request.final``). None is the
  request's outcome, so the same call with the same id runs again.

A failure path's window between its durable write and its reply is closed by the durable rows:
a step attempt records its request id (``rid``) and a commit records ``commit_request_id``
with its outcome, so a retry that finds no stored reply rebuilds it from those rows
(``step_replay``, ``commit_replay``).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import typing
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agenttx import errors
from agenttx.core.hints import reference_category
from agenttx.errors import (
    AgentTxError,
    AlreadyExists,
    CommitConflict,
    InternalError,
    InvalidArgument,
)
from agenttx.jsontext import encoder
from agenttx.store.contract import Store, StoredReply
from agenttx.types import CommitResult, StepResult, StepStatus, TxStatus

T = TypeVar("T")

MAX_REQUEST_ID_BYTES = 256
_FINAL_STATUSES = ("COMMITTED", "ROLLED_BACK", "FAILED")


# The canonical text a payload is hashed from: exactly json.dumps(…, sort_keys=True,
# separators=(",", ":"), default=str), as stored hashes were made, with one encoder for all
# calls (json.dumps builds one per call: most of the hash's cost).
_canonical = encoder(default=str, ensure_ascii=True, separators=(",", ":"), sort_keys=True)


def payload_hash(method: str, payload: Any) -> str:
    return hashlib.sha256(_canonical([method, payload]).encode()).hexdigest()


def check_request_id(request_id: str) -> None:
    if len(request_id.encode()) > MAX_REQUEST_ID_BYTES:
        raise InvalidArgument(f"request_id exceeds {MAX_REQUEST_ID_BYTES} bytes")


class ReplyFound(Exception):
    """Control flow: the request's id already holds a reply (or another request's claim).
    Raised by the lookup under the transaction's lock before the call does anything; caught
    by ``RequestLog.run``, which answers with what is stored. Never leaves the engine."""

    def __init__(self, stored: StoredReply) -> None:
        super().__init__(stored.request_id)
        self.stored = stored


@dataclasses.dataclass(slots=True)
class Request:
    """One mutating call under a request id while it runs: what the parts need to look its
    reply up under the transaction's lock and to store it with their own durable write."""

    tenant: str
    request_id: str
    method: str
    digest: str  # payload_hash of the method and payload
    now: float  # when the call began: the stored reply's age
    # True iff the call's own durable write stored its reply (nothing left for RequestLog).
    stored: bool = False
    # True iff ``start_step`` claimed the id: the reply then fills the claim (put_request).
    claimed: bool = False
    # False iff the call's reply is not the request's outcome (its caller cancelled the step
    # mid-tool: the step was undone), so nothing is stored and a retry runs the call again.
    final: bool = True
    # The transaction the call names, stored with its reply (``StoredReply.tx_id``); "" for a
    # begin, whose reply names the transaction it made.
    tx_id: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """(tenant, request id), as ``Store.transaction_lock`` takes it."""
        return self.tenant, self.request_id

    def reply(self, result: Any) -> StoredReply:
        """The stored form of ``result`` as this request's reply (every result type names its
        transaction: a begin's is the one it made)."""
        tx_id = self.tx_id or str(result.transaction_id)
        return StoredReply(
            self.request_id, self.method, self.digest, _reply_json(result), self.now, tx_id
        )

    def claim(self) -> StoredReply:
        """A claim on the id for this request (no reply yet)."""
        return StoredReply(self.request_id, self.method, self.digest, "", self.now, self.tx_id)

    def check(self, stored: StoredReply | None) -> None:
        """Go on iff nothing is stored for the id, or only this same request's claim (its
        call was interrupted: it runs again, and recovery has settled what it left); else
        ``ReplyFound``."""
        if stored is None:
            return
        if stored.claimed_only and (stored.method, stored.payload_hash) == (
            self.method,
            self.digest,
        ):
            return
        raise ReplyFound(stored)


class RequestLog:
    """The stored replies of mutating calls, by (tenant, request id)."""

    def __init__(self, store: Store, tenant: str, clock: Callable[[], float]) -> None:
        self.store = store
        self.tenant = tenant  # request ids are unique per tenant only
        self.clock = clock

    async def run(
        self,
        request_id: str,
        method: str,
        payload: Any,
        result_type: type[T],
        call: Callable[[Request | None], Awaitable[T]],
        *,
        lookup_first: bool = False,
        tenant: str | None = None,
        transaction_id: str = "",
    ) -> T:
        """Run ``call`` once per ``request_id``; replay its stored reply on a retry.

        ``call`` gets the ``Request`` (None without an id) and hands it to the lock it takes
        (the lookup) and to its durable write (the store); ``lookup_first`` looks the reply
        up before the call instead, for a call that locks no transaction (begin). ``tenant``:
        the caller's (request ids are unique per tenant), else the engine's.
        ``transaction_id``: the transaction the call names, recorded with its reply (a
        begin names none: its reply's is recorded)."""
        if not request_id:
            return await call(None)
        check_request_id(request_id)
        digest = payload_hash(method, payload)
        req = Request(
            tenant or self.tenant, request_id, method, digest, self.clock(), tx_id=transaction_id
        )
        try:
            if lookup_first:
                req.check(await self.store.get_request(req.tenant, request_id))
            result = await self._call(req, call)
        except ReplyFound as found:
            return self._replay(found.stored, method, digest, result_type)
        if req.stored or not req.final:
            return result  # stored with the call's own write, or not to be stored
        row = req.reply(result)
        stored = await self.store.put_request(req.tenant, row)
        if stored is row:
            return result  # this call's reply is the stored one: no need to decode it again
        return self._replay(stored, method, digest, result_type)  # a concurrent twin won

    async def _call(self, req: Request, call: Callable[[Request | None], Awaitable[T]]) -> T:
        """The call; its protocol error becomes the stored reply, and a request id taken by
        another request while it ran becomes ``ReplyFound``."""
        try:
            return await call(req)
        except AlreadyExists:
            # The id was taken between the lookup and the call's own write, which the store
            # then rolled back whole: answer with what holds the id.
            stored = await self.store.get_request(req.tenant, req.request_id)
            if stored is None:
                raise
            raise ReplyFound(stored) from None
        except AgentTxError as exc:
            # A transient refusal (store full, unavailable, deadline, a conflict, a store
            # failure) says nothing final about the request: a retry must run it again, so it
            # is never stored. A step failure that escaped its step is a bug, not an outcome.
            if exc.transient or isinstance(exc, errors.StepFailure):
                raise
            if isinstance(exc, errors.NotActive) and exc.status not in _FINAL_STATUSES:
                raise  # busy (EXECUTING, ROLLING_BACK): the same request may run later
            error = {
                "error": {
                    "type": type(exc).__name__,
                    "message": exc.message,
                    "fields": exc.details(),  # a replay refuses with the same data
                }
            }
            row = StoredReply(
                req.request_id, req.method, req.digest, json.dumps(error), req.now, req.tx_id
            )
            raise ReplyFound(await self.store.put_request(req.tenant, row)) from exc

    async def step_replay(
        self, transaction_id: str, step_id: int, request_id: str
    ) -> StepResult | None:
        """The reply of step ``step_id`` sent with ``request_id``, rebuilt from its attempt row
        (it ran, but its reply was lost before it was stored), or None if no attempt has it."""
        if not request_id:
            return None
        rows = await self.store.load_steps(transaction_id, live_only=False)
        mine = [r for r in rows if r.step_id == step_id and r.detail.get("rid") == request_id]
        if not mine:
            return None
        row = mine[-1]
        tx = await self.store.get_transaction(transaction_id)
        assert tx is not None
        constraints = list(tx.body.get("constraints", []))
        if row.status == StepStatus.SUCCESS.value:
            return StepResult(
                transaction_id=transaction_id,
                step_id=step_id,
                status=StepStatus.SUCCESS,
                output=json.loads(row.output_json) if row.output_json else None,
                output_json=row.output_json,
                next_step_id=step_id + 1,
                constraints=constraints,
                transaction_status=TxStatus(tx.status),
                revision=tx.revision,
            )
        ended = TxStatus(tx.status).terminal
        return StepResult(
            transaction_id=transaction_id,
            step_id=step_id,
            status=StepStatus.FAILED
            if ended
            else StepStatus(
                "OUTCOME_UNKNOWN" if row.status == "OUTCOME_UNKNOWN" else "ROLLBACK_TRIGGERED"
            ),
            clean_hint=str(row.detail.get("hint", "")),
            error_category=str(row.detail.get("category", "")),
            reference_category=reference_category(str(row.detail.get("category", ""))),
            next_step_id=0 if ended else tx.next_step_id,
            constraints=constraints,
            abort_reason=str(tx.body.get("abort_reason", "")) if ended else "",
            transaction_status=TxStatus(tx.status),
            revision=tx.revision,
            hint_key=str(row.detail.get("key", "")),
        )

    async def commit_replay(self, transaction_id: str, request_id: str) -> CommitResult | None:
        """The reply of the commit sent with ``request_id``, rebuilt from the transaction's
        row (the commit is durable, its reply was lost), or None if it was not this commit."""
        if not request_id:
            return None
        row = await self.store.get_transaction(transaction_id)
        if row is None or row.body.get("commit_request_id") != request_id:
            return None
        if row.status == TxStatus.FAILED.value:
            raise CommitConflict(transaction_id, [], "write").with_message(
                str(row.body.get("abort_reason", "commit conflict"))
            )
        if row.status != TxStatus.COMMITTED.value:
            return None
        live = await self.store.load_steps(transaction_id, live_only=True)
        return CommitResult(
            transaction_id=transaction_id,
            committed=True,
            steps_committed=sum(1 for s in live if s.status == StepStatus.SUCCESS.value),
            effects_dispatched=0,
            dispatch_errors=[],
            transaction_status=TxStatus.COMMITTED,
            revision=row.revision,
        )

    @staticmethod
    def _replay(stored: StoredReply, method: str, digest: str, result_type: type[T]) -> T:
        if stored.method != method or stored.payload_hash != digest:
            raise AlreadyExists(
                f"request_id {stored.request_id!r} was already used for a different "
                f"{stored.method} request; use a new request_id for a new request",
                request_id=stored.request_id,
            )
        if stored.claimed_only:
            # Only reachable if this request's own claim meets a write that cannot fill it
            # (a tool whose effect class changed between the claim and the retry).
            raise InternalError(
                f"request_id {stored.request_id!r} is claimed by an unfinished call of this "
                "request; retry later"
            )
        reply = json.loads(stored.reply_json)
        if "error" in reply:
            stored_error = reply["error"]
            raise rebuild_error(
                stored_error["type"], stored_error["message"], stored_error.get("fields", {})
            )
        return from_json(result_type, reply["ok"])


def rebuild_error(type_name: str, message: str, fields: Any = None) -> AgentTxError:
    cls = getattr(errors, type_name, None)
    if not (isinstance(cls, type) and issubclass(cls, AgentTxError)):
        cls = AgentTxError
    # The message is what was said the first time, and the fields too (a reply stored
    # before errors kept their fields has none: the error then comes back without them).
    exc = cls.rebuilt(message, fields if isinstance(fields, dict) else {})
    if exc is None:
        exc = cls.__new__(cls)
        AgentTxError.__init__(exc, message)
    return exc


def _reply_json(result: Any) -> str:
    """The stored form of a successful call's result (enums by value), without the fields
    that hold their defaults: ``from_json`` gives those back. A step's reply is then about a
    third of its full text, so a step's request row fits the page it shares with others
    (each step commit writes the rows' pages again: fewer, shorter rows are fewer WAL frames).
    """
    # Not dataclasses.asdict: it deep-copies every field value (a step's output too) only
    # for json to read it once, ~3x the cost of the encoding on every stored reply
    # (measured, benchmarks/results/replicas.md). The encoder asks _stored_value for what it
    # cannot encode itself, nested dataclasses included (those in full).
    defaults = _defaults(type(result))
    return _reply_text(
        {
            "ok": {
                name: getattr(result, name)
                for name in _field_names(type(result))
                if name not in defaults or getattr(result, name) != defaults[name]
            }
        }
    )


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # per result type: dataclasses.fields is slow
_DEFAULTS: dict[type, dict[str, Any]] = {}


def _field_names(result_type: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(result_type)
    if names is None:
        names = _FIELD_NAMES[result_type] = tuple(f.name for f in dataclasses.fields(result_type))
    return names


def _defaults(result_type: type) -> dict[str, Any]:
    """Each field's default value (a factory's product for a list or a dict)."""
    found = _DEFAULTS.get(result_type)
    if found is None:
        found = {}
        for f in dataclasses.fields(result_type):
            if f.default is not dataclasses.MISSING:
                found[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                found[f.name] = f.default_factory()
        _DEFAULTS[result_type] = found
    return found


def _field_values(result: Any) -> dict[str, Any]:
    return {name: getattr(result, name) for name in _field_names(type(result))}


def _stored_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _field_values(value)
    raise TypeError(f"cannot store {type(value).__name__} in a reply")


# json.dumps(value, default=_stored_value), compact, one encoder reused. (Stored replies made
# before were spaced, and kept every field: they read back the same.)
_reply_text = encoder(default=_stored_value, ensure_ascii=True, separators=(",", ":"))


_HINTS: dict[type, dict[str, Any]] = {}  # per result type: resolving them is slow


def _type_hints(result_type: type) -> dict[str, Any]:
    hints = _HINTS.get(result_type)
    if hints is None:
        hints = _HINTS[result_type] = typing.get_type_hints(result_type)
    return hints


def from_json(result_type: type[T], data: dict[str, Any]) -> T:
    """Rebuild a result dataclass, turning enum fields back into their enums."""
    hints = _type_hints(result_type)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(result_type):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        value = data[f.name]
        hint = hints.get(f.name)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            value = hint(value)
        values[f.name] = value
    return result_type(**values)
