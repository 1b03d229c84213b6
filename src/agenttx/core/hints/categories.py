"""Hint categories: what kind of failure a hint describes, the sets the rollback controller
decides on, and the reference's coarser name of each category.

Invariants:
- ``Category`` values are our fine names; they are what the engine, the controller and the
  rule files use, and what our own wire fields carry (``error_category_detail``).
- ``REFERENCE_CATEGORY`` maps every ``Category`` to exactly one name of the reference
  server's vocabulary (``REFERENCE_CATEGORIES``); that name is what wire field 9
  (``error_category``) carries, so a client built for the reference reads names it knows.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "ARGUMENT_CATEGORIES",
    "LITERAL_CATEGORIES",
    "PERMANENT_CATEGORIES",
    "REFERENCE_CATEGORIES",
    "REFERENCE_CATEGORY",
    "TRANSIENT_CATEGORIES",
    "Category",
    "reference_category",
]


class Category(enum.StrEnum):
    """What kind of failure a hint describes. Values are wire-visible (``error_category``)."""

    UNRESOLVED_REFERENCE = "unresolved_reference"  # ${steps.N.path} names a key step N lacks
    UNAVAILABLE_REFERENCE = "unavailable_reference"  # ${steps.N…} names a step not completed
    UNKNOWN_TOOL = "unknown_tool"  # the step called a tool that is not registered
    FOREIGN_KEY = "foreign_key"  # a referenced row is missing (or a row is still referenced)
    UNIQUE_VIOLATION = "unique_violation"  # a row with the same unique value exists
    NOT_NULL = "not_null"  # a required column got no value
    MISSING_COLUMN = "missing_column"  # SQL names a column the table lacks
    MISSING_TABLE = "missing_table"  # SQL names a table that does not exist
    NOT_FOUND = "not_found"  # a record looked up by id does not exist
    MISSING_FIELD = "missing_field"  # input validation: a required field is absent
    KEY_ERROR = "key_error"  # code read a key the data does not have
    MISSING_ARGUMENT = "missing_argument"  # a function was called without a required argument
    UNEXPECTED_ARGUMENT = "unexpected_argument"  # an argument the tool does not declare
    OUT_OF_RANGE = "out_of_range"  # a value outside its declared bounds, length, pattern or choices
    NULL_ATTRIBUTE = "null_attribute"  # an attribute read on None / undefined / null
    NULL_POINTER = "null_pointer"  # Java NPE, Go nil dereference, .NET null reference
    INVALID_INTEGER = "invalid_integer"  # text that should have been a number
    TYPE_MISMATCH = "type_mismatch"  # a value of the wrong type
    PATH_ESCAPE = "path_escape"  # a path outside the sandbox ('..', absolute, symlink)
    FILE_NOT_FOUND = "file_not_found"  # no such file or directory
    PERMISSION_DENIED = "permission_denied"  # the OS or the database refused access
    RATE_LIMITED = "rate_limited"  # HTTP 429, throttling, quota
    HTTP_AUTH = "http_auth"  # HTTP 401/403, bad or missing credentials (API keys)
    QUOTA_EXHAUSTED = "quota_exhausted"  # the account's quota or credit is used up (billing)
    HTTP_NOT_FOUND = "http_not_found"  # HTTP 404, gRPC NOT_FOUND
    HTTP_CLIENT = "http_client"  # any other 4xx: the request itself was rejected
    SERVER_ERROR = "server_error"  # HTTP 5xx
    TIMEOUT = "timeout"  # deadline exceeded, timed out
    CONNECTION = "connection"  # refused, reset, unreachable, DNS failure
    MALFORMED_JSON = "malformed_json"  # JSON that does not parse
    UNKNOWN = "unknown"  # no rule matched: the fallback


# The controller retries the same step for these: the failure is in the outside world and the
# same call may well succeed a moment later, so no earlier step is at fault.
TRANSIENT_CATEGORIES: frozenset[str] = frozenset(
    c.value
    for c in (Category.TIMEOUT, Category.RATE_LIMITED, Category.CONNECTION, Category.SERVER_ERROR)
)

# The controller also retries the same step for these: the step's own arguments are wrong in a
# way the agent fixes by sending the step again with other arguments. Categories that name a key
# (key_error, not_null, foreign_key, …) are left out on purpose: there the bad value usually came
# from an earlier step, and the dependency jump to that step is the better move.
ARGUMENT_CATEGORIES: frozenset[str] = frozenset(
    c.value
    for c in (
        Category.UNKNOWN_TOOL,
        Category.MISSING_ARGUMENT,
        Category.UNEXPECTED_ARGUMENT,
        Category.OUT_OF_RANGE,
        Category.MISSING_FIELD,
        Category.INVALID_INTEGER,
        Category.TYPE_MISMATCH,
        Category.MALFORMED_JSON,
    )
)

# Retrying cannot help and no earlier step is at fault: a credential is wrong or missing, or the
# account behind it has no quota left. Someone outside the transaction must fix it, so the
# controller should neither retry in a loop nor undo earlier steps for these.
PERMANENT_CATEGORIES: frozenset[str] = frozenset(
    c.value for c in (Category.HTTP_AUTH, Category.QUOTA_EXHAUSTED)
)

# The controller retries the same step for these only when the value the hint names is a
# literal of the step's own arguments (no reference, implicit edge or state read supplied it):
# a lookup or constraint failure on a value the agent typed itself is fixed by resending the
# step, while the same failure on a value an earlier step produced is that step's fault.
LITERAL_CATEGORIES: frozenset[str] = frozenset(
    c.value
    for c in (
        Category.NOT_FOUND,
        Category.FOREIGN_KEY,
        Category.UNIQUE_VIOLATION,
        Category.NOT_NULL,
        Category.KEY_ERROR,
        Category.FILE_NOT_FOUND,
        Category.HTTP_NOT_FOUND,
        Category.MISSING_COLUMN,
        Category.MISSING_TABLE,
        # a path outside the sandbox: typed by the agent, it resends the step with another one;
        # handed on from an earlier step's output, that step made it
        Category.PATH_ESCAPE,
    )
)

# The reference server's whole category vocabulary, in its order.
REFERENCE_CATEGORIES: tuple[str, ...] = (
    "unresolved_reference",
    "unknown_tool",
    "foreign_key_violation",
    "unique_violation",
    "not_null_violation",
    "missing_schema_object",
    "missing_record",
    "missing_argument",
    "missing_key",
    "null_reference",
    "invalid_value",
    "permission_denied",
    "file_not_found",
    "rate_limited",
    "authentication",
    "http_client_error",
    "http_server_error",
    "timeout",
    "connection_failure",
    "malformed_json",
    "unknown",
)

# Fine category -> the reference's name for the same kind of failure. Where we split one of
# its categories in two (columns and tables, None and Java's null, …) both map back to it;
# the choices that are not one-to-one are explained in docs/hints.md.
REFERENCE_CATEGORY: Mapping[str, str] = MappingProxyType(
    {
        Category.UNRESOLVED_REFERENCE: "unresolved_reference",
        Category.UNAVAILABLE_REFERENCE: "unresolved_reference",
        Category.UNKNOWN_TOOL: "unknown_tool",
        Category.FOREIGN_KEY: "foreign_key_violation",
        Category.UNIQUE_VIOLATION: "unique_violation",
        Category.NOT_NULL: "not_null_violation",
        Category.MISSING_COLUMN: "missing_schema_object",
        Category.MISSING_TABLE: "missing_schema_object",
        Category.NOT_FOUND: "missing_record",
        Category.MISSING_FIELD: "missing_argument",
        Category.KEY_ERROR: "missing_key",
        Category.MISSING_ARGUMENT: "missing_argument",
        Category.UNEXPECTED_ARGUMENT: "invalid_value",
        Category.OUT_OF_RANGE: "invalid_value",
        Category.NULL_ATTRIBUTE: "null_reference",
        Category.NULL_POINTER: "null_reference",
        Category.INVALID_INTEGER: "invalid_value",
        Category.TYPE_MISMATCH: "invalid_value",
        Category.PATH_ESCAPE: "permission_denied",
        Category.FILE_NOT_FOUND: "file_not_found",
        Category.PERMISSION_DENIED: "permission_denied",
        Category.RATE_LIMITED: "rate_limited",
        Category.HTTP_AUTH: "authentication",
        Category.QUOTA_EXHAUSTED: "rate_limited",
        Category.HTTP_NOT_FOUND: "http_client_error",
        Category.HTTP_CLIENT: "http_client_error",
        Category.SERVER_ERROR: "http_server_error",
        Category.TIMEOUT: "timeout",
        Category.CONNECTION: "connection_failure",
        Category.MALFORMED_JSON: "malformed_json",
        Category.UNKNOWN: "unknown",
    }
)


def reference_category(category: str) -> str:
    """The reference's name for ``category`` (a ``Category`` value); ``""`` stays ``""`` (no
    failure) and a name we do not know is ``unknown``."""
    if not category:
        return ""
    return REFERENCE_CATEGORY.get(category, "unknown")
