"""One driver per surface, each behind the one interface the conformance suite calls:
``await driver.call(operation, **inputs) -> Outcome`` and ``await driver.offers(operation)``.

An operation is named as ``agenttx.TransactionService`` names it (``begin``, ``execute_step``,
``compensation_plan``, …) and takes the contract's inputs under the contract's names; each
driver says them in its surface's own words (an RPC and its request message, an MCP tool and
its arguments, a ``/v1`` route and its body, a CLI command line). The reply comes back as the
surface gave it; ``Outcome.view`` reads fields from it the same way whatever the surface
(attributes or keys, enum values by their short name), so two surfaces' outcomes compare.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, Protocol

import click
import grpc
from click.testing import CliRunner
from mcp import Client

from agenttx.api.fields import message_fields
from agenttx.cli import main
from agenttx.error_details import from_metadata, next_from_metadata
from agenttx.errors import AgentTxError
from agenttx.wire import agenttx_pb2 as pb
from http_harness import assert_error_shape, request

ABSENT = "<absent>"  # a field the reply does not carry: never equal to a real value

# The wire's enum names with their prefix ("STEP_STATUS_SUCCESS"); the short name is the value
# the embedded engine, MCP and ``/v1`` give ("SUCCESS").
_ENUM_NAMES = {
    value.name: value.name.removeprefix(prefix)
    for enum_type in pb.DESCRIPTOR.enum_types_by_name.values()
    for prefix in [enum_type.values[0].name.removesuffix("UNSPECIFIED")]
    for value in enum_type.values
}


def plain(value: Any) -> Any:
    """``value`` with enums by their short name, dicts and sequences copied the same way."""
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, str):
        return _ENUM_NAMES.get(value, value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def field(reply: Any, path: str) -> Any:
    """The field ``path`` of ``reply``: ``a.b`` one inside the other, ``a[].b`` the ``b`` of
    each element of list ``a``; read as a key of a dict or an attribute of an object."""
    head, dot, rest = path.partition(".")
    each = head.endswith("[]")
    name = head.removesuffix("[]")
    value = reply.get(name, ABSENT) if isinstance(reply, Mapping) else getattr(reply, name, ABSENT)
    if value is ABSENT or not dot:
        return plain(value)
    if each:
        return [field(item, rest) for item in value]
    return field(value, rest)


@dataclass(frozen=True)
class Outcome:
    """What a call came to: ``ok`` and the reply, or the refusal's reason code; and, in the
    surface's own form, what its caller received: ``text`` (all of it, for the words a case
    says it holds), ``next`` (a refusal's continuation, in the surface's own vocabulary) and
    ``code`` (the gRPC status, the HTTP status, the CLI's exit status)."""

    ok: bool
    reason: str = ""  # the refusal's reason code (WRONG_STEP, NOT_FOUND, …); "" when ok
    reply: Any = None  # the reply as the surface gave it; None when refused
    text: str = ""  # everything the caller received, as text
    next: Mapping[str, Any] = dataclass_field(default_factory=dict)  # a refusal's next call
    code: str = ""  # the surface's own status: "FAILED_PRECONDITION", "409", "1"; "" if none
    message: str = ""  # a refusal's words, without its continuation
    details: Mapping[str, Any] | None = None  # a refusal's fields, where the surface has them

    def view(self, names: tuple[str, ...]) -> dict[str, Any]:
        """``ok``, ``reason`` and the fields ``names`` of the reply (none when refused)."""
        fields = {name: field(self.reply, name) for name in names} if self.ok else {}
        return {"ok": self.ok, "reason": self.reason, "fields": fields}


class Driver(Protocol):
    name: str
    store_url: str  # the store behind the surface's engine (for SQL run behind its back)

    async def call(self, operation: str, **inputs: Any) -> Outcome:
        """Run ``operation`` with the contract's ``inputs`` on this surface."""

    async def offers(self, operation: str) -> bool:
        """Whether the surface has the operation at all (its tool, route or command)."""


# --------------------------------------------------------------------------- embedded, client


class ServiceDriver:
    """A ``TransactionService``: the embedded engine, or our async or blocking client on a
    server (gRPC through the client library). The inputs are the contract's keyword arguments
    as they are; a refusal is the error raised, with its reason."""

    store_url = ""  # the store behind its engine: the fixture sets it

    def __init__(
        self, name: str, service: Any, *, blocking: bool = False, caller: Any = None
    ) -> None:
        self.name = name
        self.service = service
        self.blocking = blocking  # our blocking client: each call on a worker thread
        self.caller = caller  # the engine's ``Caller`` each call is made as (None: the default)

    async def call(self, operation: str, **inputs: Any) -> Outcome:
        method = getattr(self.service, operation)
        if self.caller is not None:
            inputs = {**inputs, "caller": self.caller}
        try:
            if self.blocking:
                reply = await asyncio.to_thread(method, **inputs)
            else:
                reply = await method(**inputs)
        except AgentTxError as exc:
            said = f"{exc.message} {exc.details()}"
            return Outcome(False, exc.reason, text=said, message=exc.message, details=exc.details())
        return Outcome(True, reply=reply, text=repr(reply))

    async def offers(self, operation: str) -> bool:
        return callable(getattr(self.service, operation, None))


# --------------------------------------------------------------------------- gRPC, a raw stub


def _step_request(i: dict[str, Any]) -> Any:
    arguments = i.pop("arguments", None)
    return pb.ExecuteStepRequest(**i, arguments_json=json.dumps(arguments) if arguments else "")


def _resolve_request(i: dict[str, Any]) -> Any:
    output = i.pop("output", None)
    return pb.ResolveStepRequest(**i, output_json=json.dumps(output) if output else "")


# Each operation's RPC and how the contract's inputs make its request message (the request's
# field names are the contract's, but for the JSON-encoded ones).
GRPC: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {
    "begin": ("BeginTransaction", lambda i: pb.BeginTransactionRequest(**i)),
    "execute_step": ("ExecuteStep", _step_request),
    "commit": ("CommitTransaction", lambda i: pb.CommitTransactionRequest(**i)),
    "rollback": ("RollbackTransaction", lambda i: pb.RollbackTransactionRequest(**i)),
    "get_transaction": ("GetTransaction", lambda i: pb.GetTransactionRequest(**i)),
    "preview_commit": ("PreviewCommit", lambda i: pb.PreviewCommitRequest(**i)),
    "approve_commit": ("ApproveCommit", lambda i: pb.ApproveCommitRequest(**i)),
    "refuse_commit": ("RefuseCommit", lambda i: pb.RefuseCommitRequest(**i)),
    "undo_step": ("UndoStep", lambda i: pb.UndoStepRequest(**i)),
    "redo_step": ("RedoStep", lambda i: pb.RedoStepRequest(**i)),
    "reconcile_step": ("ReconcileStep", lambda i: pb.ReconcileStepRequest(**i)),
    "resolve_step": ("ResolveStep", _resolve_request),
    "compensate": ("CompensateTransaction", lambda i: pb.CompensateTransactionRequest(**i)),
    "compensation_plan": (
        "CompensateTransaction",
        lambda i: pb.CompensateTransactionRequest(**i, preview=True),
    ),
    "approve_compensation": ("ApproveCompensation", lambda i: pb.ApproveCompensationRequest(**i)),
    "refuse_compensation": ("RefuseCompensation", lambda i: pb.RefuseCompensationRequest(**i)),
    "verify_audit": ("VerifyAudit", lambda i: pb.VerifyAuditRequest(**i)),
    "list_effects": ("ListEffects", lambda i: pb.ListEffectsRequest(**i)),
    "retry_effect": ("RetryEffect", lambda i: pb.RetryEffectRequest(**i)),
    "find_transaction": ("FindTransaction", lambda i: pb.FindTransactionRequest(**i)),
    "list_transactions": ("ListTransactions", lambda i: pb.ListTransactionsRequest(**i)),
}


def only_result(reply: dict[str, Any]) -> Any:
    """A VerifyAudit reply's one verification: the engine answers one transaction's check."""
    [result] = reply["results"]
    return result


class GrpcDriver:
    """The generated async stub on a server, as any gRPC client calls it; a refusal's reason
    is the ``ErrorInfo`` the trailing metadata carries."""

    store_url = ""  # the store behind its engine: the fixture sets it

    name = "grpc"

    def __init__(self, stub: Any, *, key: str | None = None) -> None:
        self.stub = stub
        # The API key each call carries (None: none, as on a server without keys).
        self.metadata = () if key is None else (("authorization", f"Bearer {key}"),)

    async def call(self, operation: str, **inputs: Any) -> Outcome:
        rpc, make = GRPC[operation]
        try:
            call = getattr(self.stub, rpc)
            reply = await call(make(dict(inputs)), timeout=30, metadata=self.metadata)
        except grpc.aio.AioRpcError as exc:
            trailers = exc.trailing_metadata()
            reason, details = from_metadata(trailers)
            return Outcome(
                False,
                reason or exc.code().name,
                text=f"{exc.details()} {trailers}",
                next=next_from_metadata(trailers),
                code=exc.code().name,
                message=exc.details() or "",
                details=details,
            )
        fields = message_fields(reply)  # enums by name, *_json parsed: as /v1 and MCP give them
        return Outcome(
            True,
            reply=only_result(fields) if operation == "verify_audit" else fields,
            text=str(reply),
            code="OK",
        )

    async def offers(self, operation: str) -> bool:
        return operation in GRPC and hasattr(self.stub, GRPC[operation][0])


# --------------------------------------------------------------------------- HTTP /v1

_TX = "/v1/transactions/{transaction_id}"
_STEP = _TX + "/steps/{step_id}"

# Each operation's method and route; the route's parameters come from the inputs, the rest is
# the JSON body (POST) or the query (GET).
HTTP: dict[str, tuple[str, str, dict[str, Any]]] = {
    "begin": ("POST", "/v1/transactions", {}),
    "execute_step": ("POST", _TX + "/steps", {}),
    "commit": ("POST", _TX + "/commit", {}),
    "rollback": ("POST", _TX + "/rollback", {}),
    "get_transaction": ("GET", _TX, {}),
    "preview_commit": ("POST", _TX + "/preview", {}),
    "approve_commit": ("POST", _TX + "/approve", {}),
    "refuse_commit": ("POST", _TX + "/refuse", {}),
    "undo_step": ("POST", _TX + "/undo", {}),
    "redo_step": ("POST", _TX + "/redo", {}),
    "reconcile_step": ("POST", _STEP + "/reconcile", {}),
    "resolve_step": ("POST", _STEP + "/resolve", {}),
    "compensate": ("POST", _TX + "/compensate", {}),
    "compensation_plan": ("POST", _TX + "/compensate", {"preview": True}),
    "approve_compensation": ("POST", _TX + "/approve-compensation", {}),
    "refuse_compensation": ("POST", _TX + "/refuse-compensation", {}),
    "verify_audit": ("GET", _TX + "/audit", {}),
    "list_effects": ("GET", _TX + "/effects", {}),
    "retry_effect": ("POST", _TX + "/effects/{effect_id}/retry", {}),
    "find_transaction": ("GET", "/v1/lookup/by-receipt", {}),  # the cases find by receipt
    "list_transactions": ("GET", "/v1/transactions", {}),
}


class HttpDriver:
    """Plain HTTP requests to a server's ``/v1`` routes (no client library between the test
    and the wire); a refusal's reason is the error body's ``reason``. An effect's route sits
    under its transaction: the driver names the transaction the case began last."""

    store_url = ""  # the store behind its engine: the fixture sets it

    name = "http"

    def __init__(self, base: str, *, key: str | None = None) -> None:
        self.base = base
        self.last_tx = ""
        self.headers = {} if key is None else {"authorization": f"Bearer {key}"}

    async def call(self, operation: str, **inputs: Any) -> Outcome:
        method, route, extra = HTTP[operation]
        params = {"transaction_id": self.last_tx, **inputs}
        names = [part[1:-1] for part in route.split("/") if part.startswith("{")]
        path = route.format(**{name: params[name] for name in names})
        body = {k: v for k, v in {**inputs, **extra}.items() if k not in names}
        if method == "GET":
            query = "&".join(f"{k}={v}" for k, v in body.items())
            target = path + "?" * bool(query) + query
            r = await asyncio.to_thread(request, self.base, method, target, headers=self.headers)
        else:
            r = await asyncio.to_thread(
                request, self.base, method, path, body, headers=self.headers
            )
        said = r.raw.decode()
        if r.status >= 400:
            error = assert_error_shape(r, r.status)  # the one documented error shape
            return Outcome(
                False,
                error["reason"],
                text=said,
                next=error["continuation"],
                code=str(r.status),
                message=error["message"],
                details=error["details"],
            )
        reply = r.json
        if operation == "begin":
            self.last_tx = reply["transaction_id"]
        reply = only_result(reply) if operation == "verify_audit" else reply
        return Outcome(True, reply=reply, text=said, code=str(r.status))

    async def offers(self, operation: str) -> bool:
        if operation not in HTTP:
            return False
        document = (await asyncio.to_thread(request, self.base, "GET", "/openapi.json")).json
        method, route, _ = HTTP[operation]
        return method.lower() in document["paths"].get(route, {})


# --------------------------------------------------------------------------- MCP

# Each operation's MCP tool; the arguments are the contract's inputs, but for these renames
# and fixed arguments.
MCP: dict[str, tuple[str, dict[str, str], dict[str, Any]]] = {
    "begin": ("begin_transaction", {}, {}),
    "execute_step": ("run_step", {"tool_name": "tool"}, {}),
    "commit": ("commit_transaction", {}, {}),
    "rollback": ("rollback_transaction", {}, {}),
    "get_transaction": ("get_transaction", {}, {}),
    "preview_commit": ("preview_commit", {}, {}),
    "approve_commit": ("approve_commit", {}, {}),
    "refuse_commit": ("refuse_commit", {}, {}),
    "undo_step": ("undo_step", {}, {}),
    "redo_step": ("redo_step", {}, {}),
    "reconcile_step": ("reconcile_step", {}, {}),
    "compensate": ("compensate_transaction", {}, {}),
    "compensation_plan": ("compensate_transaction", {}, {"preview": True}),
    "approve_compensation": ("approve_compensation", {}, {}),
    "refuse_compensation": ("refuse_compensation", {}, {}),
    "list_effects": ("list_effects", {}, {}),
    "retry_effect": ("retry_effect", {}, {}),
    "find_transaction": ("find_transaction", {}, {}),  # served from its row alone (handlers.py)
    "list_transactions": ("list_transactions", {}, {}),
}


class McpDriver:
    """An MCP SDK client session (over stdio or streamable HTTP); a refusal is a result with
    ``ok: false``, its reason the error's ``code``. An operation with no MCP tool is sent as
    the tool it would be (its own name), which the server must not know."""

    store_url = ""  # the store behind its engine: the fixture sets it

    def __init__(self, name: str, session: Client) -> None:
        self.name = name
        self.session = session

    async def call(self, operation: str, **inputs: Any) -> Outcome:
        tool, renames, extra = MCP.get(operation, (operation, {}, {}))
        arguments = {renames.get(k, k): v for k, v in inputs.items()} | extra
        result = await self.session.call_tool(tool, arguments)
        reply = result.structured_content
        assert isinstance(reply, dict), (tool, result)
        said = "\n".join(getattr(block, "text", "") for block in result.content)
        said += "\n" + json.dumps(reply)
        if not reply["ok"]:
            assert result.is_error, (tool, reply)
            return Outcome(
                False,
                reply["error"]["code"],
                text=said,
                next=reply.get("continuation", {}),
                message=reply["error"]["message"],
            )
        return Outcome(True, reply=reply, text=said, next=reply.get("continuation", {}))

    async def offers(self, operation: str) -> bool:
        tool = MCP.get(operation, (operation,))[0]
        return tool in {t.name for t in (await self.session.list_tools()).tools}


# --------------------------------------------------------------------------- the CLI


def _flags(**flags: Any) -> list[str]:
    """``--name value`` for each flag given (a list: the flag once per item; True: alone)."""
    out: list[str] = []
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        for item in value if isinstance(value, list) else [value]:
            if item is True:
                out.append(flag)
            elif item not in (None, "", False):
                out += [flag, str(item)]
    return out


# Each operation's command line, from the contract's inputs (``--server`` and ``--json`` are
# added to every one).
CLI: dict[str, Callable[..., list[str]]] = {
    "begin": lambda **i: ["tx", "begin", *_flags(**i)],
    "execute_step": lambda transaction_id, step_id, tool_name, arguments=None, **i: [
        "tx",
        "step",
        transaction_id,
        str(step_id),
        tool_name,
        json.dumps(arguments or {}),
        *_flags(**i),  # --dry-run
    ],
    "commit": lambda transaction_id, **i: ["tx", "commit", transaction_id, *_flags(**i)],
    "rollback": lambda transaction_id, **i: ["tx", "rollback", transaction_id, *_flags(**i)],
    "get_transaction": lambda transaction_id: ["tx", "show", transaction_id],
    "preview_commit": lambda transaction_id: ["tx", "preview", transaction_id],
    "approve_commit": lambda transaction_id, receipt_id, roles=(), **i: [
        "tx",
        "approve",
        transaction_id,
        receipt_id,
        *_flags(role=list(roles), **i),
    ],
    "refuse_commit": lambda transaction_id, receipt_id, roles=(), **i: [
        "tx",
        "refuse",
        transaction_id,
        receipt_id,
        *_flags(role=list(roles), **i),
    ],
    "undo_step": lambda transaction_id: ["tx", "undo", transaction_id],
    "redo_step": lambda transaction_id: ["tx", "redo", transaction_id],
    "reconcile_step": lambda transaction_id, step_id: [
        "tx",
        "reconcile",
        transaction_id,
        str(step_id),
    ],
    "resolve_step": lambda transaction_id, step_id, outcome, output=None, **i: [
        "tx",
        "resolve",
        transaction_id,
        str(step_id),
        outcome.replace("_", "-"),
        *_flags(output=None if output is None else json.dumps(output), **i),
    ],
    "compensate": lambda transaction_id, **i: ["tx", "compensate", transaction_id, *_flags(**i)],
    "compensation_plan": lambda transaction_id: [
        "tx",
        "compensate",
        transaction_id,
        "--preview",
    ],
    "approve_compensation": lambda transaction_id, roles=(), **i: [
        "tx",
        "approve-compensation",
        transaction_id,
        *_flags(role=list(roles), **i),
    ],
    "refuse_compensation": lambda transaction_id, roles=(), **i: [
        "tx",
        "refuse-compensation",
        transaction_id,
        *_flags(role=list(roles), **i),
    ],
    "verify_audit": lambda transaction_id: ["audit", "verify", transaction_id],
    "list_effects": lambda transaction_id="": ["effects", "list", *_flags(tx=transaction_id)],
    "retry_effect": lambda effect_id: ["effects", "retry", str(effect_id)],
    # The operation table's command (cli/rows.py).
    "find_transaction": lambda **i: ["tx", "find", *_flags(**i)],
    "list_transactions": lambda agent_id="": ["tx", "list", *_flags(agent=agent_id)],
}


class CliDriver:
    """``agenttx`` command lines against a running server (``--server``, ``--json``), run
    in-process by click's runner on a worker thread. A refusal is exit status 1 with
    ``Error: <STATUS> <REASON>: <message>`` on stderr (``Error: <STATUS>: …`` where the reason
    is the status's own name); its reason is the last word before the colon."""

    store_url = ""  # the store behind its engine: the fixture sets it

    name = "cli"

    def __init__(self, server: str, *, key: str | None = None) -> None:
        self.server = server
        # AGENTTX_API_KEY as the command line reads it ("" when none, whatever the shell has).
        self.env = {"AGENTTX_API_KEY": key or ""}

    async def call(self, operation: str, **inputs: Any) -> Outcome:
        argv = [*CLI[operation](**inputs), "--server", self.server, "--json"]
        r = await asyncio.to_thread(CliRunner().invoke, main, argv, env=self.env)
        said, code = r.stdout + r.stderr, str(r.exit_code)
        if r.exit_code == 1:
            [error] = [line for line in r.stderr.splitlines() if line.startswith("Error: ")]
            # The refusal's next call, on its own line (docs/cli.md).
            then = [line for line in r.stderr.splitlines() if line.startswith("next: ")]
            return Outcome(
                False,
                error.removeprefix("Error: ").split(":")[0].split()[-1],
                text=said,
                next={"instruction": then[0].removeprefix("next: ")} if then else {},
                code=code,
                message="\n".join(x for x in r.stderr.splitlines() if not x.startswith("next: ")),
            )
        if r.exit_code == 2:  # refused by the command line itself, before any call: a usage error
            return Outcome(False, "INVALID_ARGUMENT", text=said, code=code, message=r.stderr)
        # 3: a step that did not succeed, its reply printed all the same (docs/cli.md).
        assert r.exit_code in (0, 3), (argv, r.exit_code, r.output)
        reply = json.loads(r.stdout)
        # `effects list --json` prints the list of effects, not the page around it.
        reply = {"effects": reply} if operation == "list_effects" else reply
        return Outcome(True, reply=reply, text=said, code=code)

    async def as_a_person_runs_it(self, *argv: str) -> Any:
        """The click result of a command line run without ``--json``, for a check of the
        text a person reads (at a width that keeps a line whole)."""
        argv = (*argv, "--server", self.server)
        return await asyncio.to_thread(CliRunner().invoke, main, argv, env={"COLUMNS": "240"})

    async def offers(self, operation: str) -> bool:
        if operation not in CLI:
            return False
        group, command = CLI[operation](**_placeholders(operation))[:2]
        commands = main.commands[group]
        assert isinstance(commands, click.Group)
        # A group lists the commands the operation table derives too (``cli/rows.py``).
        return command in commands.list_commands(click.Context(commands))


def _placeholders(operation: str) -> dict[str, Any]:
    """Inputs enough to spell ``operation``'s command line (for its group and command)."""
    needs = {
        "execute_step": {"transaction_id": "t", "step_id": 1, "tool_name": "x"},
        "approve_commit": {"transaction_id": "t", "receipt_id": "r"},
        "refuse_commit": {"transaction_id": "t", "receipt_id": "r"},
        "reconcile_step": {"transaction_id": "t", "step_id": 1},
        "resolve_step": {"transaction_id": "t", "step_id": 1, "outcome": "happened"},
        "retry_effect": {"effect_id": 1},
        "begin": {},
        "list_effects": {},
        "find_transaction": {},
    }
    return needs.get(operation, {"transaction_id": "t"})
