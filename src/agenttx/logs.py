"""Log set-up for ``agenttx serve``: readable text or one JSON object per line, on stderr.

Every module logs under ``agenttx.*`` with the standard library. Fields passed as ``extra``
(``transaction_id``, ``step_id``, ``rpc``, ``code``, ``duration_ms`` …) become JSON keys in
``json`` mode and ``key=value`` pairs after the message in ``text`` mode, so one call site
serves both formats. Every line goes through the hint redactor before it is written
(``RedactingFormatter``), so a secret in a message, a field or a traceback (an exception text
quoting a password, a URL with credentials) is masked in the log too (``docs/security.md``).

No value makes a line long: every field's value, every argument of the message, the message
itself and the traceback are capped here, centrally, whatever their field (``cap_field``),
since many carry what a client sent (a tool name, a transaction id, a status message quoting
either) before any limit refused it. The cap counts the bytes of the value as written, JSON
escapes included, so a run of NULs (6 bytes each as ``\\u0000``) is cut as early as its
escaped form is long; a capped value keeps a prefix and says how many bytes it had
(``aaaa… (1048576 bytes)``). Text mode writes a quoted value with the same escapes as JSON
mode, so the two formats cap alike.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

from agenttx.redaction import redact

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)


# Escaped UTF-8 bytes a value may take in a line (its prefix and the note of its size); the
# message and a traceback get more, since they are sentences and stacks, not values.
MAX_LOG_FIELD_BYTES = 1024
MAX_LOG_MESSAGE_BYTES = 4096
MAX_LOG_TRACEBACK_BYTES = 16384
_SHORT_ESCAPES = frozenset('"\\\b\f\n\r\t')  # one backslash and a letter: 2 bytes


def _escaped_size(ch: str) -> int:
    """Bytes ``ch`` takes in a line: JSON's escapes (``ensure_ascii=False``), then UTF-8; a
    lone surrogate goes out as ``\\udXXX`` (the stream's backslashreplace)."""
    code = ord(ch)
    if ch in _SHORT_ESCAPES:
        return 2
    if code < 0x20:
        return 6
    if code < 0x80:
        return 1
    if code < 0x800:
        return 2
    if 0xD800 <= code < 0xE000:
        return 6
    return 3 if code < 0x10000 else 4


def cap_text(text: str, limit: int = MAX_LOG_FIELD_BYTES) -> str:
    """``text`` if it takes at most ``limit`` bytes as written, else its longest prefix that
    fits with `` … (N bytes)`` after it (N: ``text``'s UTF-8 size). Reads at most ``limit``
    characters of ``text`` besides counting its bytes, so a megabyte costs one encode."""
    if len(text) * 6 <= limit:  # no character takes more than 6 bytes: fits as it is
        return text
    if len(text) <= limit and sum(map(_escaped_size, text)) <= limit:
        return text
    note = f"… ({len(text.encode('utf-8', 'surrogatepass'))} bytes)"
    budget = limit - sum(map(_escaped_size, note))
    end, used = 0, 0
    for ch in text[:budget]:
        used += _escaped_size(ch)
        if used > budget:
            break
        end += 1
    return text[:end] + note


def cap_field(value: Any, limit: int = MAX_LOG_FIELD_BYTES) -> Any:
    """``value`` as a log line may hold it: numbers, booleans and None as they are; a string
    capped by ``cap_text``; anything else kept if its JSON text fits, else that text capped.
    The one cap of every value a line holds (both formatters apply it to every field and
    message argument); call it too where a value goes into a log line some other way."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return cap_text(value, limit)
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):  # a cycle, a key JSON cannot hold
        text = str(value)
    capped = cap_text(text, limit)
    return value if capped is text else capped


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields of ``record``, in the order they were given, each capped."""
    return {
        k: cap_field(v)
        for k, v in vars(record).items()
        if k not in _STANDARD and not k.startswith("_")
    }


def _capped_args(args: Any) -> Any:
    """A record's message arguments, capped; a number stays a number for ``%d``."""
    if isinstance(args, tuple):
        return tuple(_capped_arg(a) for a in args)
    if isinstance(args, dict):  # log.info("%(name)s", {"name": ...})
        return {k: _capped_arg(v) for k, v in args.items()}
    return args


def _capped_arg(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    return cap_text(value if isinstance(value, str) else str(value))


def message_of(record: logging.LogRecord) -> str:
    """``record.getMessage()`` with each argument capped, and the whole capped too."""
    message = str(record.msg)
    if record.args:
        message = message % _capped_args(record.args)
    return cap_text(message, MAX_LOG_MESSAGE_BYTES)


def _traceback(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    assert record.exc_info
    return cap_text(formatter.formatException(record.exc_info), MAX_LOG_TRACEBACK_BYTES)


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
            f"{_timestamp(record.created)} {record.levelname:<5} {record.name} {message_of(record)}"
        )
        # A field whose value the message already shows (``"%s %s", rpc, code``) is not
        # repeated as key=value; the JSON formatter keeps every field.
        shown = _capped_args(record.args) if isinstance(record.args, tuple) else ()
        fields = {k: v for k, v in extra_fields(record).items() if not _in(v, shown)}
        if fields:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + _traceback(self, record)
        return line


def _in(value: Any, args: tuple[Any, ...]) -> bool:
    return any(type(a) is type(value) and a == value for a in args)


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    # Quote only when needed, so ids and numbers stay easy to grep; a control character is
    # always escaped (a raw one could forge a line or drive a terminal), as in JSON mode.
    if text and not any(c in text for c in ' "=') and text.isprintable():
        return text
    return json.dumps(text, ensure_ascii=False)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, the ``extra`` fields,
    and ``exc`` (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": message_of(record),
        }
        for k, v in extra_fields(record).items():
            entry.setdefault(k, v)
        if record.exc_info:
            entry["exc"] = _traceback(self, record)
        return json.dumps(entry, default=str, ensure_ascii=False)


class RedactingFormatter(logging.Formatter):
    """``inner``'s line with secrets masked (``agenttx.redaction.redact``)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record))


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
