"""``agenttx serve``: the engine behind gRPC, with health, reflection, metrics and a drain.

Start-up: create the data directory → open the engine (the store is migrated and recovery
finishes what a crash interrupted) → serve ``/metrics`` → bind the HTTP listener (MCP at
``/mcp``, with ``--http-addr``) → bind gRPC → mark health SERVING → log one startup line.
A setting the server cannot start with raises ``StartupError`` before anything is served.

Shutdown on SIGTERM or SIGINT: health goes NOT_SERVING, the server refuses new calls at once
and lets in-flight calls finish within the grace period (``grpc.aio`` cancels what is still
running after it; an interrupted step is finished by recovery at the next start), then the
HTTP listener (its open requests get a few seconds), the metrics endpoint and the engine
close. A drained shutdown exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import disable_created_metrics

from agenttx import app
from agenttx.api.grpc.server import build_server, mark_serving
from agenttx.api.metrics import CallObserver, Metrics, MetricsEndpoint, serve_metrics
from agenttx.api.stream_slots import StreamSlots
from agenttx.audit import AuditKeys
from agenttx.auth.exposure import exposure_error
from agenttx.auth.keys import KeyRing
from agenttx.auth.tls import TlsFiles, grpc_server_credentials
from agenttx.core.engine import Engine
from agenttx.core.hints.rules import MAX_RULE_FILE_BYTES
from agenttx.core.offload import share_interpreter_promptly
from agenttx.errors import AgentTxError, InvalidArgument
from agenttx.errors import StartupError as StartupError  # re-exported: its old home
from agenttx.plural import plural
from agenttx.settings import Settings
from agenttx.tools.contract import Tool
from agenttx.tools.registry import load_tools

if TYPE_CHECKING:
    from agenttx.effects.smtp import SmtpSettings

log = logging.getLogger("agenttx.server")


@dataclass(frozen=True, kw_only=True)
class ServeConfig(Settings):
    """Everything ``agenttx serve`` takes: the ``Settings`` (each with its default, range and
    unit: ``agenttx.settings``), read as the server uses them."""

    @property
    def tls(self) -> TlsFiles | None:
        """TLS for gRPC and HTTP iff the files are set (mutual iff with a client CA)."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        return TlsFiles(self.tls_cert, self.tls_key, self.tls_client_ca)

    @property
    def store_url(self) -> str:
        return self.store or f"sqlite:///{self.data_dir / 'agenttx.db'}"

    @property
    def files_dir(self) -> Path:
        return self.fs_root if self.fs_root is not None else self.data_dir / "files"

    @property
    def outbox_file(self) -> Path:
        return self.outbox_path if self.outbox_path is not None else self.data_dir / "outbox.jsonl"


def parse_addr(text: str, what: str = "address") -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) → (host, port); port 0 picks a free one."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise StartupError(f"{what} must be host:port (port 0..65535), got {text!r}")
    return host, int(port)


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def redact(url: str) -> str:
    """The URL with any password replaced, for logs: ``postgresql://u:***@host/db``."""
    return re.sub(r"(//[^:/@]+:)[^@/]*@", r"\1***@", url)


def check_hint_rules(paths: Sequence[Path]) -> None:
    """Every ``--hint-rules`` file is a readable file. Checked before the store opens, so a
    typo in a path stops the start with the flag and the path named; a file that reads but
    does not parse is refused by the engine's rule loader, whose message names the file and
    the rule."""
    for path in paths:
        try:
            with path.open("rb") as handle:
                size = os.fstat(handle.fileno()).st_size
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise StartupError(f"--hint-rules {path}: cannot read the file: {reason}") from exc
        if size > MAX_RULE_FILE_BYTES:
            raise StartupError(
                f"--hint-rules {path}: the file is {size} bytes, over the "
                f"{MAX_RULE_FILE_BYTES}-byte limit; a rule file holds a few dozen rules — "
                "check the path"
            )


def _load(specs: Sequence[str]) -> list[Tool]:
    loaded: list[Tool] = []
    for spec in specs:
        try:
            loaded.extend(load_tools(spec))
        except AgentTxError as exc:
            raise StartupError(f"--tools {spec}: {exc.message}") from exc
    return loaded


async def listen(
    engine: Engine,
    listen_addr: str,
    *,
    metrics: Metrics | None = None,
    keys: KeyRing | None = None,
    tls: TlsFiles | None = None,
    slots: StreamSlots | None = None,
) -> tuple[Any, str]:
    """Build, bind and start the gRPC server (AgentTx, health, reflection) and mark it
    SERVING; returns the server and the address it is bound to (port 0 resolved). ``slots``:
    the count of open event streams it shares with the HTTP listener."""
    host, port = parse_addr(listen_addr, "--listen-addr")
    credentials = _grpc_credentials(tls)
    # No SO_REUSEPORT: a second server on a taken port must fail, not silently share it.
    server = build_server(
        engine,
        options=[("grpc.so_reuseport", 0)],
        interceptors=[CallObserver(metrics)],
        keys=keys,
        slots=slots,
    )
    try:
        if credentials is not None:
            bound = server.add_secure_port(_join(host, port), credentials)
        else:
            bound = server.add_insecure_port(_join(host, port))
    except RuntimeError as exc:  # grpc raises RuntimeError when it cannot bind
        raise StartupError(f"cannot listen on {listen_addr}: {exc}") from exc
    if not bound:
        raise StartupError(f"cannot listen on {listen_addr}: address in use or unavailable")
    await server.start()
    await mark_serving(server, True)
    return server, _join(host, bound)


def _grpc_credentials(tls: TlsFiles | None) -> Any:
    if tls is None:
        return None
    try:
        return grpc_server_credentials(tls)
    except AgentTxError as exc:
        raise StartupError(exc.message) from exc


def load_keys(config: ServeConfig) -> KeyRing | None:
    """The key ring of ``--api-keys``, and the rule that without one only loopback is bound
    (``agenttx.auth.exposure``); refusals are ``StartupError`` s saying what to do."""
    keys: KeyRing | None = None
    if config.api_keys is not None:
        try:
            keys = KeyRing.from_file(config.api_keys)
        except AgentTxError as exc:
            raise StartupError(exc.message) from exc
        if not len(keys):
            log.warning("--api-keys %s holds no key: every call will be refused", config.api_keys)
        return keys
    for flag, addr in (("--listen-addr", config.listen_addr), ("--http-addr", config.http_addr)):
        if addr:
            why = exposure_error(flag, parse_addr(addr, flag)[0])
            if why is not None:
                raise StartupError(why)
    return None


@dataclass
class RunningServer:
    """A started server: ``await running.stop()`` drains and closes everything."""

    config: ServeConfig
    engine: Engine
    grpc_server: Any
    address: str  # the bound host:port
    metrics: Metrics | None = None
    endpoint: MetricsEndpoint | None = None
    http: Any = None  # the HttpListener, iff --http-addr
    keys: KeyRing | None = None  # the API keys in force, iff --api-keys (SIGHUP reloads them)
    _stop_watch: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def stop(self, grace: float | None = None) -> None:
        grace = self.config.grace_s if grace is None else grace
        # NOT_SERVING first: a load balancer polling health stops routing here while the
        # in-flight calls drain.
        with contextlib.suppress(Exception):
            await mark_serving(self.grpc_server, False)
        await self.grpc_server.stop(grace)
        if self.http is not None:
            await self.http.stop()
        self._stop_watch.set()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.endpoint is not None:
            await asyncio.to_thread(self.endpoint.close)
        await self.engine.close()


def outbound_settings(config: ServeConfig) -> tuple[SmtpSettings | None, bytes | None]:
    """The SMTP settings (``--smtp-*``, credentials from the environment) and the webhook
    signing secret (``AGENTTX_WEBHOOK_SECRET``); a bad setting raises ``StartupError``."""
    from agenttx.effects.smtp import SmtpSettings
    from agenttx.effects.webhook import SECRET_ENV

    smtp = None
    if config.smtp_url:
        if not config.smtp_from:
            raise StartupError("--smtp-url needs --smtp-from, the From address of every mail")
        try:
            smtp = SmtpSettings.from_url(
                config.smtp_url, config.smtp_from, starttls=config.smtp_starttls
            )
        except ValueError as exc:
            raise StartupError(str(exc)) from None
    secret = os.environ.get(SECRET_ENV, "")
    return smtp, secret.encode() if secret else None


async def open_engine(config: ServeConfig) -> Engine:
    """Check the settings and open the engine ``config`` describes (``agenttx serve`` and
    ``agenttx mcp`` alike); a setting it cannot open with raises ``StartupError``."""
    tools = _load(config.tools)
    check_hint_rules(config.hint_rules)
    smtp, webhook_secret = outbound_settings(config)
    audit_keys = _audit_keys(config.audit_key)
    try:
        config.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create --data-dir {config.data_dir}: {exc}") from exc
    gateway = await _start_gateway(config)
    try:
        engine = await _open(config, tools, gateway, smtp, webhook_secret, audit_keys)
    except BaseException:
        if gateway is not None:
            await gateway.stop()
        raise
    if gateway is not None:
        gateway.attach(engine.registry)
        engine.on_close.append(gateway.stop)
    return engine


def _audit_keys(path: Path | None) -> AuditKeys | None:
    """The ring of ``--audit-key`` (None without it); a file that cannot be used stops the
    start, naming it and what is wrong."""
    if path is None:
        return None
    from agenttx.audit_keys import read_audit_keys

    try:
        return read_audit_keys(path)
    except InvalidArgument as exc:
        raise StartupError(exc.message) from None


async def _start_gateway(config: ServeConfig) -> Any:
    """The started MCP gateway of ``--gateway`` (None without one): the file is checked
    first, so a bad one stops the start with its line and reason."""
    if config.gateway is None:
        return None
    from agenttx.gateway import Gateway, journal_path, load_gateway

    gateway = Gateway(load_gateway(config.gateway), journal_path(config.data_dir))
    await gateway.start()
    return gateway


async def _open(
    config: ServeConfig,
    tools: list[Tool],
    gateway: Any,
    smtp: SmtpSettings | None,
    webhook_secret: bytes | None,
    audit_keys: AuditKeys | None,
) -> Engine:
    if gateway is not None:
        tools = [*tools, *gateway.tools()]
    try:
        return await app.open_engine(
            config.store_url,
            # The paths default under the data dir here, not beside the store's file.
            replace(config, fs_root=config.files_dir, outbox_path=config.outbox_file),
            smtp=smtp,
            webhook_secret=webhook_secret,
            tools=tools,
            channels=gateway.channels() if gateway is not None else None,
            undo_handlers=gateway.undo_handlers() if gateway is not None else None,
            audit_keys=audit_keys,
        )
    except StartupError:  # the store could not be opened, or a bad policy file
        raise
    except AgentTxError as exc:  # its message says what is wrong (tool clash, rules)
        raise StartupError(exc.message) from exc
    except (OSError, ImportError) as exc:
        raise StartupError(f"cannot open store {redact(config.store_url)}: {exc}") from exc


async def listen_http(
    engine: Engine,
    config: ServeConfig,
    version: str,
    keys: KeyRing | None = None,
    slots: StreamSlots | None = None,
) -> Any:
    """Bind and start the HTTP listener (MCP at /mcp) on ``config.http_addr``; ``slots``: the
    server's count of open event streams, shared with gRPC."""
    from agenttx.api.http.app import HttpListener, HttpSettings, bind, build_http_app
    from agenttx.api.mcp import AgentTxMCP, embedded

    assert config.http_addr is not None
    host, port = parse_addr(config.http_addr, "--http-addr")
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise StartupError(f"cannot listen on --http-addr {config.http_addr}: {exc}") from exc
    from agenttx.api.http.v1 import ApiSettings
    from agenttx.api.http.v1.events import Streams
    from agenttx.api.http.v1.safety_operations import SAFETY_OPERATIONS
    from agenttx.api.http.web import web_exception_handlers, web_routes

    if slots is None:
        slots = StreamSlots(config.max_streams, config.max_streams_per_key)
    api = ApiSettings(extra_operations=SAFETY_OPERATIONS, streams=Streams(slots))
    settings = HttpSettings(
        allowed_hosts=config.http_allowed_hosts,
        allowed_origins=config.http_allowed_origins,
        keys=keys,
        slots=slots,
        # /v1, /openapi.json, the dashboard
        routes=web_routes(engine, version, api, api_keys=keys is not None),
        exception_handlers=web_exception_handlers(),
    )
    adapter = AgentTxMCP(embedded(engine), version=version)
    if config.mcp_effect_tools:
        from agenttx.api.mcp.effect_tools import add_effect_tools

        add_effect_tools(adapter)
    app = build_http_app(adapter, settings)
    listener = HttpListener(
        app,
        sock,
        tls=config.tls,
        on_stop=api.streams.close,
        header_timeout_s=config.http_header_timeout_s,
        max_waiting=config.http_max_waiting_connections,
    )
    try:
        await listener.start()
    except BaseException:
        sock.close()
        raise
    return listener


async def start(config: ServeConfig) -> RunningServer:
    """Open the engine and start serving gRPC, metrics and HTTP as ``config`` says."""
    from agenttx import __version__

    metrics_host_port = (
        parse_addr(config.metrics_addr, "--metrics-addr") if config.metrics_addr else None
    )
    parse_addr(config.listen_addr, "--listen-addr")
    if config.http_addr:
        parse_addr(config.http_addr, "--http-addr")
    keys = load_keys(config)
    if config.tls is not None:
        _grpc_credentials(config.tls)  # bad TLS files stop the start before the store opens
    engine = await open_engine(config)
    # Metrics and HTTP first: once gRPC is SERVING, nothing else may fail the start.
    endpoint: MetricsEndpoint | None = None
    http: Any = None
    try:
        metrics = Metrics(__version__) if metrics_host_port else None
        if metrics is not None and metrics_host_port is not None:
            engine.events.add_listener(metrics.on_event)
            await metrics.refresh_outbox(engine.store)  # the gauges exist from the first scrape
            try:
                endpoint = serve_metrics(metrics, *metrics_host_port)
            except OSError as exc:
                raise StartupError(f"cannot serve metrics on {config.metrics_addr}: {exc}") from exc
        # The adapters call the engine through the span wrapper iff traces are exported.
        served: Any = engine
        if config.otlp_endpoint:
            from agenttx.api.tracing import TracedEngine, configure_otlp

            served = TracedEngine(engine, configure_otlp(config.otlp_endpoint))
        # One count of event streams for every surface: a key's gRPC watches, HTTP event
        # streams and MCP GET streams share its allowance and the server's total.
        slots = StreamSlots(config.max_streams, config.max_streams_per_key)
        if config.http_addr:
            http = await listen_http(served, config, __version__, keys, slots)
        server, address = await listen(
            served, config.listen_addr, metrics=metrics, keys=keys, tls=config.tls, slots=slots
        )
    except BaseException:
        if http is not None:
            await http.stop()
        if endpoint is not None:
            endpoint.close()
        await engine.close()
        raise
    running = RunningServer(config, engine, server, address, metrics, endpoint, http, keys)
    if metrics is not None:
        running._tasks.append(
            asyncio.create_task(metrics.watch_outbox(engine.store, running._stop_watch))
        )
    _announce(running, __version__)
    return running


def _announce(running: RunningServer, version: str) -> None:
    config = running.config
    metrics = running.endpoint.url if running.endpoint is not None else "off"
    scheme = "https" if config.tls is not None else "http"
    mcp_http = f"{scheme}://{running.http.address}/mcp" if running.http is not None else "off"
    # How callers are told apart: never a key, only how many there are.
    auth = plural(len(running.keys), "API key") if running.keys is not None else "none (loopback)"
    tls = "off" if config.tls is None else ("mutual" if config.tls.client_ca else "on")
    dashboard = f"{scheme}://{running.http.address}/" if running.http is not None else "off"
    if config.log_format == "json":
        log.info(
            "serving",
            extra={
                "event": "serving",
                "version": version,
                "listen_addr": running.address,
                "store": redact(config.store_url),
                "metrics": metrics,
                "mcp_http": mcp_http,
                "auth": auth,
                "tls": tls,
                "dashboard": dashboard,
                "data_dir": str(config.data_dir),
                "pid": os.getpid(),
            },
        )
    else:
        log.info(
            "AgentTx %s serving gRPC on %s · store %s · metrics %s · MCP HTTP %s · auth %s"
            " · TLS %s · dashboard %s",
            version,
            running.address,
            redact(config.store_url),
            metrics,
            mcp_http,
            auth,
            tls,
            dashboard,
        )


async def serve(
    config: ServeConfig, stop: asyncio.Event, loop: asyncio.AbstractEventLoop | None = None
) -> None:
    """Serve until ``stop`` is set, then drain and close; with ``loop``, SIGHUP reloads the
    API keys."""
    running = await start(config)
    if loop is not None and running.keys is not None:
        keys, reloads = running.keys, set[asyncio.Task[bool]]()

        def reload() -> None:  # the file is read off the loop; the task is kept until it ends
            task = loop.create_task(keys.reload_in_thread())
            reloads.add(task)
            task.add_done_callback(reloads.discard)

        with contextlib.suppress(NotImplementedError, AttributeError):  # no SIGHUP on Windows
            loop.add_signal_handler(signal.SIGHUP, reload)
    await stop.wait()
    log.info("draining: refusing new calls, waiting up to %gs for in-flight ones", config.grace_s)
    await running.stop()
    log.info("stopped")


def run(config: ServeConfig) -> None:
    """``agenttx serve``: serve until SIGTERM or SIGINT (Ctrl-C), then drain and return."""

    # The process is ours: drop the `*_created` timestamp series prometheus_client adds
    # to every counter and histogram (a global switch, so only here, never on import).
    disable_created_metrics()  # type: ignore[no-untyped-call]
    share_interpreter_promptly()  # the loop gets the interpreter back soon from busy threads

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
                loop.add_signal_handler(sig, _on_signal, sig, stop)
        await serve(config, stop, loop)

    asyncio.run(main())


def _on_signal(sig: signal.Signals, stop: asyncio.Event) -> None:
    if stop.is_set():
        log.warning("%s again: still draining", sig.name)
        return
    log.info("%s received", sig.name)
    stop.set()
