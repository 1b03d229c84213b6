"""The preview's display limits count UTF-8 bytes, not characters: a value of 4-byte characters
under the per-value limit in characters but over it in bytes is shown by size and hash, and
the values shown in all stay within the budget that keeps a preview inside one reply."""

from __future__ import annotations

from agenttx.core import changes
from agenttx.jsontext import compact


def _shown_bytes(out: list[changes.StateChange]) -> int:
    shown = [c.after for c in out if not (isinstance(c.after, dict) and c.after.get("elided"))]
    return sum(len(compact(v).encode()) for v in shown)


def test_shown_values_stay_within_the_byte_budget() -> None:
    rows = [(f"k{i}", None, compact("😀" * 1000)) for i in range(600)]  # 4,002 bytes each
    out, elided, _ = changes._state(rows)
    assert _shown_bytes(out) <= changes.MAX_PREVIEW_VALUES_BYTES
    assert elided == 600 - changes.MAX_PREVIEW_VALUES_BYTES // 4002


def test_one_value_over_the_limit_in_bytes_is_elided() -> None:
    text = compact("é" * 3000)  # 3,002 characters, 6,002 bytes
    [change], _, _ = changes._state([("k", None, text)])
    assert change.after == {"elided": True, "bytes": 6002, "sha256": change.after_sha256}


def test_a_long_diff_is_cut_in_bytes_on_a_character_boundary() -> None:
    new = ("ü" * 100 + "\n") * 800  # 160,800 bytes of text, 80,800 characters
    diff, note = changes._diff("f.txt", None, new.encode())
    assert note == f"diff cut at {changes.MAX_DIFF_BYTES} bytes"
    assert len(diff.encode()) <= changes.MAX_DIFF_BYTES
    assert diff.startswith("--- /dev/null")
