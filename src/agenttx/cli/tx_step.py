"""What ``agenttx tx begin``, ``agenttx tx step`` and ``agenttx tx commit`` do and print (their
arguments and options are their rows' bindings, ``api/operations/cli_bindings.py``): run a whole
transaction from a shell against a running server — begin it, send its steps (or dry-run one: what
it would do, journaling nothing, ``docs/dry-run.md``), and commit it, with a receipt and the echoed
revision where the transaction needs them (``docs/safety.md``).

Each prints what the server replied and the command to run next. ``tx step`` exits 0 iff the
step succeeded (a dry run: iff it would succeed) and 3 when it did not — a failed step is the
server's answer, not an error of the call; a refused call exits 1, like every ``tx`` command
(``common.connected``), and bad arguments exit 2 before anything is sent."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from agenttx.cli.common import echo_json, status_markup, to_dict
from agenttx.cli.output import CliConsole, command_console
from agenttx.cli.rows import Connect
from agenttx.core.limits import MAX_ARGUMENTS_BYTES
from agenttx.plural import plural
from agenttx.types import REFERENCE_FALLBACK, DryRunReport, StepResult

# ``tx step``'s exit status when the server ran the call and the step did not succeed.
EXIT_STEP_NOT_SUCCEEDED = 3

# The fidelities at which no handler of the tool runs, so a dry run shows no changes.
_TOOL_NOT_RUN = frozenset({"schema_only", "policy_and_schema"})
# Longest value text shown on one line of a dry run's changes; ``--json`` has them whole.
_SHOWN_VALUE_CHARS = 200


def tx_begin(
    connect: Connect,
    as_json: bool,
    agent: str,
    mode: str,
    principal: str,
    isolation: str | None,
    labels: tuple[str, ...],
) -> None:
    """``tx begin``: the new transaction and the step to send next."""
    with connect() as client:
        b = client.begin(
            agent, isolation=isolation or "", labels=labels, principal=principal, mode=mode
        )
    if as_json:
        from agenttx.api.operations.replies import begin_reply

        echo_json(to_dict(begin_reply(b)))
        return
    click.echo(
        f"began {b.transaction_id} (mode {b.mode or mode}, revision {b.revision}, status "
        f"{b.transaction_status})"
    )
    click.echo(
        f"next: agenttx tx step {b.transaction_id} {b.next_step_id} TOOL '{{...arguments...}}'"
    )


def tx_step(
    connect: Connect,
    as_json: bool,
    transaction_id: str,
    step_id: int,
    tool: str,
    arguments_json: str,
    raw_context: str,
    request_id: str,
    dry_run: bool,
) -> None:
    """``tx step``: the step's outcome (or a dry run's report) and what to send next; exits
    3 when the step did not succeed."""
    if dry_run and request_id:
        raise click.UsageError(
            "--request-id has no effect with --dry-run: a dry run stores no reply and is safe "
            "to repeat; leave one of them out"
        )
    arguments = _arguments(arguments_json)
    with connect() as client:
        r = client.execute_step(
            transaction_id,
            step_id,
            tool,
            arguments,
            raw_context,
            request_id=request_id or None,
            dry_run=dry_run,
        )
    status = r.status.value
    if as_json:
        from agenttx.api.operations.replies import step_reply

        # The CLI names every strategy, so the server sent RETRY as RETRY (``connected``).
        echo_json(to_dict(step_reply(r, frozenset(REFERENCE_FALLBACK))))
    elif r.dry_run is not None:
        _show_dry_run(_console(), r, r.dry_run, status, transaction_id, step_id, tool)
    else:
        _show_step(_console(), r, status, transaction_id, step_id)
    if status != "SUCCESS":
        sys.exit(EXIT_STEP_NOT_SUCCEEDED)


def tx_commit(
    connect: Connect,
    as_json: bool,
    transaction_id: str,
    receipt_id: str,
    expected_revision: int | None,
    request_id: str,
) -> None:
    """``tx commit``: what was published and released."""
    with connect() as client:
        c = client.commit(
            transaction_id,
            request_id=request_id or None,
            expected_revision=expected_revision,
            receipt_id=receipt_id,
        )
    if as_json:
        from agenttx.api.operations.replies import commit_reply

        echo_json(to_dict(commit_reply(c)))
        return
    console = _console()
    console.print(
        f"committed {transaction_id}: {plural(c.steps_committed, 'step')}, status "
        f"{status_markup(c.transaction_status)}, revision {c.revision}"
    )
    if c.effects_dispatched or c.effects_queued:
        console.print(
            f"effects: {c.effects_queued} released, {c.effects_dispatched} delivered already "
            f"(`agenttx effects list --tx {transaction_id}`)"
        )
    for e in c.dispatch_errors:
        console.print(f"[yellow]delivery error[/] {escape(e)} (retried in the background)")


# --------------------------------------------------------------------------- arguments


def _arguments(text: str) -> str:
    """ARGUMENTS_JSON as sent: a JSON object's text ("" for none: the server reads {}); ``-``
    reads it from standard input. Checked here so a typo fails before anything is sent; the
    server's JSON policy still applies to what is sent."""
    if text == "-":
        data = sys.stdin.buffer.read(MAX_ARGUMENTS_BYTES + 1)  # never more than can be sent
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise click.BadParameter(
                "standard input is not UTF-8 text", param_hint="ARGUMENTS_JSON"
            ) from None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ARGUMENTS_BYTES:
        raise click.BadParameter(
            f"more than {MAX_ARGUMENTS_BYTES} bytes, the most a step's arguments may be; send "
            "a smaller value (a reference, ${steps.N.…}, or a file the tool reads)",
            param_hint="ARGUMENTS_JSON",
        )
    if not text.strip():
        return ""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(
            f'not JSON ({exc}); give a JSON object, e.g. \'{{"key": "k", "value": 1}}\'',
            param_hint="ARGUMENTS_JSON",
        ) from None
    if not isinstance(value, dict):
        raise click.BadParameter(
            f"a JSON object is needed (the tool's named arguments), got {type(value).__name__} "
            'JSON; e.g. \'{"key": "k"}\'',
            param_hint="ARGUMENTS_JSON",
        )
    return text


# --------------------------------------------------------------------------- what is printed


def _console() -> CliConsole:
    # Lines are never wrapped: the ids and commands they print are copied whole.
    return command_console()


def _show_step(console: Console, r: StepResult, status: str, tx: str, step_id: int) -> None:
    console.print(
        f"step {step_id} of {tx}: {status_markup(status)} · transaction "
        f"{status_markup(r.transaction_status)} · revision {r.revision}"
    )
    if status == "SUCCESS":
        console.print(f"output {escape(r.output_json or 'null')}")
    if r.clean_hint:
        console.print(escape(r.clean_hint))  # "Hint: …", the hint cleaner's one line
    if status == "ROLLBACK_TRIGGERED":
        strategy = r.strategy.value
        if strategy == "RETRY":
            console.print(
                f"rolled back (retry): only step {step_id}'s own effects were undone; send "
                f"step {r.next_step_id} again"
            )
        else:
            console.print(
                f"rolled back ({strategy.lower()}): continue at step {r.next_step_id}"
                + (" (context reset)" if r.context_reset else "")
            )
    if r.abort_reason:
        console.print(f"[red]aborted[/] {escape(r.abort_reason)}")
    for c in r.constraints:
        console.print(f"constraint {escape(c)}")
    for e in r.compensation_errors:
        console.print(f"[red]compensation error[/] {escape(e)}")
    if status == "OUTCOME_UNKNOWN":
        if r.operation_id:
            console.print(f"operation {escape(r.operation_provider)}:{escape(r.operation_id)}")
        wait = f"in {r.retry_after_ms / 1000:g} s, " if r.retry_after_ms else ""
        console.print(
            f"next: {wait}agenttx tx reconcile {tx} {step_id} (never send the step again; no "
            f"reconcile handler: agenttx tx resolve {tx} {step_id} happened|not-happened)"
        )
    elif r.next_step_id:
        console.print(
            f"next: agenttx tx step {tx} {r.next_step_id} TOOL '{{...}}', or agenttx tx commit "
            f"{tx} --expected-revision {r.revision}"
        )
    else:
        console.print(f"the transaction ended ({r.transaction_status}); nothing more to send")


def _show_dry_run(
    console: Console,
    r: StepResult,
    d: DryRunReport,
    status: str,
    tx: str,
    step_id: int,
    tool: str,
) -> None:
    would = "would succeed" if status == "SUCCESS" else "[red]would fail[/]"
    reached = d.fidelity + (f" (declared {d.declared})" if d.declared != d.fidelity else "")
    console.print(
        f"dry run of step {step_id} of {tx} ({escape(tool)}): {would} · fidelity {reached}"
    )
    if d.policy:
        console.print(f"policy {d.policy}")
    if r.clean_hint:
        console.print(escape(r.clean_hint))
    changes = d.changes
    for w in changes.get("writes") or ():
        console.print(
            f"  write  {escape(str(w.get('key')))}: {escape(_shown(w.get('before')))} → "
            f"{escape(_shown(w.get('after')))}"
        )
    if changes.get("writes_omitted"):
        console.print(f"  (and {changes['writes_omitted']} more writes: see --json)")
    for e in changes.get("effects") or ():
        console.print(
            f"  effect {escape(str(e.get('channel')))} key "
            f"{escape(str(e.get('idempotency_key')))}: {escape(_shown(e.get('payload')))}"
        )
    if changes.get("effects_omitted"):
        console.print(f"  (and {changes['effects_omitted']} more effects: see --json)")
    for handler in changes.get("undo") or ():
        console.print(f"  undo   {escape(str(handler))}")
    if "validation" in changes:
        console.print(f"  validation {escape(_shown(changes['validation']))}")
    if status == "SUCCESS" and not any(changes.get(k) for k in ("writes", "effects", "undo")):
        console.print(
            "  (the tool did not run at this fidelity: what it would change is not known)"
            if d.fidelity in _TOOL_NOT_RUN
            else "  (nothing changed through the tool's context)"
        )
    if r.output_json:
        console.print(f"simulated output {escape(r.output_json)}")
    for note in d.notes:
        console.print(f"note {escape(str(note))}")
    console.print(
        f"nothing was journaled: step {step_id} is still next (send it without --dry-run to run it)"
    )


def _shown(value: Any) -> str:
    if value is None:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[: _SHOWN_VALUE_CHARS - 1] + "…"
