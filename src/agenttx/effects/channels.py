"""Channels deliver one effect each; the ``Channel`` contract and the JSON-lines file channel.

A channel is called at least once per effect, always with the effect's idempotency key; it
should make a repeated delivery of the same key harmless (the JSON-lines channel skips keys it
has already written, so its file holds each effect once even across crashes).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# Defined in the one error tree; re-exported here, where channels have always found it.
from agenttx.errors import PermanentDeliveryError as PermanentDeliveryError


@dataclass(frozen=True, slots=True)
class Effect:
    id: int  # outbox row id
    tx_id: str
    step_id: int
    channel: str
    payload: Any
    idempotency_key: str
    attempt: int  # 1 on the first delivery
    committed_at: float  # unix seconds


class Channel(Protocol):
    async def deliver(self, effect: Effect) -> None:
        """Deliver or raise. ``PermanentDeliveryError`` skips the remaining retries."""


class JsonlChannel:
    """Appends one compact JSON object per effect to a file, in the reference's format:
    ``tx_id, committed_at_ms, step_id, channel, payload, idempotency_key``."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._written: set[str] | None = None  # keys already in the file, loaded on first use
        self._lock = threading.Lock()

    def _load(self) -> set[str]:
        keys: set[str] = set()
        if self.path.exists():
            with open(self.path, encoding="utf-8") as f:
                for line in f:
                    try:
                        keys.add(json.loads(line)["idempotency_key"])
                    except (ValueError, KeyError, TypeError):
                        continue  # a torn last line from a crash mid-append
        return keys

    def write(self, effect: Effect) -> None:
        with self._lock:
            if self._written is None:
                self._written = self._load()
            if effect.idempotency_key in self._written:
                return
            line = json.dumps(
                {
                    "tx_id": effect.tx_id,
                    "committed_at_ms": int(effect.committed_at * 1000),
                    "step_id": effect.step_id,
                    "channel": effect.channel,
                    "payload": effect.payload,
                    "idempotency_key": effect.idempotency_key,
                },
                separators=(",", ":"),
                ensure_ascii=False,
            )
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
                    f.flush()
                    if self.fsync:
                        os.fsync(f.fileno())
            except OSError as exc:
                raise OSError(f"open outbox {self.path}: {exc}") from exc
            self._written.add(effect.idempotency_key)

    async def deliver(self, effect: Effect) -> None:
        self.write(effect)
