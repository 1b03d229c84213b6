"""The ``agenttx`` command line.

``agenttx serve`` runs the server; ``tx`` and ``tools`` talk to a running one over gRPC
(``--server``, env ``AGENTTX_SERVER``) with the generated stub, printing tables or, with
``--json``, JSON; ``demo`` runs a scripted agent through the server. Every ``serve`` flag has
an ``AGENTTX_<NAME>`` environment variable; out-of-range values stop it before it starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agenttx.logs import FORMATS, LEVELS
from agenttx.types import RollbackPolicy, TxStatus

T = TypeVar("T")

DEFAULT_SERVER = "127.0.0.1:50051"


def _env(flag: str) -> str:
    """``--max-local-depth`` → ``AGENTTX_MAX_LOCAL_DEPTH``."""
    return "AGENTTX_" + flag.removeprefix("--").replace("-", "_").upper()


def _option(*decls: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``serve`` option with its environment variable shown in ``--help``."""
    return click.option(
        *decls, envvar=_env(decls[0]), show_envvar=True, show_default=True, **kwargs
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="agenttx")
def main() -> None:
    """AgentTx: transactional tool calls for AI agents."""


# -- serve ----------------------------------------------------------------------------------


@main.command()
@_option("--listen-addr", default="127.0.0.1:50051", help="gRPC address (host:port; port 0: any).")
@_option(
    "--log-format",
    type=click.Choice(FORMATS, case_sensitive=False),
    default="text",
    help="Logs on stderr: readable lines, or one JSON object per line.",
)
@_option(
    "--log-level",
    type=click.Choice(LEVELS, case_sensitive=False),
    default="info",
    help="info logs every call; warning only refused and failed ones.",
)
@_option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("agenttx-data"),
    help="Holds agenttx.db, files/ and outbox.jsonl unless set otherwise.",
)
@_option("--store", default=None, help="Store URL.  [default: sqlite:///<data-dir>/agenttx.db]")
@_option(
    "--sync-writes",
    type=click.BOOL,
    is_flag=False,
    flag_value=True,
    default=False,
    help="fsync every SQLite commit (synchronous=FULL).",
)
@_option(
    "--fs-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Sandbox of the fs.* tools.  [default: <data-dir>/files]",
)
@_option(
    "--outbox-path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="JSON-lines outbox of effects.  [default: <data-dir>/outbox.jsonl]",
)
@_option(
    "--max-local-depth",
    type=click.IntRange(0, 16),
    default=2,
    help="Default policy: how many steps back a local backtrack may go.",
)
@_option(
    "--max-global-resets",
    type=click.IntRange(0, 16),
    default=1,
    help="Default policy: rewinds to the initial state before aborting.",
)
@_option(
    "--replay-budget-factor",
    type=click.FloatRange(0.1, 1000),
    default=2.0,
    help="Default policy: c in the replay budget max(1, ⌈c·N·⌈log₂(N+1)⌉⌉).",
)
@_option(
    "--step-timeout-ms",
    type=click.IntRange(1, 86_400_000),
    default=30_000,
    help="Run time limit of tools that set none.",
)
@_option(
    "--tx-idle-timeout-secs",
    type=click.IntRange(min=0),
    default=900,
    help="Abort transactions idle this long; 0 turns the reaper off.",
)
@_option(
    "--compensation-retries",
    type=click.IntRange(0, 100),
    default=3,
    help="Tries per undo handler before it is reported as failed.",
)
@_option(
    "--max-constraints",
    type=click.IntRange(1, 4096),
    default=32,
    help="Constraints (hints) kept per transaction.",
)
@_option(
    "--tools",
    "tools",
    multiple=True,
    help="Load user tools from module[:attr] (repeatable; the env var is space-separated).",
)
@_option(
    "--hint-rules",
    "hint_rules",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file of extra hint rules, tried before the built-in ones (repeatable; the env "
    f"var separates files with {os.pathsep!r}).",
)
@_option("--metrics-addr", default="127.0.0.1:9464", help='Prometheus /metrics; "off" disables.')
@_option(
    "--grace-secs",
    type=click.FloatRange(min=0),
    default=10.0,
    help="On SIGTERM, how long in-flight calls may take to finish.",
)
def serve(**opts: Any) -> None:
    """Serve AgentTx over gRPC (with health, reflection and Prometheus metrics).

    SIGTERM or Ctrl-C drains: new calls are refused, in-flight calls get --grace-secs to
    finish, then the store closes and the process exits 0.
    """
    from agenttx import logs
    from agenttx.server import ServeConfig, StartupError, run

    logs.configure(opts["log_format"].lower(), opts["log_level"].lower())
    metrics_addr = opts["metrics_addr"]
    config = ServeConfig(
        listen_addr=opts["listen_addr"],
        data_dir=opts["data_dir"],
        store=opts["store"],
        fs_root=opts["fs_root"],
        outbox_path=opts["outbox_path"],
        sync_writes=opts["sync_writes"],
        tools=tuple(opts["tools"]),
        hint_rules=tuple(opts["hint_rules"]),
        policy=RollbackPolicy(
            max_local_depth=opts["max_local_depth"],
            max_global_resets=opts["max_global_resets"],
            replay_budget_factor=opts["replay_budget_factor"],
        ),
        step_timeout_ms=opts["step_timeout_ms"],
        tx_idle_timeout_secs=opts["tx_idle_timeout_secs"],
        compensation_retries=opts["compensation_retries"],
        max_constraints=opts["max_constraints"],
        metrics_addr=None if metrics_addr.strip().lower() == "off" else metrics_addr,
        grace_secs=opts["grace_secs"],
        log_format=opts["log_format"].lower(),
    )
    # Like `python -m`, user tool modules are found from the working directory.
    if config.tools and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        run(config)
    except StartupError as exc:
        # Exit 1 with the reason; exit 2 is click's, for a flag value out of its range.
        raise click.ClickException(str(exc)) from None


# -- talking to a running server --------------------------------------------------------------

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
def _stub(server: str) -> Iterator[Any]:
    import grpc

    from agenttx.wire import agenttx_pb2_grpc as pb_grpc

    with grpc.insecure_channel(server) as channel:
        yield pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]


def _call(server: str, fn: Callable[[Any], T]) -> T:
    """Run ``fn(stub)``; a gRPC error becomes a one-line message and exit status 1."""
    import grpc

    try:
        with _stub(server) as stub:
            return fn(stub)
    except grpc.RpcError as exc:
        code = exc.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            _fail(f"cannot reach AgentTx at {server} (is `agenttx serve` running?)")
        _fail(f"{code.name}: {exc.details()}")


def _fail(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


def to_dict(message: Any) -> dict[str, Any]:
    """A protobuf message as plain JSON values: ints stay ints (``MessageToDict`` would make
    64-bit ones strings), enums become their names, and ``*_json`` text fields are parsed
    into a field without the suffix (``output_json`` → ``output``)."""
    out: dict[str, Any] = {}
    for fd in message.DESCRIPTOR.fields:
        value = getattr(message, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            out[fd.name] = dict(value)
        elif fd.message_type is not None:
            if fd.is_repeated:
                out[fd.name] = [to_dict(v) for v in value]
            else:
                out[fd.name] = to_dict(value)
        elif fd.enum_type is not None:
            name = fd.enum_type.values_by_number
            out[fd.name] = [name[v].name for v in value] if fd.is_repeated else name[value].name
        elif fd.is_repeated:
            out[fd.name] = list(value)
        elif fd.name.endswith("_json"):
            out[fd.name.removesuffix("_json")] = json.loads(value) if value else None
        else:
            out[fd.name] = value
    return out


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _when(ts: float, *, short: bool = False) -> str:
    """Local time; ``short``: the time alone today, the date alone before."""
    if not ts:
        return ""
    local = time.localtime(ts)
    if not short:
        return time.strftime("%Y-%m-%d %H:%M:%S", local)
    today = time.localtime()[:3] == local[:3]
    return time.strftime("%H:%M:%S" if today else "%Y-%m-%d", local)


_STATUS_STYLE = {
    "ACTIVE": "cyan",
    "EXECUTING": "cyan",
    "COMMITTED": "green",
    "SUCCESS": "green",
    "ROLLED_BACK": "yellow",
    "FAILED": "red",
    "OUTCOME_UNKNOWN": "magenta",
}


def _status(text: str) -> str:
    style = _STATUS_STYLE.get(text)
    return f"[{style}]{text}[/]" if style else text


@main.group()
def tx() -> None:
    """List, inspect and roll back transactions on a running server."""


@tx.command("list")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in TxStatus], case_sensitive=False),
    help="Only these statuses (repeatable).",
)
@click.option("--agent", default=None, help="Only this agent id.")
@click.option("--label", default=None, help="Only transactions carrying this label.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@server_option
@json_option
@timeout_option
def tx_list(
    statuses: tuple[str, ...],
    agent: str | None,
    label: str | None,
    limit: int,
    server: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Transactions, oldest first."""
    from agenttx.wire import agenttx_pb2 as pb

    def fetch(stub: Any) -> list[Any]:
        found: list[Any] = []
        token = ""
        while len(found) < limit:
            page = stub.ListTransactions(
                pb.ListTransactionsRequest(
                    statuses=[s.upper() for s in statuses],
                    agent_id=agent or "",
                    label=label or "",
                    page_size=min(limit - len(found), 500),
                    page_token=token,
                ),
                timeout=timeout,
            )
            found.extend(page.transactions)
            token = page.next_page_token
            if not token:
                break
        return found[:limit]

    found = _call(server, fetch)
    if as_json:
        _echo_json([to_dict(t) for t in found])
        return
    console = Console()
    # Ids are what a user copies into `tx show`: never wrapped or cut. Labels and abort
    # reasons only when the terminal has room for them (`tx show` has them too).
    wide = console.width >= 120
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("transaction", no_wrap=True, min_width=35)
    table.add_column("status", no_wrap=True)
    table.add_column("agent", overflow="fold")
    table.add_column("next", justify="right")
    table.add_column("updated", no_wrap=True)
    if wide:
        table.add_column("labels", overflow="fold")
        table.add_column("reason", overflow="fold")
    for t in found:
        row = [
            t.transaction_id,
            _status(t.status),
            escape(t.agent_id),
            str(t.next_step_id or "-"),
            _when(t.updated_at, short=True),
        ]
        if wide:
            row += [escape(", ".join(t.labels)), escape(t.abort_reason)]
        table.add_row(*row)
    console.print(table)
    console.print(f"{len(found)} transaction{'s' if len(found) != 1 else ''}")


def _whole_transaction(stub: Any, transaction_id: str, timeout: float) -> Any:
    """GetTransaction, and if the server trimmed the history to fit one message, the whole
    history read with ListSteps in its place (the reply then says nothing was left out)."""
    from agenttx.wire import agenttx_pb2 as pb

    t = stub.GetTransaction(
        pb.GetTransactionRequest(transaction_id=transaction_id), timeout=timeout
    )
    if not t.history_trimmed:
        return t
    del t.steps[:]
    del t.context[:]
    token = ""
    while True:
        page = stub.ListSteps(
            pb.ListStepsRequest(transaction_id=transaction_id, page_token=token), timeout=timeout
        )
        t.steps.extend(page.steps)
        t.context.extend(page.context)
        token = page.next_page_token
        if not token:
            break
    for name in ("history_trimmed", "steps_omitted", "steps_page_token"):
        t.ClearField(name)
    return t


@tx.command("show")
@click.argument("transaction_id")
@server_option
@json_option
@timeout_option
def tx_show(transaction_id: str, server: str, as_json: bool, timeout: float) -> None:
    """One transaction: status, policy, constraints and every step attempt."""

    t = _call(server, lambda stub: _whole_transaction(stub, transaction_id, timeout))
    if as_json:
        _echo_json(to_dict(t))
        return
    console = Console()
    p = t.policy
    facts = [
        ("transaction", t.transaction_id),
        ("status", _status(t.status)),
        ("agent", escape(t.agent_id)),
        ("next step", str(t.next_step_id or "- (ended)")),
        ("revision / epoch", f"{t.revision} / {t.epoch}"),
        ("isolation", t.isolation),
        (
            "policy",
            f"max_local_depth={p.max_local_depth} max_global_resets={p.max_global_resets} "
            f"replay_budget_factor={p.replay_budget_factor:g} (resets used: {t.global_resets})",
        ),
        ("created / updated", f"{_when(t.created_at)} / {_when(t.updated_at)}"),
    ]
    if t.metadata:
        facts.append(("metadata", escape(json.dumps(dict(t.metadata), ensure_ascii=False))))
    if t.abort_reason:
        facts.append(("abort reason", escape(t.abort_reason)))
    if t.outcome_unknown_step:
        facts.append(("outcome unknown", f"step {t.outcome_unknown_step} awaits reconciliation"))
    for name, value in facts:
        console.print(f"[bold]{name:<18}[/] {value}")
    for c in t.constraints:
        console.print(f"[bold]{'constraint':<18}[/] {escape(c)}")
    for e in t.compensation_errors:
        console.print(f"[bold red]{'compensation error':<18}[/] {escape(e)}")
    steps = Table("step", "try", "tool", "status", "live", "epoch")
    steps.add_column("output / hint", overflow="fold")
    for s in t.steps:
        detail = s.output_json if s.status == "SUCCESS" else s.clean_hint
        steps.add_row(
            str(s.step_id),
            str(s.attempt),
            escape(s.tool_name),
            _status(s.status),
            "yes" if s.live else "no",
            str(s.epoch),
            escape(detail if len(detail) <= 120 else detail[:119] + "…"),
        )
    console.print(steps)
    if t.edges:
        edges = ", ".join(f"{e.from_step}→{e.to_step} ({e.key})" for e in t.edges)
        console.print(f"[bold]dependencies[/] {escape(edges)}")


@tx.command("rollback")
@click.argument("transaction_id")
@click.option(
    "--to-step",
    type=click.IntRange(min=1),
    default=None,
    help="Rewind to before this step and keep the transaction open (default: abort it).",
)
@click.option("--reason", default="rolled back from the agenttx CLI", show_default=True)
@server_option
@json_option
@timeout_option
def tx_rollback(
    transaction_id: str,
    to_step: int | None,
    reason: str,
    server: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Abort a transaction, or rewind it to a step with --to-step."""
    from agenttx.wire import agenttx_pb2 as pb

    request = pb.RollbackTransactionRequest(transaction_id=transaction_id, reason=reason)
    if to_step is not None:
        request.to_step = to_step
    b = _call(server, lambda stub: stub.RollbackTransaction(request, timeout=timeout))
    if as_json:
        _echo_json(to_dict(b))
        return
    console = Console()
    if b.next_step_id:
        console.print(
            f"rewound {transaction_id}: next step {b.next_step_id}, "
            f"status {_status(b.transaction_status)}"
        )
    else:
        console.print(f"aborted {transaction_id}: status {_status(b.transaction_status)}")
    console.print(f"compensations run: {b.compensations_run}")
    for e in b.compensation_errors:
        console.print(f"[red]compensation error[/] {escape(e)}")


@main.command()
@server_option
@json_option
@timeout_option
def tools(server: str, as_json: bool, timeout: float) -> None:
    """The tools a running server offers, with effect class and schemas."""
    from agenttx.wire import agenttx_pb2 as pb

    reply = _call(server, lambda stub: stub.ListTools(pb.ListToolsRequest(), timeout=timeout))
    if as_json:
        _echo_json([to_dict(t) for t in reply.tools])
        return
    table = Table("tool", "effect", "timeout")
    table.add_column("description", overflow="fold")
    for t in reply.tools:
        table.add_row(escape(t.name), t.effect, f"{t.timeout_ms / 1000:g}s", escape(t.description))
    Console().print(table)


# -- demo -----------------------------------------------------------------------------------


@main.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Data directory of the in-process server (default: a new temp dir).",
)
@click.option(
    "--server",
    envvar="AGENTTX_SERVER",
    default=None,
    help="Run against this server instead of an in-process one.",
)
def demo(directory: Path | None, server: str | None) -> None:
    """Run a scripted agent through a failure, a rewind, a commit and a released effect."""
    from agenttx.demo import run_demo

    try:
        ok = asyncio.run(run_demo(directory, server=server))
    except Exception as exc:  # grpc.aio.AioRpcError and friends: one line, not a traceback
        _fail(f"demo failed: {exc}")
    sys.exit(0 if ok else 1)
