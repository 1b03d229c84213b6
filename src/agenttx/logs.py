"""Log set-up for ``agenttx serve``: readable text or one JSON object per line, on stderr.

Every module logs under ``agenttx.*`` with the standard library. Fields passed as ``extra``
(``transaction_id``, ``step_id``, ``rpc``, ``code``, ``duration_ms`` …) become JSON keys in
``json`` mode and ``key=value`` pairs after the message in ``text`` mode, so one call site
serves both formats. Every line goes through the hint redactor before it is written
(``RedactingFormatter``), so a secret in a message, a field or a traceback (an exception text
quoting a password, a URL with credentials) is masked in the log too (``docs/security.md``).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields of ``record``, in the order they were given."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _timestamp(created: float) -> str:
    # UTC with milliseconds, e.g. 2025-01-31T12:00:00.123Z: sortable and unambiguous.
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        + f".{int(created % 1 * 1000):03d}Z"
    )


class TextFormatter(logging.Formatter):
    """``2025-01-31T12:00:00.123Z INFO  agenttx.rpc ExecuteStep OK transaction_id=tx_… step_id=3``
    (the message, then the ``extra`` fields as ``key=value``, quoted only when needed)."""

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{_timestamp(record.created)} {record.levelname:<5} {record.name} "
            f"{record.getMessage()}"
        )
        # A field whose value the message already shows (``"%s %s", rpc, code``) is not
        # repeated as key=value; the JSON formatter keeps every field.
        shown = record.args if isinstance(record.args, tuple) else ()
        fields = {k: v for k, v in extra_fields(record).items() if not _in(v, shown)}
        if fields:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _in(value: Any, args: tuple[Any, ...]) -> bool:
    return any(type(a) is type(value) and a == value for a in args)


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    # Quote only when needed, so ids and numbers stay easy to grep.
    return json.dumps(text) if (not text or any(c in text for c in ' "=\n')) else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, the ``extra`` fields,
    and ``exc`` (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in extra_fields(record).items():
            entry.setdefault(k, v)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class RedactingFormatter(logging.Formatter):
    """``inner``'s line with secrets masked (``agenttx.core.hints.redaction.redact``)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        from agenttx.core.hints.redaction import redact

        self.inner = inner
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(self.inner.format(record))


def configure(fmt: str = "text", level: str = "info", stream: TextIO | None = None) -> None:
    """Send ``agenttx.*`` records at ``level`` and above to ``stream`` (stderr) in ``fmt``.

    Only the ``agenttx`` logger is touched: an embedding application keeps its own set-up
    for everything else. Calling it again replaces the handler instead of adding one.
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(RedactingFormatter(JsonFormatter() if fmt == "json" else TextFormatter()))
    root = logging.getLogger("agenttx")
    for old in [h for h in root.handlers if getattr(h, "_agenttx", False)]:
        root.removeHandler(old)
    handler._agenttx = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Records stop here: a root handler set by someone else would print them twice.
    root.propagate = False
