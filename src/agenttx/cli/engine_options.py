"""The engine flags ``agenttx serve`` and ``agenttx mcp`` share, as one decorator, and the one
builder that turns them into a ``ServeConfig``: both commands open the same engine the same
way (data dir, store, tools, policy, limits, logs), each with its own environment variables
(``AGENTTX_<FLAG>``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agenttx.cli.common import engine_option
from agenttx.cli.renamed_flags import accepting_old_names
from agenttx.logs import FORMATS, LEVELS

if TYPE_CHECKING:
    from agenttx.server import ServeConfig

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    engine_option(
        "--log-format",
        type=click.Choice(FORMATS, case_sensitive=False),
        default="text",
        help="Logs on stderr: readable lines, or one JSON object per line.",
    ),
    engine_option(
        "--log-level",
        type=click.Choice(LEVELS, case_sensitive=False),
        default="info",
        help="info logs every call; warning only refused and failed ones.",
    ),
    engine_option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("agenttx-data"),
        help="Holds agenttx.db, files/ and outbox.jsonl unless set otherwise.",
    ),
    engine_option(
        "--store", default=None, help="Store URL.  [default: sqlite:///<data-dir>/agenttx.db]"
    ),
    engine_option(
        "--sync-writes",
        type=click.BOOL,
        is_flag=False,
        flag_value=True,
        default=False,
        help="fsync every SQLite commit (synchronous=FULL).",
    ),
    engine_option(
        "--fs-root",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Sandbox of the fs.* tools.  [default: <data-dir>/files]",
    ),
    engine_option(
        "--outbox-path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="JSON-lines outbox of effects.  [default: <data-dir>/outbox.jsonl]",
    ),
    engine_option(
        "--smtp-url",
        default=None,
        help="Send email.send mails over SMTP: smtp://host:port (STARTTLS per --smtp-starttls) "
        "or smtps://host:port (implicit TLS); credentials from AGENTTX_SMTP_USERNAME and "
        "AGENTTX_SMTP_PASSWORD.  [default: mails go to the outbox file]",
    ),
    engine_option("--smtp-from", default=None, help="The From address of every mail."),
    engine_option(
        "--smtp-starttls",
        type=click.Choice(["auto", "require", "off"], case_sensitive=False),
        default="auto",
        help="STARTTLS on smtp://: when the server offers it, always (fail without), or never.",
    ),
    engine_option(
        "--webhook-allow",
        "webhook_allow",
        multiple=True,
        help="HOST[:PORT] webhook.post may reach although it is loopback, private, link-local "
        "or metadata (repeatable; the env var is space-separated). The signing secret is "
        "AGENTTX_WEBHOOK_SECRET.",
    ),
    engine_option(
        "--max-local-depth",
        type=click.IntRange(0, 16),
        default=2,
        help="Default policy: how many steps back a local backtrack may go.",
    ),
    engine_option(
        "--max-global-resets",
        type=click.IntRange(0, 16),
        default=1,
        help="Default policy: rewinds to the initial state before aborting.",
    ),
    engine_option(
        "--replay-budget-factor",
        type=click.FloatRange(0.1, 1000),
        default=2.0,
        help="Default policy: c in the replay budget max(1, ⌈c·N·⌈log₂(N+1)⌉⌉).",
    ),
    engine_option(
        "--max-step-retries",
        type=click.IntRange(0, 32),
        default=None,
        help="Default policy: same-step retries in a row before a failure counts as persistent "
        "(0 = none).  [default: max-local-depth + 1, at least 2]",
    ),
    engine_option(
        "--step-timeout-s",
        type=click.FloatRange(0.001, 86_400),
        default=30.0,
        help="Run time limit of tools that set none, in seconds.",
    ),
    engine_option(
        "--tx-idle-timeout-s",
        type=click.IntRange(min=0),
        default=900,
        help="Abort transactions idle this many seconds; 0 turns the reaper off.",
    ),
    engine_option(
        "--compensation-retries",
        type=click.IntRange(0, 100),
        default=3,
        help="Tries per undo handler before it is reported as failed.",
    ),
    engine_option(
        "--max-constraints",
        type=click.IntRange(1, 4096),
        default=32,
        help="Constraints (hints) kept per transaction.",
    ),
    engine_option(
        "--max-resolved-arguments-bytes",
        type=click.IntRange(1024, 1 << 30),
        default=1 << 20,
        help="UTF-8 bytes a step's arguments may reach once its references are resolved.",
    ),
    engine_option(
        "--max-references",
        type=click.IntRange(1, 1_000_000),
        default=1024,
        help="${steps.N...} references one step's arguments may hold.",
    ),
    engine_option(
        "--max-steps",
        type=click.IntRange(1, 1_000_000),
        default=100_000,
        help="Live steps one transaction may hold (GetTransaction's max_revisions).",
    ),
    engine_option(
        "--retention-days",
        type=click.IntRange(0, 36_500),
        default=30,
        help="Days ended transactions, delivered effects and stored replies are kept before "
        "maintenance deletes them; 0 keeps them forever.",
    ),
    engine_option(
        "--audit-retention-days",
        type=click.IntRange(0, 36_500),
        default=365,
        help="Days an audit chain is kept after its newest record, once its transaction is "
        "gone (deleted whole); at least --retention-days; 0 keeps chains forever.",
    ),
    engine_option(
        "--dead-letter-retention-days",
        type=click.IntRange(0, 36_500),
        default=90,
        help="Days a dead letter (an effect that could not be delivered) is kept after its "
        "last attempt, once its transaction has ended; 0 keeps dead letters forever (so does "
        "--retention-days 0).",
    ),
    engine_option(
        "--audit-key",
        "audit_key",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="TOML file of audit keys ([[key]] id and secret; `agenttx audit new-key` prints "
        "one): every audit record is keyed (HMAC-SHA256) with its `sign` key, and chains are "
        "verified with its keys. Mode 600, kept apart from the store.",
    ),
    engine_option(
        "--redact-field",
        "redact_fields",
        multiple=True,
        help="A field-name regex (whole name, any case) whose values are masked in what is "
        "stored and returned, beside the built-in secret names (repeatable; the env var is "
        "space-separated).",
    ),
    engine_option(
        "--tools",
        "tools",
        multiple=True,
        help="Load user tools from module[:attr] or path/to/file.py[:attr] (repeatable; the env "
        "var is space-separated).",
    ),
    engine_option(
        "--gateway",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="MCP gateway file (TOML): downstream MCP servers whose tools become steps "
        "<server>.<tool>; see docs/gateway.md.",
    ),
    engine_option(
        "--hint-rules",
        "hint_rules",
        multiple=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="TOML file of extra hint rules, tried before the built-in ones (repeatable; the env "
        f"var separates files with {os.pathsep!r}).",
    ),
    engine_option(
        "--policy",
        "safety_policy",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="TOML safety policy: approval for tools, effect classes or tenants; forbidden "
        "tools; a step cap (docs/safety.md). A bad file stops the start.",
    ),
    engine_option(
        "--receipt-ttl-s",
        type=click.IntRange(1, 7 * 86_400),
        default=900,
        help="How many seconds a preview's receipt can be approved and committed with.",
    ),
]

# The old spellings (``agenttx.renamed``), each read as its new flag with a notice.
_OLD_TYPES = {
    "step_timeout_ms": click.IntRange(1, 86_400_000),
    "tx_idle_timeout_secs": click.IntRange(min=0),
    "receipt_ttl_secs": click.IntRange(1, 7 * 86_400),
}


def engine_options(command: F) -> F:
    """Add every engine flag to ``command`` (in ``--help`` order), and their old names."""
    command = accepting_old_names("serve", _OLD_TYPES)(command)
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def serve_config(opts: dict[str, Any], **server: Any) -> ServeConfig:
    """The ``ServeConfig`` of the engine flags in ``opts`` plus the command's own settings
    (``server``: listen addresses, grace …). Sets up logging on stderr as the flags say, and
    lets user tool modules be found from the working directory, like ``python -m``."""
    from agenttx import logs
    from agenttx.server import ServeConfig
    from agenttx.types import RollbackPolicy

    logs.configure(opts["log_format"].lower(), opts["log_level"].lower())
    if opts["tools"] and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return ServeConfig(
        data_dir=opts["data_dir"],
        store=opts["store"],
        fs_root=opts["fs_root"],
        outbox_path=opts["outbox_path"],
        smtp_url=opts["smtp_url"],
        smtp_from=opts["smtp_from"],
        smtp_starttls=opts["smtp_starttls"].lower(),
        webhook_allow=tuple(opts["webhook_allow"]),
        sync_writes=opts["sync_writes"],
        tools=tuple(opts["tools"]),
        hint_rules=tuple(opts["hint_rules"]),
        gateway=opts["gateway"],
        policy=RollbackPolicy(
            max_local_depth=opts["max_local_depth"],
            max_global_resets=opts["max_global_resets"],
            replay_budget_factor=opts["replay_budget_factor"],
            max_step_retries=opts["max_step_retries"],
        ),
        step_timeout_s=opts["step_timeout_s"],
        tx_idle_timeout_s=opts["tx_idle_timeout_s"],
        compensation_retries=opts["compensation_retries"],
        max_constraints=opts["max_constraints"],
        max_resolved_arguments_bytes=opts["max_resolved_arguments_bytes"],
        max_references=opts["max_references"],
        max_steps=opts["max_steps"],
        retention_days=opts["retention_days"],
        redact_fields=tuple(opts["redact_fields"]),
        audit_key=opts["audit_key"],
        audit_retention_days=opts["audit_retention_days"],
        dead_letter_retention_days=opts["dead_letter_retention_days"],
        log_format=opts["log_format"].lower(),
        safety_policy=opts["safety_policy"],
        receipt_ttl_s=opts["receipt_ttl_s"],
        **server,
    )
