"""A ``--hint-rules`` file over 1 MiB is refused before it is read, at start (naming the flag,
the size and the limit) and by the embedded loader, as ``--policy`` and ``--gateway`` files are."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenttx.core.hints.rules import MAX_RULE_FILE_BYTES, load_rule_file
from agenttx.errors import InvalidArgument, StartupError
from agenttx.server import check_hint_rules


def big_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.toml"
    with path.open("wb") as f:
        f.truncate(MAX_RULE_FILE_BYTES + 1)  # sparse: nothing is written, the size is what counts
    return path


def test_start_refuses_a_rule_file_over_the_limit(tmp_path: Path) -> None:
    path = big_file(tmp_path)
    with pytest.raises(StartupError) as got:
        check_hint_rules([path])
    text = str(got.value)
    assert "--hint-rules" in text
    assert str(MAX_RULE_FILE_BYTES + 1) in text
    assert f"{MAX_RULE_FILE_BYTES}-byte limit" in text


def test_the_loader_refuses_it_too(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="over the 1048576-byte limit"):
        load_rule_file(big_file(tmp_path))


def test_a_file_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_bytes(b"#" * (MAX_RULE_FILE_BYTES - 1) + b"\n")  # a comment only: no rules
    check_hint_rules([path])
    assert load_rule_file(path) == ()
