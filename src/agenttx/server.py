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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import disable_created_metrics

from agenttx.api.grpc_server import build_server, mark_serving
from agenttx.api.metrics import CallObserver, Metrics, MetricsEndpoint, serve_metrics
from agenttx.core.engine import Engine
from agenttx.errors import AgentTxError
from agenttx.errors import StartupError as StartupError  # re-exported: its old home
from agenttx.tools.contract import Tool
from agenttx.tools.registry import load_tools
from agenttx.types import RollbackPolicy

log = logging.getLogger("agenttx.server")

DEFAULT_LISTEN_ADDR = "127.0.0.1:50051"
DEFAULT_METRICS_ADDR = "127.0.0.1:9464"
DEFAULT_DATA_DIR = Path("agenttx-data")


@dataclass(frozen=True)
class ServeConfig:
    """Everything ``agenttx serve`` takes; the CLI checks ranges before building one."""

    listen_addr: str = DEFAULT_LISTEN_ADDR
    data_dir: Path = DEFAULT_DATA_DIR
    store: str | None = None  # default: sqlite:///<data_dir>/agenttx.db
    fs_root: Path | None = None  # default: <data_dir>/files
    outbox_path: Path | None = None  # default: <data_dir>/outbox.jsonl
    sync_writes: bool = False
    tools: tuple[str, ...] = ()  # module[:attr] specs of user tools
    hint_rules: tuple[Path, ...] = ()  # TOML files of user hint rules, in the order given
    policy: RollbackPolicy = field(default_factory=RollbackPolicy)
    step_timeout_ms: int = 30_000
    tx_idle_timeout_secs: int = 900  # 0 turns the idle reaper off
    compensation_retries: int = 3
    max_constraints: int = 32
    max_resolved_arguments_bytes: int = 1 << 20  # a step's arguments after its references
    max_references: int = 1024  # ${steps.N…} references in one step's arguments
    metrics_addr: str | None = DEFAULT_METRICS_ADDR  # None: no metrics endpoint
    http_addr: str | None = None  # None: no HTTP listener (MCP streamable HTTP at /mcp)
    # Host and Origin headers the HTTP listener accepts ("host:*": any port; "*": any).
    http_allowed_hosts: tuple[str, ...] = ("127.0.0.1:*", "localhost:*", "[::1]:*")
    http_allowed_origins: tuple[str, ...] = (
        "http://127.0.0.1:*",
        "http://localhost:*",
        "http://[::1]:*",
    )
    grace_secs: float = 10.0
    log_format: str = "text"  # the startup line is prose in text mode, fields in json mode

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
            with path.open("rb"):
                pass
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise StartupError(f"--hint-rules {path}: cannot read the file: {reason}") from exc


def _load(specs: Sequence[str]) -> list[Tool]:
    loaded: list[Tool] = []
    for spec in specs:
        try:
            loaded.extend(load_tools(spec))
        except AgentTxError as exc:
            raise StartupError(f"--tools {spec}: {exc.message}") from exc
    return loaded


async def listen(
    engine: Engine, listen_addr: str, *, metrics: Metrics | None = None
) -> tuple[Any, str]:
    """Build, bind and start the gRPC server (AgentTx, health, reflection) and mark it
    SERVING; returns the server and the address it is bound to (port 0 resolved)."""
    host, port = parse_addr(listen_addr, "--listen-addr")
    # No SO_REUSEPORT: a second server on a taken port must fail, not silently share it.
    server = build_server(
        engine, options=[("grpc.so_reuseport", 0)], interceptors=[CallObserver(metrics)]
    )
    try:
        bound = server.add_insecure_port(_join(host, port))
    except RuntimeError as exc:  # grpc raises RuntimeError when it cannot bind
        raise StartupError(f"cannot listen on {listen_addr}: {exc}") from exc
    if not bound:
        raise StartupError(f"cannot listen on {listen_addr}: address in use or unavailable")
    await server.start()
    await mark_serving(server, True)
    return server, _join(host, bound)


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
    _stop_watch: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def stop(self, grace: float | None = None) -> None:
        grace = self.config.grace_secs if grace is None else grace
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


async def open_engine(config: ServeConfig) -> Engine:
    """Check the settings and open the engine ``config`` describes (``agenttx serve`` and
    ``agenttx mcp`` alike); a setting it cannot open with raises ``StartupError``."""
    tools = _load(config.tools)
    check_hint_rules(config.hint_rules)
    try:
        config.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create --data-dir {config.data_dir}: {exc}") from exc
    try:
        return await Engine.open(
            config.store_url,
            fs_root=config.files_dir,
            outbox_path=config.outbox_file,
            tools=tools,
            policy=config.policy,
            sync_writes=config.sync_writes,
            step_timeout_s=config.step_timeout_ms / 1000,
            tx_idle_timeout_secs=config.tx_idle_timeout_secs,
            compensation_retries=config.compensation_retries,
            max_constraints=config.max_constraints,
            max_resolved_arguments_bytes=config.max_resolved_arguments_bytes,
            max_references=config.max_references,
            hint_rule_files=config.hint_rules,
        )
    except AgentTxError as exc:  # its message says what is wrong (store URL, tool clash, rules)
        raise StartupError(exc.message) from exc
    except (OSError, ImportError) as exc:
        raise StartupError(f"cannot open store {redact(config.store_url)}: {exc}") from exc


async def listen_http(engine: Engine, config: ServeConfig, version: str) -> Any:
    """Bind and start the HTTP listener (MCP at /mcp) on ``config.http_addr``."""
    from agenttx.api.http_app import HttpListener, HttpSettings, bind, build_http_app
    from agenttx.api.mcp import AgentTxMCP, EngineBackend

    assert config.http_addr is not None
    host, port = parse_addr(config.http_addr, "--http-addr")
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise StartupError(f"cannot listen on --http-addr {config.http_addr}: {exc}") from exc
    settings = HttpSettings(
        allowed_hosts=config.http_allowed_hosts, allowed_origins=config.http_allowed_origins
    )
    app = build_http_app(AgentTxMCP(EngineBackend(engine), version=version), settings)
    listener = HttpListener(app, sock)
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
        if config.http_addr:
            http = await listen_http(engine, config, __version__)
        server, address = await listen(engine, config.listen_addr, metrics=metrics)
    except BaseException:
        if http is not None:
            await http.stop()
        if endpoint is not None:
            endpoint.close()
        await engine.close()
        raise
    running = RunningServer(config, engine, server, address, metrics, endpoint, http)
    if metrics is not None:
        running._tasks.append(
            asyncio.create_task(metrics.watch_outbox(engine.store, running._stop_watch))
        )
    _announce(running, __version__)
    return running


def _announce(running: RunningServer, version: str) -> None:
    config = running.config
    metrics = running.endpoint.url if running.endpoint is not None else "off"
    mcp_http = f"http://{running.http.address}/mcp" if running.http is not None else "off"
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
                "data_dir": str(config.data_dir),
                "pid": os.getpid(),
            },
        )
    else:
        log.info(
            "AgentTx %s serving gRPC on %s · store %s · metrics %s · MCP HTTP %s",
            version,
            running.address,
            redact(config.store_url),
            metrics,
            mcp_http,
        )


async def serve(config: ServeConfig, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then drain and close."""
    running = await start(config)
    await stop.wait()
    log.info(
        "draining: refusing new calls, waiting up to %gs for in-flight ones", config.grace_secs
    )
    await running.stop()
    log.info("stopped")


def run(config: ServeConfig) -> None:
    """``agenttx serve``: serve until SIGTERM or SIGINT (Ctrl-C), then drain and return."""

    # The process is ours: drop the `*_created` timestamp series prometheus_client adds
    # to every counter and histogram (a global switch, so only here, never on import).
    disable_created_metrics()  # type: ignore[no-untyped-call]

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
                loop.add_signal_handler(sig, _on_signal, sig, stop)
        await serve(config, stop)

    asyncio.run(main())


def _on_signal(sig: signal.Signals, stop: asyncio.Event) -> None:
    if stop.is_set():
        log.warning("%s again: still draining", sig.name)
        return
    log.info("%s received", sig.name)
    stop.set()
