"""Every setting is stated once, in ``agenttx.settings`` (issue 23.5): its flag, variable,
default and range there are the ones ``agenttx serve`` and ``agenttx mcp`` take, the ones
``Engine.open`` takes, and the ones docs/operations.md shows — the flags table and the limits
table are checked against it here, so they cannot drift. A value out of range gets the same
message on every entry."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import agenttx
from agenttx.auth.tls import TlsFiles
from agenttx.cli import main
from agenttx.core.config import EngineConfig
from agenttx.errors import InvalidArgument
from agenttx.server import ServeConfig
from agenttx.settings import SETTINGS, Setting, Settings

pytest_plugins = ["serve_capture"]

DOCS = Path(__file__).resolve().parents[2] / "docs"
FLAGGED = [s for s in SETTINGS.values() if s.option is not None]


# ``agenttx serve``'s flags that are no setting: the TLS files, one value together.
def section(page: str, title: str) -> str:
    text = (DOCS / page).read_text()
    text = text[text.index(f"\n## {title}\n") :]
    return text[: text.index("\n## ", 4)]


def rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("|---")
    ]


def default_forms(s: Setting) -> list[str]:
    """How the docs may write a setting's default."""
    if s.shown_default:
        return [s.shown_default]
    d = s.default
    if isinstance(d, bool):
        return ["true", "on"] if d else ["false", "off"]
    if d is None or d == ():
        return ["none", "off"]
    if isinstance(d, Path):
        return [f"./{d}", str(d)]
    if isinstance(d, tuple):
        return [",".join(d)]
    if isinstance(d, float):
        return [f"{d:g}", repr(d)]
    return [str(d)]


def test_the_flags_table_shows_every_setting_with_its_variable_default_and_range() -> None:
    table = {r[0]: r for r in rows(section("operations.md", "Flags"))[1:]}
    documented = {f.strip("`") for cell in table for f in cell.split(", ")}
    assert documented == {s.option for s in FLAGGED}
    for s in FLAGGED:
        _, env, default, values = table[f"`{s.option}`"]
        assert env == f"`{s.env}`", s.name
        shown = default.replace("`", "")
        assert any(shown.startswith(form) for form in default_forms(s)), (s.name, default)
        if s.choices:
            assert all(f"`{c}`" in values for c in s.choices), (s.name, values)
        elif s.shown_range:
            assert values.startswith(s.shown_range), (s.name, values, s.shown_range)


_NUMBER = re.compile(r"([0-9][0-9,]*(?:\.[0-9]+)?)( MiB| KiB| s\b| d\b)?")
_SCALE = {" MiB": 1 << 20, " KiB": 1 << 10}
_RANGE_AFTER_FLAG = re.compile(r"`(--[a-z-]+)` \(([0-9][0-9,.]*–[0-9][0-9,.]*)")


def test_the_limits_table_agrees_with_the_settings() -> None:
    """A limit row with one setting's flag shows its default; a range next to a flag is the
    setting's range."""
    by_flag = {s.option: s for s in FLAGGED}
    checked = 0
    for row in rows(section("operations.md", "Limits"))[1:]:
        _, default, flags, *_ = row
        for flag, given in _RANGE_AFTER_FLAG.findall(" ".join(row)):
            s = by_flag[flag]
            assert s.shown_range.startswith(given), (flag, given, s.shown_range)
            checked += 1
        named = re.findall(r"`(--[a-z-]+)`", flags)
        match = _NUMBER.match(default)
        s = by_flag.get(named[0]) if len(named) == 1 else None
        if s is not None and s.kind in ("whole", "real") and match:
            number = float(match.group(1).replace(",", "")) * _SCALE.get(match.group(2) or "", 1)
            assert number == s.default, (named[0], default, s.default)
            checked += 1
    assert checked >= 15


def test_every_setting_without_a_flag_is_named_with_its_default_in_the_engine_page() -> None:
    page = (DOCS / "transactions.md").read_text()
    for s in SETTINGS.values():
        if s.option is None:
            assert f"`{s.name}` ({default_forms(s)[0]}" in page, s.name


def test_every_default_is_in_its_range_and_every_name_is_one_setting() -> None:
    Settings()  # checks every default as it would a value given
    options = [s.option for s in FLAGGED]
    assert len(options) == len(set(options))
    for s in SETTINGS.values():
        if s.name.endswith("_s"):
            assert s.unit == "seconds", s.name
        if s.name.endswith("_bytes"):
            assert s.unit == "bytes", s.name
        if s.name.endswith("_days"):
            assert s.unit == "days", s.name
        assert s.help.strip(), s.name
        assert "\n" not in s.help, s.name


def test_the_commands_take_exactly_the_settings_flags() -> None:
    def flags(command: click.Command) -> set[str]:
        return {o for p in command.params if not getattr(p, "hidden", False) for o in p.opts}

    serve, mcp = main.commands["serve"], main.commands["mcp"]
    assert flags(serve) - {"--help"} == {s.option for s in FLAGGED}
    engine_flags = {s.option for s in FLAGGED if s.scope != "server"}
    assert engine_flags <= flags(mcp)
    assert not {s.option for s in FLAGGED if s.scope == "server"} & flags(mcp)


def test_the_configs_are_the_settings_plus_what_they_resolve() -> None:
    """Neither config restates a setting: each adds only what is not one (the server's adds
    nothing: its TLS files are settings too, read together as ``ServeConfig.tls``)."""
    names = set(SETTINGS)
    assert {f.name for f in dataclasses.fields(ServeConfig)} == names
    assert {f.name for f in dataclasses.fields(EngineConfig)} - names == {
        "default_policy",
        "owner",
        "audit_keys",
        "compensation_backoff_s",
        "lock_timeout_s",
    }


# -- one message on every entry --------------------------------------------------------------


OUT_OF_RANGE: list[tuple[str, Any, str]] = [
    ("max_constraints", 5000, "5000"),
    ("step_timeout_s", 0, "0"),
    ("max_resolved_arguments_bytes", 10, "10"),
    ("retention_days", -1, "-1"),
    ("receipt_ttl_s", 10**6, "1000000"),
    ("max_step_retries", 33, "33"),
]


@pytest.mark.parametrize(("name", "value", "text"), OUT_OF_RANGE)
async def test_a_value_out_of_range_gets_one_message_on_every_entry(
    captured: list[ServeConfig], tmp_path: Path, name: str, value: Any, text: str
) -> None:
    with pytest.raises(agenttx.InvalidArgument) as keyword:
        await agenttx.Engine.open(f"sqlite:///{tmp_path / 'a.db'}", **{name: value})
    message = keyword.value.message
    s = SETTINGS[name]
    # What was wrong (the setting, its range, the value) and what to do (where to set it).
    assert message.startswith(f"{name} must be a ")
    assert f"got {text};" in message
    assert str(s.option) in message
    assert str(s.env) in message
    runner = CliRunner()
    by_flag = runner.invoke(main, ["serve", str(s.option), text], env={"COLUMNS": "300"})
    by_env = runner.invoke(main, ["serve"], env={"COLUMNS": "300", str(s.env): text})
    for result in (by_flag, by_env):
        assert result.exit_code == 2, result.output
        shown = " ".join(result.output.split())
        assert message in shown, shown
    assert not captured  # nothing was served


def test_an_unknown_keyword_names_the_close_settings() -> None:
    with pytest.raises(TypeError, match="'max_constraint'; did you mean max_constraints"):
        Settings.of({"max_constraint": 3})
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Settings.of({"colour": "blue"})


def test_keywords_override_the_settings_given() -> None:
    base = Settings(max_steps=10, webhook_allow=["hooks:8080"])
    changed = Settings.of({"max_constraints": 8}, base=base)
    assert (changed.max_steps, changed.max_constraints) == (10, 8)
    assert changed.webhook_allow == ("hooks:8080",)  # a list is held as a tuple
    assert math.isclose(Settings.of({"step_timeout_s": "1.5"}).step_timeout_s, 1.5)


def test_an_old_keyword_is_read_as_its_new_setting_with_a_warning() -> None:
    with pytest.warns(
        FutureWarning, match=r"hint_rule_files=\.\.\.\) is deprecated; use hint_rules"
    ):
        settings = Settings.of({"hint_rule_files": ["billing_rules.toml"]})
    assert settings.hint_rules == (Path("billing_rules.toml"),)


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        ({"tls_cert": "c.pem"}, "--tls-cert and --tls-key go together: give both"),
        ({"tls_key": "k.pem"}, "--tls-cert and --tls-key go together: give both"),
        ({"tls_client_ca": "ca.pem"}, "--tls-client-ca needs --tls-cert and --tls-key"),
    ],
)
def test_the_tls_files_go_together_on_every_entry(given: dict[str, str], refusal: str) -> None:
    with pytest.raises(InvalidArgument, match=refusal):
        ServeConfig(**given)  # type: ignore[arg-type]
    flags = [a for k, v in given.items() for a in ("--" + k.replace("_", "-"), v)]
    result = CliRunner().invoke(main, ["serve", *flags])
    assert result.exit_code == 2, result.output
    assert refusal in result.output


def test_tls_is_the_three_files_read_together() -> None:
    assert ServeConfig().tls is None
    tls = ServeConfig(tls_cert=Path("c.pem"), tls_key=Path("k.pem"), tls_client_ca=Path("a.pem"))
    assert tls.tls == TlsFiles(Path("c.pem"), Path("k.pem"), Path("a.pem"))
