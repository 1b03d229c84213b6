"""What every ``agenttx`` command shares: the option helpers, the client of a command run,
one-line errors, and the conversions to JSON and terminal text."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from agenttx.api.operations.cli_bindings import JSON, SERVER, TIMEOUT, CliOption

if TYPE_CHECKING:
    from agenttx.client import AgentTxClient
    from agenttx.errors import AgentTxError


def env_var(flag: str) -> str:
    """``--max-local-depth`` → ``AGENTTX_MAX_LOCAL_DEPTH``."""
    return "AGENTTX_" + flag.removeprefix("--").replace("-", "_").upper()


def param(o: CliOption) -> Callable[[Callable[..., Any]], Any]:
    """The click argument or option ``o`` declares (``api/operations/cli_bindings.py``)."""
    kind = _kind(o)
    if o.positional:
        if o.default is not None:
            return click.argument(o.name, type=kind, required=False, default=o.default)
        if o.required is False:
            return click.argument(o.name, type=kind, required=False)
        return click.argument(o.name, type=kind)
    given: dict[str, Any] = {}
    if o.default is not None:
        given["default"] = o.default
    if o.show_default:
        given["show_default"] = True
    if o.help:
        given["help"] = o.help
    if o.envvar:
        given.update(envvar=o.envvar, show_envvar=True)
    decls = (flag(o), *((o.short,) if o.short else ()), o.name)
    if o.is_flag:
        return click.option(*decls, is_flag=True, **given)
    return click.option(*decls, type=kind, multiple=o.multiple, required=bool(o.required), **given)


def _kind(o: CliOption) -> Any:
    if o.number is not None:
        from agenttx.cli.numbers import WholeNumberParam

        return WholeNumberParam(o.number)
    if o.between is not None:
        return click.IntRange(*o.between)
    if o.at_least is not None:
        return click.FloatRange(min=o.at_least)
    if o.choices:
        return click.Choice(list(o.choices), case_sensitive=o.case_sensitive)
    if o.path:
        return click.Path(dir_okay=False, exists=o.exists, path_type=Path)
    return None


def flag(o: CliOption) -> str:
    """``o``'s long flag: its own, or ``--`` and its name with dashes."""
    return o.flag or "--" + o.name.replace("_", "-")


server_option = param(SERVER)
json_option = param(JSON)
timeout_option = param(TIMEOUT)


@contextmanager
def connected(server: str, timeout: float | None = None) -> Iterator[AgentTxClient]:
    """The client of one command run, on ``server``: over TLS iff ``AGENTTX_TLS_CA`` names a
    PEM file (the CA or the server's certificate), each call carrying ``AGENTTX_API_KEY`` iff
    it is set and the metadata the client sends (it names RETRY, so it is sent RETRY), with
    ``timeout`` seconds per call. One attempt: an unreachable server is said at once.

    A refused call in the block becomes a one-line message and exit status 1, followed by a
    ``next:`` line of what to run when the refusal names a next call (``refusal_text``)."""
    from agenttx.client import AgentTxClient, RetryPolicy
    from agenttx.errors import AgentTxError

    roots = tls_roots()
    client = AgentTxClient(
        server,
        timeout=timeout,
        retry=RetryPolicy(max_attempts=1),
        api_key=api_key(),
        root_certificates=roots,
    )
    try:
        with client:
            yield client
    except AgentTxError as exc:
        fail(refusal_text(exc, server))


def tls_roots() -> bytes | None:
    """The PEM file ``AGENTTX_TLS_CA`` names (the CA or the server's certificate), read; None
    when it is not set (a plaintext channel). Unreadable: one line and exit status 1."""
    ca_path = os.environ.get("AGENTTX_TLS_CA")
    if not ca_path:
        return None
    try:
        with open(ca_path, "rb") as f:
            return f.read()
    except OSError as exc:
        fail(f"AGENTTX_TLS_CA {ca_path}: cannot read: {exc.strerror or exc}")


def api_key() -> str | None:
    """The key of ``AGENTTX_API_KEY``, the one way the commands take one; None when it is not
    set. One the client would refuse to send: one line and exit status 1."""
    from agenttx.client._auth import auth_metadata

    key = os.environ.get("AGENTTX_API_KEY") or None
    try:
        auth_metadata(key)
    except ValueError:  # spaces or a line break around it: a copy that took too much
        fail(
            "AGENTTX_API_KEY is not an API key (it has spaces or a line break around it): set "
            "it to the key exactly as `agenttx keys new` printed it"
        )
    return key


def refusal_text(exc: AgentTxError, server: str) -> str:
    """A refused call to ``server`` as the CLI prints it: the server's public error
    (``api/public_errors.py``) on one line, ``<STATUS>: <message>`` (the reason beside the
    status when it is not the status's own name), then a ``next:`` line of what to run when
    there is one (how to give a key, or the refusal's continuation in CLI commands). Read from
    the status, message and details the server sent, as the client received them (the
    ``grpc.RpcError`` it raised ``exc`` from); an error the client raised before anything was
    sent says its own code and message."""
    import grpc

    from agenttx.api.public_errors import from_wire, one_line
    from agenttx.client._wire import status_of
    from agenttx.error_details import from_metadata

    cause = exc.__cause__
    if not isinstance(cause, grpc.RpcError):
        return f"{exc.code}: {exc.message}"
    code, details, metadata = status_of(cause)
    if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        return f"cannot reach AgentTx at {server} (is `agenttx serve` running?)"
    reason, fields = from_metadata(metadata)
    message = one_line(from_wire(code, details, reason, fields))
    then = _key_advice() if code == "UNAUTHENTICATED" else next_command(code, details, metadata)
    return message + (f"\nnext: {then}" if then else "")


def _key_advice() -> str:
    """What to do when the server wants a key: the CLI takes one only from AGENTTX_API_KEY."""
    if os.environ.get("AGENTTX_API_KEY"):
        return (
            "AGENTTX_API_KEY holds a key this server does not know (revoked, mistyped, or "
            "another server's): set it to a key in force, as `agenttx keys new` printed it"
        )
    return (
        "set AGENTTX_API_KEY to your API key (export AGENTTX_API_KEY=atx_…), the one way "
        "agenttx commands take a key; the server's operator makes one with `agenttx keys new`"
    )


# A ReviseRequest only repeats the message ("fix the call: <message>"); every other kind says
# what to run next, or who must act.
_REPEATING = frozenset({"ReviseRequest"})


def next_command(status: str, message: str, metadata: Any) -> str:
    """What to run after a refusal with ``status``, ``message`` and trailing ``metadata``
    (its reason and fields), in CLI commands; "" when the refusal names no next call."""
    from agenttx.api.next_calls import CLI
    from agenttx.api.public_errors import from_wire, guidance
    from agenttx.error_details import from_metadata

    reason, fields = from_metadata(metadata)
    if not reason:
        return ""
    operation = CLI.action_of(_command_path())
    then = guidance(from_wire(status, message, reason, fields), operation, fields, CLI)
    cont = then.continuation
    return "" if cont.get("kind") in _REPEATING else str(cont.get("instruction", ""))


def _command_path() -> str:
    """The running command as ``next_calls`` writes it (``agenttx tx refuse``), whatever the
    program was called; "" outside a command."""
    ctx = click.get_current_context(silent=True)
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["agenttx", *names]) if names else ""


def fail(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


def to_dict(message: Any) -> dict[str, Any]:
    """A protobuf message as plain JSON values (``agenttx.api.fields``): ints stay ints, enums
    by their full names, ``*_json`` fields parsed (``output_json`` → ``output``); unset optional
    scalars are left out (an unset optional field means "the default", not 0)."""
    from agenttx.api.fields import message_fields

    return message_fields(message, skip_unset_optional=True)


def wire_message(message_type: Any, value: Any, **given: Any) -> Any:
    """``value`` (a client result of the same shape) as the wire message ``message_type``, for
    the few results no adapter's reply builder takes: each field from the attribute of the
    same name (a ``*_json`` field: the attribute without the suffix, as JSON text), those in
    ``given`` as given. ``to_dict`` then reads back the reply the server sent."""
    fields: dict[str, Any] = {}
    for fd in message_type.DESCRIPTOR.fields:
        name = fd.name
        if name in given:
            fields[name] = given[name]
        elif hasattr(value, name):
            fields[name] = getattr(value, name)
        elif name.endswith("_json") and hasattr(value, name.removesuffix("_json")):
            fields[name] = json.dumps(getattr(value, name.removesuffix("_json")))
    return message_type(**fields)


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def when(ts: float, *, short: bool = False) -> str:
    """Local time; ``short``: the time alone today, the date alone before."""
    if not ts:
        return ""
    local = time.localtime(ts)
    if not short:
        return time.strftime("%Y-%m-%d %H:%M:%S", local)
    today = time.localtime()[:3] == local[:3]
    return time.strftime("%H:%M:%S" if today else "%Y-%m-%d", local)


STATUS_STYLE = {
    "ACTIVE": "cyan",
    "EXECUTING": "cyan",
    "COMMITTED": "green",
    "SUCCESS": "green",
    "ROLLED_BACK": "yellow",
    "FAILED": "red",
    "OUTCOME_UNKNOWN": "magenta",
    "COMPENSATED": "green",
    "compensated": "green",
    "failed": "red",
}


def status_markup(text: str, width: int = 0) -> str:
    """``text`` in its colour, padded with spaces to ``width`` visible characters (padding the
    markup itself would pad styled and plain statuses by different amounts)."""
    style = STATUS_STYLE.get(text)
    pad = " " * max(width - len(text), 0)
    return (f"[{style}]{text}[/]" if style else text) + pad
