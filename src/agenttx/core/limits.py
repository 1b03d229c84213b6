"""Request limits (the reference's caps) and their error messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agenttx import jsonpolicy
from agenttx.errors import InvalidArgument, clip
from agenttx.jsontext import compact
from agenttx.types import MAX_PRINCIPAL_BYTES  # one bound for a principal, keys' included

MAX_AGENT_ID_BYTES = 256
MAX_METADATA_ENTRIES = 64
MAX_METADATA_VALUE_BYTES = 4096
MAX_TOOL_NAME_BYTES = 128
MAX_ARGUMENTS_BYTES = 1 << 20
MAX_RAW_CONTEXT_BYTES = 1 << 20
MAX_STATE_KEY_BYTES = 1024
MAX_STATE_VALUE_BYTES = 1 << 20
# A step's arguments after its references are resolved: the settings
# ``max_resolved_arguments_bytes`` and ``max_references`` (``agenttx.settings``).

# The largest message the gRPC server sends or receives (the reference's cap); a step's reply
# must fit in it, or the step would be durable and its reply undeliverable.
MAX_REPLY_BYTES = 4 << 20
# What a step reply holds besides its output and constraints: ids, status, strategy, hint,
# category, abort reason, protobuf framing — generously, so new reply fields still fit.
REPLY_FRAME_BYTES = 64 << 10
# A step's output, as UTF-8 JSON, when the transaction has no constraints yet.
MAX_OUTPUT_BYTES = MAX_REPLY_BYTES - REPLY_FRAME_BYTES


def reply_room(constraints: Sequence[str]) -> int:
    """How many UTF-8 bytes a step's output may take so that its reply, which repeats the
    transaction's constraints, stays under ``MAX_REPLY_BYTES``."""
    # 4 bytes of protobuf framing per repeated string is an upper bound for these lengths.
    return MAX_OUTPUT_BYTES - sum(len(c.encode()) + 4 for c in constraints)


# Our ids are "tx_" + 32 hex digits; anything much longer cannot name a transaction.
MAX_TRANSACTION_ID_BYTES = 128


def check_transaction_id(transaction_id: str) -> None:
    if not isinstance(transaction_id, str):
        raise InvalidArgument(
            f"transaction_id must be a string, got {type(transaction_id).__name__}"
        )
    if not transaction_id or not transaction_id.strip():
        raise InvalidArgument("transaction_id is required")
    if len(transaction_id) > MAX_TRANSACTION_ID_BYTES // 4 and (
        len(transaction_id.encode("utf-8", "surrogatepass")) > MAX_TRANSACTION_ID_BYTES
    ):
        raise InvalidArgument(
            f"invalid argument: transaction_id {clip(transaction_id, 40)!r} is over "
            f"{MAX_TRANSACTION_ID_BYTES} bytes; no transaction has such an id"
        )


def check_begin(agent_id: str, metadata: dict[str, str]) -> None:
    if len(agent_id.encode()) > MAX_AGENT_ID_BYTES:
        raise InvalidArgument(f"invalid argument: agent_id exceeds {MAX_AGENT_ID_BYTES} bytes")
    if len(metadata) > MAX_METADATA_ENTRIES:
        raise InvalidArgument(f"metadata exceeds {MAX_METADATA_ENTRIES} entries")
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidArgument("metadata keys and values must be strings")
        if len(k.encode()) + len(v.encode()) > MAX_METADATA_VALUE_BYTES:
            raise InvalidArgument(
                f"metadata entry {k[:40]!r} exceeds {MAX_METADATA_VALUE_BYTES} bytes"
            )


MAX_LABELS = 32
MAX_LABEL_BYTES = 128


def check_labels(labels: Sequence[str]) -> None:
    if len(labels) > MAX_LABELS:
        raise InvalidArgument(f"labels exceed {MAX_LABELS} entries")
    for label in labels:
        if not isinstance(label, str) or not 1 <= len(label.encode()) <= MAX_LABEL_BYTES:
            raise InvalidArgument(f"each label must be 1-{MAX_LABEL_BYTES} bytes of text")


def check_step_request(step_id: int, tool_name: str, raw_context: str) -> None:
    if step_id < 1:
        raise InvalidArgument("step_id must be >= 1")
    if not 1 <= len(tool_name.encode()) <= MAX_TOOL_NAME_BYTES:
        raise InvalidArgument(f"tool_name must be 1-{MAX_TOOL_NAME_BYTES} bytes")
    if len(raw_context.encode("utf-8", "surrogatepass")) > MAX_RAW_CONTEXT_BYTES:
        raise InvalidArgument(f"raw_context exceeds {MAX_RAW_CONTEXT_BYTES} bytes")


def arguments_text(arguments: Any) -> str:
    """The arguments as JSON text, size-checked; anything but text is serialised compactly
    and held to the JSON policy (``agenttx.jsonpolicy``) here, so a bad value from an
    embedded caller is an ``InvalidArgument``. Text is parsed under the same policy inside
    the step, where a violation is a step failure with a hint (an agent wrote it)."""
    if arguments is None:
        return ""
    if isinstance(arguments, str | bytes):
        try:
            text = arguments.decode() if isinstance(arguments, bytes) else arguments
            size = len(text.encode())
        except UnicodeError:
            # Such text could not even be stored as the failed step's arguments.
            raise InvalidArgument(
                "arguments_json is not valid UTF-8 text (invalid bytes or a lone surrogate)"
            ) from None
    else:
        try:
            text = compact(arguments)
            size = jsonpolicy.check(arguments, text)
        except jsonpolicy.JsonRefused as exc:
            raise InvalidArgument(f"arguments are refused ({exc.rule}): {exc.message}") from None
        except (TypeError, ValueError) as exc:
            # The encoder refused it (NaN, a set, a cycle): name the policy's rule if one is
            # broken, as for every other value outside the policy.
            refused = jsonpolicy.refusal(arguments)
            if refused is not None:
                raise InvalidArgument(
                    f"arguments are not JSON ({refused.rule}): {refused.message}"
                ) from None
            raise InvalidArgument(f"arguments are not JSON-serialisable: {exc}") from None
    if size > MAX_ARGUMENTS_BYTES:
        raise InvalidArgument(f"arguments_json exceeds {MAX_ARGUMENTS_BYTES} bytes")
    return text


def check_state_key(key: str) -> None:
    if not isinstance(key, str):
        raise InvalidArgument(f"invalid argument: a state key must be a string, not {key!r:.40}")
    if not key:
        raise InvalidArgument(
            f"invalid argument: a state key is empty; state keys are 1-{MAX_STATE_KEY_BYTES} bytes"
        )
    if len(key) > MAX_STATE_KEY_BYTES // 4 and (
        len(key.encode("utf-8", "surrogatepass")) > MAX_STATE_KEY_BYTES
    ):
        raise InvalidArgument(
            f"invalid argument: state key {clip(key, 40)!r} is too long; state keys are "
            f"1-{MAX_STATE_KEY_BYTES} bytes"
        )


# -- compensation (``docs/compensation.md``) ------------------------------------------------

# A person's reason — why to compensate, why a change or an undo is refused, why an operator
# settled a step so — is a sentence or two, kept in the audit chain (and a refusal's in the
# receipt row, where the agent that must answer it reads it).
MAX_REASON_BYTES = 4096
MAX_COMPENSATION_REASON_BYTES = MAX_REASON_BYTES
MAX_REFUSAL_REASON_BYTES = MAX_REASON_BYTES
MAX_ROLES = 32
MAX_ROLE_BYTES = 128


def check_reason(reason: str, *, required: str = "") -> None:
    """A reason within ``MAX_REASON_BYTES``; with ``required`` (what to say), not blank."""
    if required and not reason.strip():
        raise InvalidArgument(f"invalid argument: reason is required: {required}")
    size = len(reason.encode("utf-8", "surrogatepass"))
    if size > MAX_REASON_BYTES:
        raise InvalidArgument(
            f"invalid argument: reason is {size} bytes, over the limit of "
            f"{MAX_REASON_BYTES}; say why in fewer words"
        )


def check_compensation_reason(reason: str) -> None:
    check_reason(reason)


_WHY_CHANGE = "say why the change is refused and what would make it acceptable (the agent reads it)"


def check_refusal_reason(reason: str, *, say: str = _WHY_CHANGE) -> None:
    """A refusal's reason (of a commit's change; of an undo, with its own ``say``): not
    blank, at most ``MAX_REFUSAL_REASON_BYTES``."""
    check_reason(reason, required=say)


def check_approval(principal: str, roles: Sequence[str]) -> None:
    """Who approves (a commit's receipt, a compensation) and the roles it claims."""
    size = len(principal.encode("utf-8", "surrogatepass"))
    if size > MAX_PRINCIPAL_BYTES:
        raise InvalidArgument(
            f"invalid argument: principal is {size} bytes, over the limit of {MAX_PRINCIPAL_BYTES}"
        )
    check_role_list(roles)


def check_role_list(roles: Sequence[str]) -> None:
    if len(roles) > MAX_ROLES:
        raise InvalidArgument(
            f"invalid argument: {len(roles)} roles, over the limit of {MAX_ROLES}; send only "
            "the roles that matter (approver)"
        )
    for role in roles:
        if len(role.encode("utf-8", "surrogatepass")) > MAX_ROLE_BYTES:
            raise InvalidArgument(
                f"invalid argument: role {clip(role, 40)!r} is over {MAX_ROLE_BYTES} bytes"
            )


DEFAULT_RETRY_AFTER_MS = 5_000  # the seed's default earliest reconcile time
MAX_RETRY_AFTER_MS = 86_400_000  # one day: a later time is clamped to it


def retry_ms(ms: int | None) -> int:
    """An earliest-reconcile delay in ms (a step's or an undo's): the default when unsaid,
    clamped to a day."""
    if ms is None:
        return DEFAULT_RETRY_AFTER_MS
    return max(0, min(int(ms), MAX_RETRY_AFTER_MS))
