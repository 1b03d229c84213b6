"""``agenttx serve``: the gRPC server with health, reflection and metrics."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from agenttx.cli.common import engine_option
from agenttx.logs import FORMATS, LEVELS
from agenttx.types import RollbackPolicy


@click.command()
@engine_option(
    "--listen-addr", default="127.0.0.1:50051", help="gRPC address (host:port; port 0: any)."
)
@engine_option(
    "--log-format",
    type=click.Choice(FORMATS, case_sensitive=False),
    default="text",
    help="Logs on stderr: readable lines, or one JSON object per line.",
)
@engine_option(
    "--log-level",
    type=click.Choice(LEVELS, case_sensitive=False),
    default="info",
    help="info logs every call; warning only refused and failed ones.",
)
@engine_option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("agenttx-data"),
    help="Holds agenttx.db, files/ and outbox.jsonl unless set otherwise.",
)
@engine_option(
    "--store", default=None, help="Store URL.  [default: sqlite:///<data-dir>/agenttx.db]"
)
@engine_option(
    "--sync-writes",
    type=click.BOOL,
    is_flag=False,
    flag_value=True,
    default=False,
    help="fsync every SQLite commit (synchronous=FULL).",
)
@engine_option(
    "--fs-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Sandbox of the fs.* tools.  [default: <data-dir>/files]",
)
@engine_option(
    "--outbox-path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="JSON-lines outbox of effects.  [default: <data-dir>/outbox.jsonl]",
)
@engine_option(
    "--max-local-depth",
    type=click.IntRange(0, 16),
    default=2,
    help="Default policy: how many steps back a local backtrack may go.",
)
@engine_option(
    "--max-global-resets",
    type=click.IntRange(0, 16),
    default=1,
    help="Default policy: rewinds to the initial state before aborting.",
)
@engine_option(
    "--replay-budget-factor",
    type=click.FloatRange(0.1, 1000),
    default=2.0,
    help="Default policy: c in the replay budget max(1, ⌈c·N·⌈log₂(N+1)⌉⌉).",
)
@engine_option(
    "--max-step-retries",
    type=click.IntRange(0, 32),
    default=None,
    help="Default policy: same-step retries in a row before a failure counts as persistent "
    "(0 = none).  [default: max-local-depth + 1, at least 2]",
)
@engine_option(
    "--step-timeout-ms",
    type=click.IntRange(1, 86_400_000),
    default=30_000,
    help="Run time limit of tools that set none.",
)
@engine_option(
    "--tx-idle-timeout-secs",
    type=click.IntRange(min=0),
    default=900,
    help="Abort transactions idle this long; 0 turns the reaper off.",
)
@engine_option(
    "--compensation-retries",
    type=click.IntRange(0, 100),
    default=3,
    help="Tries per undo handler before it is reported as failed.",
)
@engine_option(
    "--max-constraints",
    type=click.IntRange(1, 4096),
    default=32,
    help="Constraints (hints) kept per transaction.",
)
@engine_option(
    "--max-resolved-arguments-bytes",
    type=click.IntRange(1024, 1 << 30),
    default=1 << 20,
    help="UTF-8 bytes a step's arguments may reach once its references are resolved.",
)
@engine_option(
    "--max-references",
    type=click.IntRange(1, 1_000_000),
    default=1024,
    help="${steps.N...} references one step's arguments may hold.",
)
@engine_option(
    "--tools",
    "tools",
    multiple=True,
    help="Load user tools from module[:attr] or path/to/file.py[:attr] (repeatable; the env "
    "var is space-separated).",
)
@engine_option(
    "--hint-rules",
    "hint_rules",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file of extra hint rules, tried before the built-in ones (repeatable; the env "
    f"var separates files with {os.pathsep!r}).",
)
@engine_option(
    "--metrics-addr", default="127.0.0.1:9464", help='Prometheus /metrics; "off" disables.'
)
@engine_option(
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
            max_step_retries=opts["max_step_retries"],
        ),
        step_timeout_ms=opts["step_timeout_ms"],
        tx_idle_timeout_secs=opts["tx_idle_timeout_secs"],
        compensation_retries=opts["compensation_retries"],
        max_constraints=opts["max_constraints"],
        max_resolved_arguments_bytes=opts["max_resolved_arguments_bytes"],
        max_references=opts["max_references"],
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
