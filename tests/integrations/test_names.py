"""AgentTx tool names reach a model as names every provider accepts, and come back exactly:
the mapping matches ``^[a-zA-Z0-9_-]{1,64}$``, decodes to the name it was made from, never
gives two names one provider name, and a shortened name is known through its table only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenttx import InvalidArgument
from agenttx.integrations import (
    PROVIDER_NAME,
    NameCollision,
    ToolNames,
    provider_name,
    tool_name,
)

# Tool names as the engine takes them: 1-128 bytes of UTF-8 (no lone surrogates), with the
# characters real names use (dots, dashes, underscores) drawn often.
names = st.text(
    alphabet=st.one_of(
        st.sampled_from("._-abcXYZ019"),
        st.characters(exclude_categories=("Cs",)),
    ),
    min_size=1,
    max_size=128,
).filter(lambda n: len(n.encode()) <= 128)


@given(names)
@settings(max_examples=400)
def test_every_name_maps_to_a_name_providers_accept(name: str) -> None:
    assert PROVIDER_NAME.match(provider_name(name))


@given(names)
@settings(max_examples=400)
def test_a_name_that_fits_comes_back_exactly_and_a_shortened_one_through_its_table(
    name: str,
) -> None:
    shown = provider_name(name)
    assert ToolNames([name]).tool(shown) == name
    decoded = tool_name(shown)
    if decoded is None:  # shortened: whole escapes up to 52 characters, "-_", 10 of the hash
        assert shown[-12:-10] == "-_"
        assert len(shown) <= 64
    else:
        assert decoded == name
    if len(name) <= 8:  # even at 8 characters each (-10ffff-) such a name fits
        assert decoded == name


@given(names, names)
@settings(max_examples=400)
def test_two_names_never_meet(a: str, b: str) -> None:
    if a != b:
        assert provider_name(a) != provider_name(b)


@given(st.text(alphabet="abc.-_", min_size=1, max_size=20), st.integers(0, 3))
def test_names_that_differ_only_in_dots_dashes_and_underscores_stay_apart(
    stem: str, cut: int
) -> None:
    variants = {stem, stem.replace(".", "_"), stem.replace("_", "."), stem.replace(".", "-")}
    variants.add(stem[cut:] or stem)
    assert len({provider_name(v) for v in variants}) == len(variants)


@given(st.text(alphabet="ab-_0123456789cdef", min_size=1, max_size=64))
def test_any_provider_name_decodes_to_a_name_that_maps_back_to_it_or_to_none(
    shown: str,
) -> None:
    decoded = tool_name(shown)
    if decoded is not None:
        assert provider_name(decoded) == shown


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("kv.put", "kv--put"),
        ("files.write_file", "files--write_file"),
        ("book_room", "book_room"),
        ("my-server.read", "my-2d-server--read"),
        ("café.menu", "caf-e9---menu"),
    ],
)
def test_the_mapping_reads_as_the_docs_say(name: str, shown: str) -> None:
    assert provider_name(name) == shown
    assert tool_name(shown) == name


def test_a_long_name_is_cut_at_a_whole_escape_and_ends_in_its_hash() -> None:
    long_a = "server." + "x" * 60 + ".a"
    long_b = "server." + "x" * 60 + ".b"
    a, b = provider_name(long_a), provider_name(long_b)
    assert len(a) == 64
    assert a != b
    assert a[:52] == b[:52] == "server--" + "x" * 44
    assert a[52:54] == "-_"
    assert provider_name(long_a) == a  # stable: a hash, not a counter


def test_a_table_refuses_two_tools_under_one_name() -> None:
    table = ToolNames(["kv.put"])
    with pytest.raises(NameCollision, match=r"'kv\.put' and 'other' would both reach the model"):
        table.add("other", "kv--put")
    with pytest.raises(InvalidArgument, match="must match"):
        table.add("x", "has space")
    with pytest.raises(InvalidArgument, match="no tool is named 'kv_put' here"):
        table.tool("kv_put")
