"""Every setting of AgentTx, stated once: its default, its range or values, its unit, its flag
and environment variable, and one line of help.

``Settings`` is frozen and checks itself when built, so a value out of range is refused the
same way whichever entry it came in by — ``Engine.open(max_constraints=5000)``,
``--max-constraints 5000``, ``AGENTTX_MAX_CONSTRAINTS=5000``:

    max_constraints must be a whole number from 1 to 4096, got 5000; give one in that range
    (flag --max-constraints, env AGENTTX_MAX_CONSTRAINTS)

What is derived from this one table: the flags of ``agenttx serve`` and ``agenttx mcp`` and
their environment variables (``cli/engine_options.py``), the server's config (``ServeConfig``
is ``Settings``, its TLS files read together), the engine's (``EngineConfig`` is ``Settings``
plus what the composition root resolved), the keywords ``Engine.open`` takes
(``Settings.of``), and the check of the flags table in docs/operations.md
(``tests/core/test_settings.py``).

A field's ``scope`` says who reads it: ``engine`` the composition root (``agenttx.app``) and
so ``Engine.open``; ``command`` the commands that open an engine (``agenttx serve`` and
``agenttx mcp``: data dir, logs, files they read); ``server`` ``agenttx serve`` alone. A name
ending ``_s`` is seconds, ``_bytes`` bytes, ``_days`` days; the old spellings are in
``agenttx.renamed``. This module is in the bottom layer: core reads it as a contract.
"""

from __future__ import annotations

import difflib
import math
import os
import warnings
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from agenttx.errors import InvalidArgument
from agenttx.logs import FORMATS, LEVELS
from agenttx.numbers import WholeNumber
from agenttx.renamed import renamed
from agenttx.types import MAX_POLICY_DEPTH, MAX_STEP_RETRIES, REPLAY_FACTOR_RANGE, RollbackPolicy

__all__ = ["SETTINGS", "Setting", "Settings"]

Scope = Literal["engine", "command", "server"]
# What a value is read as: its type, and how text (a flag, a variable) becomes one.
Kind = Literal["whole", "real", "bool", "text", "choice", "path"]

_TRUE = ("1", "true", "t", "yes", "y", "on")
_FALSE = ("0", "false", "f", "no", "n", "off")


@dataclass(frozen=True, slots=True)
class Setting:
    """One field of ``Settings``: how it is read, checked, shown and named on each entry."""

    help: str  # one line, for ``--help`` (and a reader of the docs' table)
    kind: Kind
    scope: Scope
    unit: str = ""  # "seconds", "bytes", "days"; "" for a count or a word
    low: float = 0  # whole and real: the range, both ends included
    high: float = math.inf
    choices: tuple[str, ...] = ()  # choice: the values, lower case (read in any case)
    optional: bool = False  # None is a value: unset (its meaning is in ``shown_default``)
    off: bool = False  # None is a value, and the text "off" reads as it (shown as "off")
    many: bool = False  # a tuple: a repeatable flag, or ``separator``-separated text
    separator: str = ""  # "": repeatable flag (the variable space-separated); ",": one text
    flag: str | None = ""  # "": "--" + name with dashes; None: no flag nor variable
    shown_default: str = ""  # the default in words where it is derived: "<data-dir>/files"
    name: str = ""  # filled in from the field
    default: Any = None  # filled in from the field

    @property
    def option(self) -> str | None:
        """The flag, ``--max-constraints``; None for an ``Engine.open`` keyword only."""
        if self.flag is None:
            return None
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str | None:
        """The environment variable, ``AGENTTX_MAX_CONSTRAINTS`` (the flag's upper snake)."""
        option = self.option
        return None if option is None else "AGENTTX_" + option[2:].replace("-", "_").upper()

    @property
    def shown_range(self) -> str:
        """The range or values in words, as ``--help`` and docs/operations.md show them."""
        if self.kind == "choice":
            return ", ".join(f"`{c}`" for c in self.choices)
        if self.kind not in ("whole", "real"):
            return ""
        unit = f" {self.unit}" if self.unit else ""
        if self.high == math.inf:
            return f"≥ {_number(self.low)}{unit}"
        return f"{_number(self.low)}–{_number(self.high)}{unit}"

    @property
    def where(self) -> str:
        """Where the setting is given, for a refusal: its flag and variable, or its keyword."""
        if self.option is None:
            return f"Engine.open({self.name}=...)"
        return f"flag {self.option}, env {self.env}"

    def refusal(self, got: object, wanted: str) -> InvalidArgument:
        """The one message for a bad value, whichever entry it came in by."""
        return InvalidArgument(
            f"{self.name} must be {wanted}, got {_shown(got)}; give one in that range "
            f"({self.where})"
            if self.kind in ("whole", "real")
            else f"{self.name} must be {wanted}, got {_shown(got)} ({self.where})"
        )

    def read(self, value: object) -> Any:
        """``value`` as this setting holds it — from text (a flag, a variable) or a Python
        value (a keyword) — or the refusal. A tuple setting reads each item."""
        if self.many:
            if isinstance(value, str):
                if not self.separator:
                    raise self.refusal(value, "a list (a repeatable flag)")
                value = [p for p in (p.strip() for p in value.split(self.separator)) if p]
            if not isinstance(value, list | tuple):
                raise self.refusal(value, "a list")
            return tuple(self.read_one(v) for v in value)
        return self.read_one(value)

    def read_one(self, value: object) -> Any:
        """One value (an item of a tuple setting), read and checked."""
        if value is None and (self.optional or self.off):
            return None
        if self.off and isinstance(value, str) and value.strip().lower() == "off":
            return None
        kind = self.kind
        if kind == "whole":
            whole = WholeNumber(self.name, int(self.low), int(self.high))
            try:
                return whole.parse(value)
            except InvalidArgument:
                raise self.refusal(value, f"a whole number{self._of_unit} {self._span}") from None
        if kind == "real":
            return self._real(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = value.strip().lower() if isinstance(value, str) else None
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise self.refusal(value, "true or false")
        if kind == "choice":
            text = value.strip().lower() if isinstance(value, str) else None
            if text in self.choices:
                return text
            raise self.refusal(value, "one of " + ", ".join(self.choices))
        if kind == "path":
            if isinstance(value, str | os.PathLike):
                return Path(value)
            raise self.refusal(value, "a path")
        if isinstance(value, str):
            return value
        raise self.refusal(value, "text")

    def _real(self, value: object) -> float:
        wanted = f"a number{self._of_unit} {self._span}"
        number: float
        if isinstance(value, bool):
            raise self.refusal(value, wanted)
        if isinstance(value, int | float):
            number = value
        elif isinstance(value, str) and len(value) <= 32:
            try:
                number = float(value)
            except ValueError:
                raise self.refusal(value, wanted) from None
        else:
            raise self.refusal(value, wanted)
        if not (math.isfinite(number) and self.low <= number <= self.high):
            raise self.refusal(value, wanted)
        return number

    @property
    def _of_unit(self) -> str:
        return f" of {self.unit}" if self.unit else ""

    @property
    def _span(self) -> str:
        if self.high == math.inf:
            return f"of at least {_number(self.low)}"
        return f"from {_number(self.low)} to {_number(self.high)}"


def _number(x: float) -> str:
    """``86400`` → ``86,400``; four digits stay plain (``4096``), as the docs write them."""
    if x == int(x):
        return f"{int(x):,}" if abs(x) >= 10_000 else str(int(x))
    return f"{x:g}"


def _shown(value: object) -> str:
    """The value as given; text as it was typed (``5000`` from a flag as from a keyword)."""
    if isinstance(value, str) and value and value == value.strip() and value.isprintable():
        text = value
    else:
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def setting(default: Any, help: str, kind: Kind, scope: Scope, **spec: Any) -> Any:
    """A ``Settings`` field: its default, and how it is read (``Setting``)."""
    return field(default=default, metadata={"setting": Setting(help, kind, scope, **spec)})


_POLICY = RollbackPolicy()
# The ranges several settings share.
_DAYS: dict[str, Any] = {"unit": "days", "high": 36_500}
_COUNT: dict[str, Any] = {"low": 1, "high": 1_000_000}


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every setting, in the order ``agenttx serve --help`` shows them."""

    listen_addr: str = setting(
        "127.0.0.1:50051", "gRPC address (host:port; port 0: any).", "text", "server"
    )
    log_format: str = setting(
        "text",
        "Logs on stderr: readable lines, or one JSON object per line.",
        "choice",
        "command",
        choices=FORMATS,
    )
    log_level: str = setting(
        "info",
        "info logs every call; warning only refused and failed ones.",
        "choice",
        "command",
        choices=LEVELS,
    )
    data_dir: Path = setting(
        Path("agenttx-data"),
        "Holds agenttx.db, files/ and outbox.jsonl unless set otherwise.",
        "path",
        "command",
    )
    store: str | None = setting(
        None,
        "Store URL.",
        "text",
        "command",
        optional=True,
        shown_default="sqlite:///<data-dir>/agenttx.db",
    )
    sync_writes: bool = setting(
        False, "fsync every SQLite commit (synchronous=FULL).", "bool", "engine"
    )
    fs_root: Path | None = setting(
        None,
        "Sandbox of the fs.* tools.",
        "path",
        "engine",
        optional=True,
        shown_default="<data-dir>/files",
    )
    outbox_path: Path | None = setting(
        None,
        "JSON-lines outbox of effects.",
        "path",
        "engine",
        optional=True,
        shown_default="<data-dir>/outbox.jsonl",
    )
    smtp_url: str | None = setting(
        None,
        "Send email.send mails over SMTP: smtp://host:port (STARTTLS per --smtp-starttls) "
        "or smtps://host:port (implicit TLS); credentials from AGENTTX_SMTP_USERNAME and "
        "AGENTTX_SMTP_PASSWORD. Without it mails go to the outbox file.",
        "text",
        "command",
        optional=True,
    )
    smtp_from: str | None = setting(
        None, "The From address of every mail.", "text", "command", optional=True
    )
    smtp_starttls: str = setting(
        "auto",
        "STARTTLS on smtp://: when the server offers it, always (fail without), or never.",
        "choice",
        "command",
        choices=("auto", "require", "off"),
    )
    webhook_allow: tuple[str, ...] = setting(
        (),
        "HOST[:PORT] webhook.post may reach although it is loopback, private, link-local "
        "or metadata (repeatable; the env var is space-separated). The signing secret is "
        "AGENTTX_WEBHOOK_SECRET.",
        "text",
        "engine",
        many=True,
    )
    # The default RollbackPolicy (``policy``): its defaults and the wire's ranges.
    max_local_depth: int = setting(
        _POLICY.max_local_depth,
        "Default policy: how many steps back a local backtrack may go.",
        "whole",
        "engine",
        high=MAX_POLICY_DEPTH,
    )
    max_global_resets: int = setting(
        _POLICY.max_global_resets,
        "Default policy: rewinds to the initial state before aborting.",
        "whole",
        "engine",
        high=MAX_POLICY_DEPTH,
    )
    replay_budget_factor: float = setting(
        _POLICY.replay_budget_factor,
        "Default policy: c in the replay budget max(1, ⌈c·N·⌈log₂(N+1)⌉⌉).",
        "real",
        "engine",
        low=REPLAY_FACTOR_RANGE[0],
        high=REPLAY_FACTOR_RANGE[1],
    )
    max_step_retries: int | None = setting(
        _POLICY.max_step_retries,
        "Default policy: same-step retries in a row before a failure counts as persistent "
        "(0 = none).",
        "whole",
        "engine",
        high=MAX_STEP_RETRIES,
        optional=True,
        shown_default="max-local-depth + 1, at least 2",
    )
    step_timeout_s: float = setting(
        30.0,
        "Run time limit of tools that set none.",
        "real",
        "engine",
        unit="seconds",
        low=0.001,
        high=86_400,
    )
    tx_idle_timeout_s: float = setting(
        900.0,
        "Abort transactions idle this long; 0 turns the reaper off.",
        "real",
        "engine",
        unit="seconds",
    )
    compensation_retries: int = setting(
        3, "Tries per undo handler before it is reported as failed.", "whole", "engine", high=100
    )
    max_constraints: int = setting(
        32, "Constraints (hints) kept per transaction.", "whole", "engine", low=1, high=4096
    )
    # By default the size of the arguments a client may send (``core.limits``), so no
    # reference lets a tool receive, or the store keep, more than a request could carry.
    max_resolved_arguments_bytes: int = setting(
        1 << 20,
        "UTF-8 bytes a step's arguments may reach once its references are resolved.",
        "whole",
        "engine",
        unit="bytes",
        low=1024,
        high=1 << 30,
    )
    max_references: int = setting(
        1024, "${steps.N...} references one step's arguments may hold.", "whole", "engine", **_COUNT
    )
    max_steps: int = setting(
        100_000,
        "Live steps one transaction may hold (GetTransaction's max_revisions).",
        "whole",
        "engine",
        **_COUNT,
    )
    retention_days: float = setting(
        30.0,
        "Days ended transactions, delivered effects and stored replies are kept before "
        "maintenance deletes them; 0 keeps them forever.",
        "real",
        "engine",
        **_DAYS,
    )
    audit_retention_days: float = setting(
        365.0,
        "Days an audit chain is kept after its newest record, once its transaction is "
        "gone (deleted whole); at least --retention-days; 0 keeps chains forever.",
        "real",
        "engine",
        **_DAYS,
    )
    dead_letter_retention_days: float = setting(
        90.0,
        "Days a dead letter (an effect that could not be delivered) is kept after its "
        "last attempt, once its transaction has ended; 0 keeps dead letters forever (so does "
        "--retention-days 0).",
        "real",
        "engine",
        **_DAYS,
    )
    audit_key: Path | None = setting(
        None,
        "TOML file of audit keys ([[key]] id and secret; `agenttx audit new-key` prints "
        "one): every audit record is keyed (HMAC-SHA256) with its `sign` key, and chains are "
        "verified with its keys. Mode 600, kept apart from the store.",
        "path",
        "command",
        optional=True,
    )
    redact_fields: tuple[str, ...] = setting(
        (),
        "A field-name regex (whole name, any case) whose values are masked in what is "
        "stored and returned, beside the built-in secret names (repeatable; the env var is "
        "space-separated).",
        "text",
        "engine",
        many=True,
        flag="--redact-field",
    )
    tools: tuple[str, ...] = setting(
        (),
        "Load user tools from module[:attr] or path/to/file.py[:attr] (repeatable; the env "
        "var is space-separated).",
        "text",
        "command",
        many=True,
    )
    gateway: Path | None = setting(
        None,
        "MCP gateway file (TOML): downstream MCP servers whose tools become steps "
        "<server>.<tool>; see docs/gateway.md.",
        "path",
        "command",
        optional=True,
    )
    hint_rules: tuple[Path, ...] = setting(
        (),
        "TOML file of extra hint rules, tried before the built-in ones (repeatable; the env "
        f"var separates files with {os.pathsep!r}).",
        "path",
        "engine",
        many=True,
    )
    safety_policy: Path | None = setting(
        None,
        "TOML safety policy: approval for tools, effect classes or tenants; forbidden "
        "tools; a step cap (docs/safety.md). A bad file stops the start.",
        "path",
        "command",
        optional=True,
        flag="--policy",
    )
    receipt_ttl_s: float = setting(
        900.0,
        "How long a preview's receipt can be approved and committed with.",
        "real",
        "engine",
        unit="seconds",
        low=1,
        high=7 * 86_400,
    )
    metrics_addr: str | None = setting(
        "127.0.0.1:9464", 'Prometheus /metrics; "off" disables.', "text", "server", off=True
    )
    http_addr: str | None = setting(
        None,
        'HTTP listener (host:port) serving MCP streamable HTTP at /mcp; "off" disables.',
        "text",
        "server",
        off=True,
        optional=True,
    )
    # Host and Origin headers the HTTP listener accepts ("host:*": any port; "*": any).
    http_allowed_hosts: tuple[str, ...] = setting(
        ("127.0.0.1:*", "localhost:*", "[::1]:*"),
        'Host headers the HTTP listener accepts (comma-separated, host:* for any port; "*" '
        "for any host).",
        "text",
        "server",
        many=True,
        separator=",",
    )
    http_allowed_origins: tuple[str, ...] = setting(
        ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"),
        'Origin headers the HTTP listener accepts when one is sent (comma-separated; "*" for any).',
        "text",
        "server",
        many=True,
        separator=",",
    )
    max_streams: int = setting(
        1000,
        "Event streams open at once, of every surface (gRPC WatchTransaction, "
        "/v1/events, /v1/transactions/{id}/events, MCP GET /mcp); one more is refused "
        "(gRPC RESOURCE_EXHAUSTED, HTTP 503 with Retry-After).",
        "whole",
        "server",
        **_COUNT,
    )
    max_streams_per_key: int = setting(
        100, "Of those, how many one API key may hold open.", "whole", "server", **_COUNT
    )
    http_header_timeout_s: float = setting(
        10.0,
        "A connection must send a whole request head (request line and headers) within "
        "this, from opening or from its last response; else it is closed.",
        "real",
        "server",
        unit="seconds",
        low=0.1,
        high=600,
    )
    http_max_waiting_connections: int = setting(
        512,
        "Connections that have not sent a request head yet, at once; past it the oldest is closed.",
        "whole",
        "server",
        **_COUNT,
    )
    mcp_effect_tools: bool = setting(
        False,
        "MCP (over HTTP, or agenttx mcp's stdio) also offers the operator's list_effects and "
        "retry_effect tools (dead letters).",
        "bool",
        "command",
    )
    # The API key file (``agenttx.auth.keys``); None: no keys, so loopback binds only.
    api_keys: Path | None = setting(
        None,
        "TOML file of [[key]] tables (`agenttx keys new` prints one); every call must then "
        "carry `authorization: Bearer <key>`. SIGHUP reloads it. Without it only loopback "
        "addresses are bound.",
        "path",
        "server",
        optional=True,
    )
    # The TLS files go together: both of cert and key, or neither; a client CA needs them
    # (``__post_init__``); ``ServeConfig.tls`` is the three as ``agenttx.auth.tls`` reads them.
    tls_cert: Path | None = setting(
        None,
        "PEM certificate chain: serve gRPC and HTTP over TLS (with --tls-key).",
        "path",
        "server",
        optional=True,
    )
    tls_key: Path | None = setting(
        None, "PEM private key of --tls-cert (unencrypted).", "path", "server", optional=True
    )
    tls_client_ca: Path | None = setting(
        None,
        "PEM CA: require client certificates it signed (mutual TLS).",
        "path",
        "server",
        optional=True,
    )
    otlp_endpoint: str | None = setting(
        None,
        "OpenTelemetry traces to this OTLP/HTTP endpoint (e.g. "
        'http://127.0.0.1:4318/v1/traces; needs agenttx[otel]); "off" disables.',
        "text",
        "server",
        off=True,
        optional=True,
    )
    grace_s: float = setting(
        10.0,
        "On SIGTERM, how long in-flight calls may take to finish.",
        "real",
        "server",
        unit="seconds",
    )
    # Engine.open keywords only: no flag, no variable.
    tenant: str = setting(
        "default", "The engine's own tenant (its fs root).", "text", "engine", flag=None
    )
    audit_chain: bool = setting(
        True,
        "Append every event to its transaction's audit chain; off only to measure its cost.",
        "bool",
        "engine",
        flag=None,
    )
    compensation_keep_s: float = setting(
        86_400.0,
        "How long a commit keeps the undo record of a step whose tool declares no "
        "compensation window (docs/compensation.md).",
        "real",
        "engine",
        unit="seconds",
        high=366 * 86_400,
        flag=None,
    )
    dispatch_lease_s: float = setting(
        30.0,
        "How long an effect's delivery is claimed before another process may retry it.",
        "real",
        "engine",
        unit="seconds",
        low=0.001,
        high=86_400,
        flag=None,
    )
    dispatch_max_attempts: int = setting(
        8,
        "Deliveries of an effect before it becomes a dead letter.",
        "whole",
        "engine",
        low=1,
        high=1000,
        flag=None,
    )
    dispatch_backoff_s: float = setting(
        0.5,
        "The first wait before a failed delivery is tried again (doubling per attempt).",
        "real",
        "engine",
        unit="seconds",
        high=3600,
        flag=None,
    )

    def __post_init__(self) -> None:
        for name, s in SETTINGS.items():
            value = getattr(self, name)
            read = s.read(value)
            if read is not value:  # a list becomes a tuple, a str a Path: stored as read
                object.__setattr__(self, name, read)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidArgument("--tls-cert and --tls-key go together: give both")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise InvalidArgument("--tls-client-ca needs --tls-cert and --tls-key")
        if self.retention_days and 0 < self.audit_retention_days < self.retention_days:
            raise InvalidArgument(
                f"audit_retention_days (--audit-retention-days, {self.audit_retention_days:g}) "
                f"must be at least retention_days (--retention-days, {self.retention_days:g}): "
                "an audit chain outlives its transaction"
            )

    @property
    def policy(self) -> RollbackPolicy:
        """The default rollback policy of the four policy settings."""
        return RollbackPolicy(
            max_local_depth=self.max_local_depth,
            max_global_resets=self.max_global_resets,
            replay_budget_factor=self.replay_budget_factor,
            max_step_retries=self.max_step_retries,
        )

    def values(self) -> dict[str, Any]:
        """Every setting by name, to build a config that extends this one."""
        return {name: getattr(self, name) for name in SETTINGS}

    @classmethod
    def of(
        cls,
        keywords: Mapping[str, Any],
        where: str = "Engine.open",
        base: Settings | None = None,
    ) -> Settings:
        """``base`` (the defaults without one) with ``keywords`` set: an old name
        (``agenttx.renamed``) still works with a ``FutureWarning``; an unknown one is a
        ``TypeError`` naming the closest settings."""
        given = dict(keywords)
        for r in renamed(where):
            if r.old in given:
                warnings.warn(
                    f"{where}({r.old}=...) is deprecated; use {r.new}=... instead",
                    FutureWarning,
                    stacklevel=3,
                )
                value = r.converted(given.pop(r.old))
                given.setdefault(r.new, value)
        unknown = [name for name in given if name not in SETTINGS]
        if unknown:
            name = unknown[0]
            close = difflib.get_close_matches(name, SETTINGS, n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise TypeError(
                f"{where}() got an unexpected keyword argument {name!r}{hint} (every setting: "
                "agenttx.settings.Settings, docs/operations.md#flags)"
            )
        return replace(base, **given) if base is not None else cls(**given)


def _settings() -> dict[str, Setting]:
    table: dict[str, Setting] = {}
    for f in fields(Settings):
        default = f.default if f.default is not MISSING else None
        table[f.name] = replace(f.metadata["setting"], name=f.name, default=default)
    return table


# Every setting by name, in ``--help`` order.
SETTINGS: dict[str, Setting] = _settings()
