"""A real SMTP server for the effect tests: aiosmtpd on a loopback port, in a thread of its
own, recording every message it accepts (envelope and parsed headers).

``hold()`` makes it record a message and then keep the client waiting before it answers, so
a test can kill the sender while it is mid-delivery (the message arrived, the sender never
heard so). ``refuse_rcpt`` maps an address to the SMTP reply it gets at RCPT TO.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller

from server_process import free_port


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: Message

    @property
    def message_id(self) -> str:
        return str(self.message["Message-ID"])


@dataclass
class MailSink:
    host: str = "127.0.0.1"
    port: int = 0
    received: list[Received] = field(default_factory=list)
    refuse_rcpt: dict[str, str] = field(default_factory=dict)
    held: threading.Event = field(default_factory=threading.Event)  # set: answer DATA now
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.held.set()

    @property
    def url(self) -> str:
        return f"smtp://{self.host}:{self.port}"

    # aiosmtpd handler hooks -----------------------------------------------------------
    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: Any
    ) -> str:
        if address in self.refuse_rcpt:
            return self.refuse_rcpt[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self._lock:
            self.received.append(
                Received(
                    envelope.mail_from,
                    list(envelope.rcpt_tos),
                    message_from_bytes(envelope.original_content or envelope.content),
                )
            )
        # The sender waits for our answer while a test holds it (a thread's event).
        await asyncio.to_thread(self.held.wait, 120)
        return "250 Message accepted"

    # for tests -------------------------------------------------------------------------
    def hold(self) -> None:
        self.held.clear()

    def release(self) -> None:
        self.held.set()

    def wait_for(self, count: int, timeout: float = 60.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.02)
        raise AssertionError(f"{count} mails expected, {len(self.received)} arrived")

    def messages(self) -> list[Received]:
        with self._lock:
            return list(self.received)


@contextmanager
def mail_sink(port: int = 0) -> Iterator[MailSink]:
    """An SMTP server on 127.0.0.1 (``port`` or a free one), stopped at the end."""
    sink = MailSink(port=port or free_port())
    controller = Controller(sink, hostname=sink.host, port=sink.port)
    controller.start()
    try:
        yield sink
    finally:
        sink.release()
        controller.stop()
