"""The HTTP/JSON API's operations: one table entry each — method and path, the request's
shape (a pydantic model for the body and one for the query), the engine call, the reply
message. The routes (``routes.py``) and the OpenAPI document (``openapi.py``) are both built
from ``OPERATIONS``, so adding an operation is adding one entry here.

Replies are the gRPC adapter's own reply messages read back as JSON (``agenttx.api.fields``):
the wire's field names, ``*_json`` text fields parsed into a field without the suffix
(``output_json`` → ``output``), enums by their short names (``SUCCESS``, as the MCP adapter
and the reference's MCP server name them). A step reply names every strategy (an HTTP client
reads names, so ``RETRY`` is never downgraded to the reference's vocabulary).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from agenttx.api import audit_wire
from agenttx.api.grpc_server import (
    begin_reply,
    commit_reply,
    rollback_reply,
    step_reply,
    tools_reply,
    transaction_reply,
    transactions_reply,
)
from agenttx.api.v1.filters import StatusFilter
from agenttx.core.limits import MAX_TRANSACTION_ID_BYTES
from agenttx.core.offload import INLINE_JSON_CHARS, by_size
from agenttx.errors import InvalidArgument, clip
from agenttx.numbers import (
    EFFECT_ID,
    EXPECTED_REVISION,
    MAX_INT64,
    STEP_ID,
    TO_STEP,
    TRANSACTIONS_PAGE,
    WholeNumber,
)
from agenttx.types import (
    MAX_POLICY_DEPTH,
    MAX_STEP_RETRIES,
    REFERENCE_FALLBACK,
    REPLAY_FACTOR_RANGE,
    TENANT_PATTERN,
    Caller,
    TxStatus,
)
from agenttx.wire import agenttx_pb2 as pb

_ALL_STRATEGIES = frozenset(REFERENCE_FALLBACK)


class _Body(BaseModel):
    # Strict: "1" is not a step id and an unknown field is a typo, not something to ignore.
    model_config = ConfigDict(strict=True, extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _whole_floats(cls, value: Any, info: ValidationInfo) -> Any:
        """A whole float (``3.0``) in a whole-number field is that number: JSON (and JSON
        Schema's ``integer``) make ``3.0`` the same number as ``3``, and ``WholeNumber.parse``
        takes it on every other surface. Any other float stays one, and is refused."""
        name = info.field_name
        annotation = cls.model_fields[name].annotation if name is not None else None
        if (
            isinstance(value, float)
            and annotation in (int, int | None)
            and value.is_integer()
            and -MAX_INT64 <= value <= MAX_INT64  # compared first: int(1e308) has 309 digits
        ):
            return int(value)
        return value


# The engine's limits, stated in the schema where JSON Schema can say them. Its limits are in
# UTF-8 bytes and JSON Schema counts characters, so a length here is the byte limit (a string
# over it is surely over); the engine still checks the bytes (docs/operations.md, Limits).
Label = Annotated[str, Field(min_length=1, max_length=128)]


class PolicyBody(_Body):
    # The ranges RollbackPolicy checks (agenttx.types).
    max_local_depth: int | None = Field(default=None, ge=0, le=MAX_POLICY_DEPTH)
    max_global_resets: int | None = Field(default=None, ge=0, le=MAX_POLICY_DEPTH)
    replay_budget_factor: float | None = Field(
        default=None, ge=REPLAY_FACTOR_RANGE[0], le=REPLAY_FACTOR_RANGE[1], strict=False
    )
    max_step_retries: int | None = Field(default=None, ge=0, le=MAX_STEP_RETRIES)


class BeginBody(_Body):
    agent_id: str = Field(default="", max_length=256)
    metadata: dict[str, str] = Field(default_factory=dict, max_length=64)
    policy: PolicyBody | None = None
    isolation: Literal["snapshot", "serializable", "read_committed"] = "snapshot"
    labels: list[Label] = Field(default_factory=list, max_length=32)
    request_id: str = Field(
        default="", max_length=256, description="a retry with the same id replays"
    )
    principal: str = Field(
        default="", max_length=256, description="who acts (with API keys: the key's owner)"
    )
    mode: Literal["transactional", "approval_required", "autonomous_trusted"] = "transactional"


# Without API keys the body's principal is who begins, and the engine refuses approval_required
# without one (``core.engine._mode``); with keys the key's owner begins. The document of a
# server without keys states it (``openapi_document``).
BEGIN_WITHOUT_KEYS: dict[str, Any] = {
    "if": {"properties": {"mode": {"const": "approval_required"}}, "required": ["mode"]},
    "then": {"properties": {"principal": {"minLength": 1}}, "required": ["principal"]},
}


class StepBody(_Body):
    # The schema says what _step refuses: arguments and arguments_json both given (non-null).
    model_config = _Body.model_config | {
        "json_schema_extra": {
            "not": {
                "required": ["arguments", "arguments_json"],
                "properties": {
                    "arguments": {"type": "object"},
                    "arguments_json": {"type": "string"},
                },
            }
        }
    }

    step_id: int = Field(
        ge=STEP_ID.low, le=STEP_ID.high, description="must equal the transaction's next_step_id"
    )
    tool_name: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] | None = Field(
        default=None, description="the tool's arguments as a JSON object"
    )
    arguments_json: str | None = Field(
        default=None, max_length=1 << 20, description="or the same as JSON text (not both)"
    )
    raw_context: str = Field(default="", max_length=1 << 20)
    request_id: str = Field(default="", max_length=256)


class CommitBody(_Body):
    request_id: str = Field(default="", max_length=256)
    expected_revision: int | None = Field(
        default=None,
        ge=EXPECTED_REVISION.low,
        le=EXPECTED_REVISION.high,
        description="the snapshot's revision: refuse if it moved since",
    )
    receipt_id: str = Field(
        default="", max_length=64, description="commit exactly this preview's change"
    )


class RollbackBody(_Body):
    to_step: int | None = Field(
        default=None,
        ge=TO_STEP.low,
        le=TO_STEP.high,
        description="rewind to before this step; absent or 0: abort the transaction",
    )
    reason: str = ""
    request_id: str = Field(default="", max_length=256)


TX_STATUSES = StatusFilter("status", tuple(TxStatus.__members__))

# The path parameters that are numbers: the operations read them with these ranges and the
# OpenAPI document states the same ranges.
PATH_NUMBERS: dict[str, WholeNumber] = {"step_id": STEP_ID, "effect_id": EFFECT_ID}


# Every other path parameter is a transaction id: "tx_" and 32 hex digits. A path's id must be
# visible ASCII within the engine's limit, the pattern the document states, checked by the
# routes with the same expression before the engine sees it (``path_refusal``); such an id
# the store lacks is a 404.
_TRANSACTION_ID = f"[!-~]{{1,{MAX_TRANSACTION_ID_BYTES}}}"
_TRANSACTION_ID_REGEX = re.compile(_TRANSACTION_ID)
TRANSACTION_ID_SCHEMA = {
    "type": "string",
    "pattern": f"^{_TRANSACTION_ID}$",
    "description": "a transaction id (tx_ and 32 hex digits)",
}


def path_refusal(path: dict[str, str]) -> str | None:
    """Why a path's transaction id names no transaction of any shape (None: it may)."""
    text = path.get("transaction_id")
    if text is None or _TRANSACTION_ID_REGEX.fullmatch(text):
        return None
    return (
        f"transaction_id {clip(text, 40)!r} is not a transaction id: ids are 1.."
        f"{MAX_TRANSACTION_ID_BYTES} visible ASCII characters (tx_ and 32 hex digits)"
    )


def path_number(c: Call, name: str) -> int:
    """A path's step or effect id: a decimal number in the field's range."""
    number = PATH_NUMBERS[name]
    text = c.path[name]
    if text[:1] in "+- ":  # a path segment spells the number exactly
        raise number.refusal(text)
    return number.parse(text)


class ListQuery(BaseModel):
    # Query strings are text: "20" is a page size here.
    model_config = ConfigDict(extra="forbid")

    status: list[str] = Field(
        default_factory=list,
        json_schema_extra={"items": {"type": "string", "pattern": TX_STATUSES.pattern}},
        description="repeatable or comma-separated, any case; empty: all",
    )
    agent_id: str = ""
    label: str = ""
    tenant: str = Field(
        default="",
        max_length=63,
        # The schema states the name check_tenant applies (empty: no tenant filter).
        json_schema_extra={"pattern": f"^(?:{TENANT_PATTERN})?$"},
        description="only this tenant's",
    )
    page_size: int = Field(default=50, ge=1, le=TRANSACTIONS_PAGE.high)
    page_token: str = Field(
        default="",
        json_schema_extra={"pattern": f"^(?:{_TRANSACTION_ID})?$"},
        description="the next_page_token of the previous page (a transaction id); empty: "
        "the first page",
    )
    newest_first: bool = False
    created_after: float | None = Field(
        default=None,
        allow_inf_nan=False,
        description="unix seconds: only transactions created at or after it",
    )
    created_before: float | None = Field(
        default=None,
        allow_inf_nan=False,
        description="unix seconds: only transactions created before it",
    )


@dataclass(frozen=True)
class Call:
    """One request as an operation sees it: the path's parameters and the parsed body and
    query (``None`` where the operation has none)."""

    engine: Any  # agenttx.core.engine.Engine, or anything with its methods (tracing wraps it)
    path: dict[str, str]
    body: Any
    query: Any
    # Who calls (``agenttx.auth``: the request's API key); None without keys. Every engine
    # call gets it, so a key reaches only its tenant and, as an agent, its own transactions.
    caller: Caller | None = None
    body_bytes: int = 0  # the request body's size: what decides whether its work leaves the loop

    @property
    def transaction_id(self) -> str:
        return self.path["transaction_id"]


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # Starlette's syntax, the same as OpenAPI's: /v1/transactions/{transaction_id}
    operation_id: str
    summary: str
    reply: Any  # the protobuf message class of the reply
    call: Callable[[Call], Coroutine[Any, Any, Any]]  # -> an instance of ``reply``
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    body_optional: bool = False  # true iff an empty body means the model's defaults


async def _begin(c: Call) -> Any:
    b: BeginBody = c.body
    r = await c.engine.begin(
        agent_id=b.agent_id,
        metadata=b.metadata,
        policy=None if b.policy is None else b.policy.model_dump(),
        isolation=b.isolation,
        labels=b.labels,
        request_id=b.request_id,
        principal=b.principal,
        mode=b.mode,
        caller=c.caller,
    )
    return begin_reply(r)


def _arguments_text(arguments: Any) -> str:
    # json.dumps, not jsontext.compact: a NaN the body's parser let through must reach the
    # engine as text, where the JSON policy fails the step with a hint (compact would raise).
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)


async def _step(c: Call) -> Any:
    b: StepBody = c.body
    if b.arguments is not None and b.arguments_json is not None:
        raise InvalidArgument("send arguments (an object) or arguments_json (text), not both")
    # The object goes to the engine as text, as gRPC sends it, so the JSON policy (depth,
    # numbers, strings) judges it inside the step: a breach is a failed step with a hint.
    if b.arguments_json is not None:
        text = b.arguments_json
    else:  # the compact text, off the loop when the body was large enough to be parsed there
        arguments = b.arguments or {}
        text = await by_size(c.body_bytes, INLINE_JSON_CHARS, _arguments_text, arguments)
    r = await c.engine.execute_step(
        c.transaction_id,
        b.step_id,
        b.tool_name,
        text,
        b.raw_context,
        request_id=b.request_id,
        caller=c.caller,
    )
    return step_reply(r, _ALL_STRATEGIES)


async def _commit(c: Call) -> Any:
    b: CommitBody = c.body
    return commit_reply(
        await c.engine.commit(
            c.transaction_id,
            request_id=b.request_id,
            expected_revision=b.expected_revision,
            receipt_id=b.receipt_id,
            caller=c.caller,
        )
    )


async def _rollback(c: Call) -> Any:
    b: RollbackBody = c.body
    r = await c.engine.rollback(
        c.transaction_id, b.to_step, b.reason, request_id=b.request_id, caller=c.caller
    )
    return rollback_reply(r)


async def _get(c: Call) -> Any:
    return transaction_reply(await c.engine.get_transaction(c.transaction_id, caller=c.caller))


async def _list(c: Call) -> Any:
    q: ListQuery = c.query
    page = await c.engine.list_transactions_page(
        statuses=TX_STATUSES.parse(q.status),
        agent_id=q.agent_id or None,
        label=q.label or None,
        page_size=q.page_size,
        page_token=q.page_token,
        newest_first=q.newest_first,
        created_after=q.created_after,
        created_before=q.created_before,
        tenant=q.tenant or None,
        caller=c.caller,
    )
    return transactions_reply(page)


async def _audit(c: Call) -> Any:
    v = await c.engine.verify_audit(c.transaction_id, caller=c.caller)
    return pb.VerifyAuditResponse(results=[audit_wire.verification(v)])


async def _tools(c: Call) -> Any:
    return tools_reply(c.engine.list_tools())


_TX = "/v1/transactions/{transaction_id}"

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "POST",
        "/v1/transactions",
        "BeginTransaction",
        "Begin a transaction; its first step is next_step_id",
        pb.BeginTransactionResponse,
        _begin,
        body=BeginBody,
        body_optional=True,
    ),
    Operation(
        "POST",
        f"{_TX}/steps",
        "ExecuteStep",
        "Run one step (a tool call); a tool's failure is data in the reply",
        pb.ExecuteStepResponse,
        _step,
        body=StepBody,
    ),
    Operation(
        "POST",
        f"{_TX}/commit",
        "CommitTransaction",
        "Commit: publish the writes, release staged effects",
        pb.CommitTransactionResponse,
        _commit,
        body=CommitBody,
        body_optional=True,
    ),
    Operation(
        "POST",
        f"{_TX}/rollback",
        "RollbackTransaction",
        "Abort the transaction, or rewind it to a step with to_step",
        pb.RollbackTransactionResponse,
        _rollback,
        body=RollbackBody,
        body_optional=True,
    ),
    Operation(
        "GET",
        _TX,
        "GetTransaction",
        "One transaction: status, steps, graph, constraints, context",
        pb.GetTransactionResponse,
        _get,
    ),
    Operation(
        "GET",
        f"{_TX}/audit",
        "VerifyAudit",
        "Check the transaction's audit hash chain (an edited or missing record is named)",
        pb.VerifyAuditResponse,
        _audit,
    ),
    Operation(
        "GET",
        "/v1/transactions",
        "ListTransactions",
        "Transactions, oldest first (or newest_first), filtered, a page at a time",
        pb.ListTransactionsResponse,
        _list,
        query=ListQuery,
    ),
    Operation(
        "GET",
        "/v1/tools",
        "ListTools",
        "The registered tools with their effect class and JSON schemas",
        pb.ListToolsResponse,
        _tools,
    ),
)
