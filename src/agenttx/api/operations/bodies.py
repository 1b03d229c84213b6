"""The JSON request models of ``/v1``: each row's body and query as a strict pydantic model,
with the engine's limits stated where JSON Schema can say them. The routes validate with
them and the OpenAPI document shows them (``api/http/v1``); the validated values are then filled
into the row's request message by field name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from agenttx.api.operations.filters import StatusFilter
from agenttx.core.limits import MAX_TRANSACTION_ID_BYTES
from agenttx.core.outbox import STATUSES
from agenttx.numbers import (
    AFTER_ID,
    EFFECTS_PAGE,
    EXPECTED_REVISION,
    MAX_INT64,
    STEP_ID,
    TO_STEP,
    TRANSACTIONS_PAGE,
)
from agenttx.types import (
    MAX_POLICY_DEPTH,
    MAX_STEP_RETRIES,
    REPLAY_FACTOR_RANGE,
    TENANT_PATTERN,
    TxStatus,
)

# A transaction id as a path or a page token may spell it: visible ASCII within the engine's
# limit ("tx_" and 32 hex digits in practice).
TRANSACTION_ID_PATTERN = f"[!-~]{{1,{MAX_TRANSACTION_ID_BYTES}}}"


# A reason that must be given holds a character Python's ``str.strip`` keeps (the engine's
# blank check, ``core.limits.check_reason``): JSON Schema's ``\\s`` is another set (it has no
# U+001C..U+001F or U+0085, and it has U+FEFF), so the characters are listed.
_PY_WHITESPACE = (
    "\\t\\n\\u000b\\u000c\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680"
    "\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)
NOT_BLANK = f"[^{_PY_WHITESPACE}]"


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
    # The schema says what the route refuses: arguments and arguments_json both given
    # (non-null).
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
        json_schema_extra={"pattern": f"^(?:{TRANSACTION_ID_PATTERN})?$"},
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


Role = str  # "approver", "admin", "agent" (docs/security.md)


class ApproveBody(_Body):
    receipt_id: str = Field(min_length=1, max_length=64, description="preview's receipt_id")
    principal: str = Field(
        default="", max_length=256, description="who approves (ignored with API keys)"
    )
    roles: list[Role] = Field(default_factory=lambda: ["approver"], max_length=32)


class RefuseBody(_Body):
    receipt_id: str = Field(min_length=1, max_length=64, description="preview's receipt_id")
    reason: str = Field(
        min_length=1,
        max_length=4096,
        description="why, and what would make the change acceptable (at most 4096 bytes)",
        pattern=NOT_BLANK,
    )
    principal: str = Field(
        default="", max_length=256, description="who refuses (ignored with API keys)"
    )
    roles: list[Role] = Field(default_factory=lambda: ["approver"], max_length=32)


class RequestBody(_Body):
    request_id: str = Field(default="", max_length=256)


class EmptyBody(_Body):
    """An operation that takes no fields (``{}`` or no body)."""


class ResolveBody(_Body):
    outcome: Literal["happened", "not_happened"]
    output: Any = Field(default=None, description="with happened: the step's output")
    reason: str = Field(default="", max_length=4096, description="kept in the audit chain")


class CompensateBody(_Body):
    reason: str = Field(default="", max_length=4096)
    principal: str = Field(default="", max_length=256, description="ignored with API keys")
    preview: bool = Field(default=False, description="only show what it would run")


class ApproveCompensationBody(_Body):
    principal: str = Field(default="", max_length=256, description="ignored with API keys")
    roles: list[Role] = Field(default_factory=lambda: ["approver"], max_length=32)


class RefuseCompensationBody(_Body):
    reason: str = Field(
        min_length=1,
        max_length=4096,
        description="why the undo must not run (at most 4096 bytes)",
        pattern=NOT_BLANK,
    )
    principal: str = Field(default="", max_length=256, description="ignored with API keys")
    roles: list[Role] = Field(default_factory=lambda: ["approver"], max_length=32)


EFFECT_STATUSES = StatusFilter("effect status", STATUSES)


class EffectsQuery(_Body):
    model_config = _Body.model_config | {"strict": False}  # query strings are text

    status: list[str] = Field(
        default_factory=list,
        json_schema_extra={"items": {"type": "string", "pattern": EFFECT_STATUSES.pattern}},
        description="pending, delivering, delivered, dead (repeatable or comma-separated, "
        "any case); empty: all",
    )
    after_id: int = Field(
        default=0,
        ge=AFTER_ID.low,
        le=AFTER_ID.high,
        description="the next_after_id of the last page",
    )
    page_size: int = Field(default=100, ge=1, le=EFFECTS_PAGE.high)


# One route per key (``FindTransaction``'s request holds one of them, a oneof): neither and both
# cannot be sent, and each route's document says its one parameter is required.
class FindByReceiptQuery(_Body):
    model_config = _Body.model_config | {"strict": False}  # query strings are text

    receipt_id: str = Field(min_length=1, max_length=64, description="a preview's receipt_id")


class FindByRequestQuery(_Body):
    model_config = _Body.model_config | {"strict": False}

    request_id: str = Field(
        min_length=1, max_length=256, description="the request_id a call was sent with"
    )
