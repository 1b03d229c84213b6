"""What every ``agenttx`` command shares: the option helpers, the gRPC stub, one-line errors,
and the conversions from wire messages to JSON and terminal text."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import click

T = TypeVar("T")

DEFAULT_SERVER = "127.0.0.1:50051"


def env_var(flag: str) -> str:
    """``--max-local-depth`` → ``AGENTTX_MAX_LOCAL_DEPTH``."""
    return "AGENTTX_" + flag.removeprefix("--").replace("-", "_").upper()


def engine_option(*decls: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``serve`` option with its environment variable shown in ``--help``."""
    return click.option(
        *decls, envvar=env_var(decls[0]), show_envvar=True, show_default=True, **kwargs
    )


server_option = click.option(
    "--server",
    envvar="AGENTTX_SERVER",
    show_envvar=True,
    default=DEFAULT_SERVER,
    show_default=True,
    help="Address of a running `agenttx serve`.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON, not a table.")
timeout_option = click.option(
    "--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True, help="Seconds."
)


@contextmanager
def grpc_stub(server: str) -> Iterator[Any]:
    import grpc

    from agenttx.wire import agenttx_pb2_grpc as pb_grpc

    with grpc.insecure_channel(server) as channel:
        yield pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]


def call(server: str, fn: Callable[[Any], T]) -> T:
    """Run ``fn(stub)``; a gRPC error becomes a one-line message and exit status 1."""
    import grpc

    try:
        with grpc_stub(server) as stub:
            return fn(stub)
    except grpc.RpcError as exc:
        code = exc.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            fail(f"cannot reach AgentTx at {server} (is `agenttx serve` running?)")
        fail(f"{code.name}: {exc.details()}")


def fail(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


def to_dict(message: Any) -> dict[str, Any]:
    """A protobuf message as plain JSON values (``agenttx.api.fields``): ints stay ints, enums
    by their full names, ``*_json`` fields parsed (``output_json`` → ``output``); unset optional
    scalars are left out (an unset optional field means "the default", not 0)."""
    from agenttx.api.fields import message_fields

    return message_fields(message, skip_unset_optional=True)


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
}


def status_markup(text: str) -> str:
    style = STATUS_STYLE.get(text)
    return f"[{style}]{text}[/]" if style else text
