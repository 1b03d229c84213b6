"""What one row of the operation table holds (``Row``), what a call brings to it
(``CallContext``), and how a row is reached over HTTP (``HttpRoute``), as an MCP tool
(``McpTool``) and as a CLI command (``CliCommand``, declared in cli_bindings.py: the CLI reads
it without importing the table).

A row's ``run`` is the whole operation once: the wire request in, the engine call, the wire
reply out. A surface only builds the request (gRPC decodes it; HTTP fills it from the path,
body and query) and the context, and sends the reply back in its own form.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message
from pydantic import BaseModel

from agenttx.api.next_calls import Next
from agenttx.api.operations.cli_bindings import CliCommand
from agenttx.api.operations.filters import StatusFilter
from agenttx.numbers import WholeNumber
from agenttx.types import Caller, Strategy


@dataclass(frozen=True, slots=True)
class CallContext:
    """One call as the surface knows it, beside its request."""

    # Who calls (``agenttx.auth``: the call's API key); None without keys, the local operator.
    # Every engine call gets it, so a key reaches only its tenant and, as an agent, its own
    # transactions.
    caller: Caller | None
    # Our strategies beyond the reference's that the caller can name: gRPC from the caller's
    # ``agenttx-accept-strategies`` metadata; HTTP and MCP read names, so all of them.
    strategies: frozenset[Strategy]
    # The largest reply the surface can send, or None: gRPC's message cap trims a long
    # history to fit (ListSteps reads the rest); HTTP sends the whole of it.
    message_limit: int | None


# The engine (``agenttx.core.engine.Engine``, or anything with its methods: the tracing
# wrapper), the request message, the call's context → the reply message.
Run = Callable[[Any, Any, CallContext], Coroutine[Any, Any, Message]]


class Access(enum.Enum):
    """Who may call an operation: what the engine checks (``core/access.py``,
    docs/security.md) before it acts. With no API keys every call is the operator's."""

    KEY = "any key"  # begin, the tool catalogue: any valid key
    LISTING = "any key, listing what it may read"  # filtered by the READ rule in the query
    READ = "read"  # the owner, or an approver or admin of its tenant
    ACT = "act"  # the owner, or an admin of its tenant
    # An approver or admin of its tenant; the decision itself is an approver's, never the
    # transaction's own principal's (``core/approvals.py``, ``core/compensation_approval.py``).
    APPROVE = "approve"


class Retry(enum.Enum):
    """What a retry of the same call does (a lost reply, a timeout)."""

    REQUEST_ID = "with request_id"  # the same request_id gets the stored reply, no second run
    NATURAL = "naturally"  # a read (or a preview): repeating it changes nothing that was
    NOT = "not"  # it acts again, or is refused as already done


@dataclass(frozen=True)
class HttpRoute:
    """One ``/v1`` route of a row: the JSON body and query are validated by their pydantic
    models, then filled into the row's request message by field name (``api/http/v1``)."""

    method: str
    path: str  # Starlette's syntax, the same as OpenAPI's: /v1/transactions/{transaction_id}
    summary: str
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    body_optional: bool = False  # true iff an empty body means the model's defaults
    operation_id: str = ""  # "": the row's RPC name (a second route of one RPC has its own)
    statuses: StatusFilter | None = None  # reads the query's ``status`` into ``statuses``


@dataclass(frozen=True)
class McpInput:
    """One argument of a row's MCP tool, declared strictly to the model by ``schema`` and read
    leniently (``api/mcp/arguments.py``): by the type of the row's request field of the same
    name (text, a number within the field's and the schema's bounds, a flag, a list of
    strings), or as ``reading`` says when it is no such field or reads otherwise."""

    name: str  # the argument's name, a field of the row's request unless ``reading`` says
    schema: Mapping[str, Any]  # its JSON Schema, with a description written for a model
    required: bool = False  # in the schema's ``required``; read as required too
    # How it is read when not by its request field: "text", "flag", "strings", "json" (an
    # object or its text), or a whole number within these bounds (a page size that reads 0
    # as the default, which the schema's minimum would refuse).
    reading: str | WholeNumber = ""


@dataclass(frozen=True)
class Hints:
    """An MCP tool's annotations: what a host may conclude before calling it (some ask a
    person before each call hinted destructive; docs/mcp.md, Tools)."""

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool


@dataclass(frozen=True)
class McpTool:
    """A row as an MCP tool: ``tools/list`` shows it (``api/mcp/catalog.py`` makes the tool
    from this), ``tools/call`` reads its arguments by ``inputs``, runs the row's operation and
    answers with the row's result shaper (``api/mcp/handlers.py``), or generically: the
    row's request filled from the arguments, ``{"ok": true, **the reply's fields}`` and
    ``text`` (``handlers.generic``)."""

    name: str
    title: str
    description: str  # for a model: what it does, when to call it, what comes next
    hints: Hints
    inputs: tuple[McpInput, ...]
    # The generic result's one line for the model: ``str.format_map`` of the reply's fields
    # (nested ones by key: ``{transaction[status]}``); "" for a tool whose result is shaped.
    text: str = ""
    # The result fields the output schema declares and types (None: every field of the
    # reply, typed from the reply message), and those it names in its description only (the
    # schema-cost rule: ``api/mcp/catalog.py``).
    output: Mapping[str, Mapping[str, Any]] | None = None
    also: tuple[str, ...] = ()
    # True iff listed only when the operator asks (``--mcp-effect-tools``): the outbox's tools,
    # whose retry sends an email or a webhook again, an operator's decision.
    opt_in: bool = False
    # True iff its schemas are as first published, bare: the output declares ``ok`` and the
    # fields only (not the refusal's, none required), the input no empty ``required`` (the
    # outbox's tools; ``tools/list`` stays byte for byte what clients saw).
    bare: bool = False


@dataclass(frozen=True)
class Row:
    """One operation. ``run`` is written once; the gRPC method, the HTTP routes, the MCP tool
    and the CLI command are derived from the rest."""

    name: str  # the domain name: the engine's (and ``TransactionService``'s) method
    rpc: str  # the method of ``agenttx.v1.AgentTxService``
    request: type[Message]  # the one request type every surface builds
    reply: type[Message]
    run: Run
    access: Access
    retry: Retry
    # The reasons (``agenttx.errors.ERROR_CODES``) it may refuse with, each with what the
    # caller does next in each of its cases (``api/next_calls.py``, ``NEXT_ON``): the kind of
    # the continuation every surface gives and the rows it names.
    errors: Mapping[str, tuple[Next, ...]]
    http: tuple[HttpRoute, ...] = ()  # none: not on /v1 (yet)
    mcp: McpTool | None = None  # None: no MCP tool (``mcp_bindings.py`` holds the bindings)
    # None: no CLI command (``api/operations/cli_bindings.py``: each row's, made by cli/rows.py).
    cli: CliCommand | None = None
