"""Merging one server entry into an app's configuration file without losing anything else.

The promises, in order:

- **Nothing is lost.** Every key outside ``<servers>.agenttx`` reads back equal after the
  write, and inside our entry every key that is not about the transport (a timeout, ``env``,
  ``trust``) is kept. TOML is edited with tomlkit, so comments and layout survive; JSON is
  re-indented as the file was (JSON has no comments to keep). The result is parsed again with
  the standard library and compared with what was meant before anything is written.
- **A file we cannot read is left alone.** Invalid JSON or TOML (JSON with comments too), a
  duplicate key, a top level or a servers table of the wrong type, a file over
  :data:`MAX_CONFIG_BYTES`: :class:`ConfigError`, and the file is not touched.
- **One entry, however often.** A second run finds the entry as it would write it and writes
  nothing (no backup either).
- **Atomic, with a backup.** The old bytes are copied to ``<file>.agenttx-backup-<UTC time>``
  beside it; the new text goes to a temporary file in the same directory, is flushed to disk,
  and replaces the file with one rename, so a reader (or a crash) sees the old file or the
  new one, never half of one. A symlinked file is written through to its target.
- **Not over an app's own write.** Just before the rename the file is read again; if the app
  rewrote it meanwhile the merge starts over from the new text.
"""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from agenttx.cli.connect.apps import TRANSPORT_KEYS

MAX_CONFIG_BYTES = 64 * 1024 * 1024  # ~/.claude.json grows with history; far above real files
ATTEMPTS = 3  # merges started over when the file changes under us, before giving up

Action = Literal["created", "added", "updated", "unchanged"]


class ConfigError(Exception):
    """A configuration file left as it was; the message names it and says why."""


@dataclass(frozen=True)
class Outcome:
    path: Path  # the file written (symlinks followed)
    action: Action
    backup: Path | None  # the copy of the old bytes; None when nothing was replaced


def merge_entry(old: Any, ours: dict[str, Any]) -> dict[str, Any]:
    """``ours`` over ``old``: the transport keys become exactly ours, the user's other keys
    stay where they were."""
    if not isinstance(old, dict):
        return dict(ours)
    merged = {k: v for k, v in old.items() if k not in TRANSPORT_KEYS or k in ours}
    merged.update(ours)
    return merged


def expected_document(before: dict[str, Any], key: str, name: str, entry: dict[str, Any]) -> Any:
    after = copy.deepcopy(before)
    servers = after.get(key)
    if not isinstance(servers, dict):
        servers = after[key] = {}
    servers[name] = merge_entry(servers.get(name), entry)
    return after


# ---------------------------------------------------------------- JSON


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            # json.loads would keep the last one and a rewrite would drop the others.
            raise ConfigError(f"the key {k!r} appears twice in one object")
        seen[k] = v
    return seen


def parse_json(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}  # an empty file, as some apps create it
    try:
        doc = json.loads(text, object_pairs_hook=_refuse_duplicates)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg} (comments and "
            "trailing commas are not JSON: --write would lose them)"
        ) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"the top level is a JSON {type(doc).__name__}, not an object")
    return doc


def _indent(text: str) -> str | int:
    """The file's own indentation: its first indented line's, else two spaces."""
    first = re.search(r"^([ \t]+)\S", text, re.M)
    if not first:
        return 2
    return "\t" if "\t" in first.group(1) else len(first.group(1))


def merge_json(text: str, key: str, name: str, entry: dict[str, Any]) -> str | None:
    """The new text, or None when the entry is already as it would be written."""
    doc = parse_json(text)
    servers = doc.get(key)
    if servers is None:
        servers = doc[key] = {}
    elif not isinstance(servers, dict):
        raise ConfigError(f"{key!r} is a JSON {type(servers).__name__}, not an object")
    merged = merge_entry(servers.get(name), entry)
    if servers.get(name) == merged:
        return None
    servers[name] = merged
    return json.dumps(doc, indent=_indent(text), ensure_ascii=False) + "\n"


# ---------------------------------------------------------------- TOML


def parse_toml(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}") from None


def merge_toml(text: str, key: str, name: str, entry: dict[str, Any]) -> str | None:
    """Like :func:`merge_json`, editing the parsed document in place so that comments,
    order and formatting of everything else stay byte for byte."""
    import tomlkit
    from tomlkit.items import InlineTable, Table

    before = parse_toml(text)  # the standard library's verdict decides what is valid
    if text and not text.endswith("\n"):
        text += "\n"  # so that a table added at the end starts on a line of its own
    doc = tomlkit.parse(text)
    servers = doc.get(key)
    if servers is None:
        holder = tomlkit.table(is_super_table=True)  # renders as [mcp_servers.agenttx]
        holder.add(name, _toml_table(entry, inline=False))
        doc.add(key, holder)
        return _dumps(doc, text)
    if not isinstance(servers, Table | InlineTable):
        raise ConfigError(f"{key!r} is a TOML {type(before[key]).__name__}, not a table")
    old = servers.get(name)
    if not isinstance(old, Table | InlineTable):
        servers[name] = _toml_table(entry, inline=isinstance(servers, InlineTable))
        return _dumps(doc, text)
    changed = False
    for k in [k for k in old if k in TRANSPORT_KEYS and k not in entry]:
        del old[k]
        changed = True
    for k, v in entry.items():
        if k not in old or old[k].unwrap() != v:
            old[k] = v
            changed = True
    return _dumps(doc, text) if changed else None


def _dumps(doc: Any, text: str) -> str:
    import tomlkit

    out = tomlkit.dumps(doc)
    # The blank line that follows our table is only for a table after it, not for the end.
    if out.endswith("\n\n") and not text.endswith("\n\n"):
        out = out[:-1]
    return out


def _toml_table(entry: dict[str, Any], *, inline: bool) -> Any:
    import tomlkit

    table = tomlkit.inline_table() if inline else tomlkit.table()
    for k, v in entry.items():
        table.add(k, v)
    if not inline:
        table.add(tomlkit.nl())  # a blank line before whatever table follows it
    return table


# ---------------------------------------------------------------- the write


@dataclass(frozen=True)
class Format:
    parse: Callable[[str], dict[str, Any]]
    merge: Callable[[str, str, str, dict[str, Any]], str | None]


FORMATS: dict[str, Format] = {
    "json": Format(parse_json, merge_json),
    "toml": Format(parse_toml, merge_toml),
}


def render(fmt: str, key: str, name: str, entry: dict[str, Any]) -> str:
    """The text ``--write`` puts in a new file: what to paste into an existing one."""
    text = FORMATS[fmt].merge("", key, name, entry)
    assert text is not None  # an empty document never already holds the entry
    return text


def _read(path: Path) -> bytes | None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if path.is_dir():
        raise ConfigError("it is a directory")
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"it is {size} bytes, over the {MAX_CONFIG_BYTES} bytes --write reads")
    return path.read_bytes()


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")  # an editor's byte-order mark is not content
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})") from None


def write_entry(
    path: Path,
    fmt: str,
    key: str,
    name: str,
    entry: dict[str, Any],
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Outcome:
    """Merge ``entry`` as ``<key>.<name>`` into the file at ``path`` (created if missing)."""
    target = Path(os.path.realpath(path))
    try:
        for _ in range(ATTEMPTS):
            done = _attempt(target, FORMATS[fmt], key, name, entry, now)
            if done is not None:
                return done
    except ConfigError as exc:
        raise ConfigError(f"{target}: {exc}; nothing was changed") from None
    except OSError as exc:
        raise ConfigError(f"{target}: {exc.strerror or exc}; nothing was changed") from None
    raise ConfigError(f"{target}: it kept changing while we wrote it; nothing was changed")


def _attempt(
    target: Path,
    fmt: Format,
    key: str,
    name: str,
    entry: dict[str, Any],
    now: Callable[[], datetime],
) -> Outcome | None:
    raw = _read(target)
    text = "" if raw is None else _decode(raw)
    before = fmt.parse(text)
    new_text = fmt.merge(text, key, name, entry)
    if new_text is None:
        return Outcome(target, "unchanged", None)
    # The editor must have done exactly what was meant, and nothing else.
    if fmt.parse(new_text) != expected_document(before, key, name, entry):
        raise ConfigError(f"could not add {key}.{name} without changing other content")
    servers = before.get(key)
    had = isinstance(servers, dict) and name in servers
    action: Action = "created" if raw is None else "updated" if had else "added"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_temp(target, new_text.encode(), mode=_mode(target))
    try:
        if _read(target) != raw:
            tmp.unlink()
            return None  # the app wrote the file meanwhile: merge again from its new text
        backup = _backup(target, raw, now()) if raw is not None else None
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_dir(target.parent)
    return Outcome(target, action, backup)


def _mode(target: Path) -> int:
    try:
        return target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _write_temp(target: Path, data: bytes, *, mode: int) -> Path:
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _backup(target: Path, raw: bytes, when: datetime) -> Path:
    stamp = when.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1000):
        suffix = f".agenttx-backup-{stamp}" + (f"-{n}" if n else "")
        backup = target.with_name(target.name + suffix)
        try:
            # "x": never over an earlier backup, even one made this same second.
            with open(backup, "xb") as out:
                out.write(raw)
                out.flush()
                os.fsync(out.fileno())
        except FileExistsError:
            continue
        os.chmod(backup, _mode(target))  # as private as the file it copies
        return backup
    raise ConfigError(f"1000 backups named {target.name}.agenttx-backup-{stamp}* already exist")


def _sync_dir(directory: Path) -> None:
    """Make the rename itself durable (POSIX; Windows has no directory handles to sync)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
