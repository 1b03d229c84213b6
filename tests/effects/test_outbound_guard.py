"""The outbound guard on its own: which targets it refuses, in which forms, and how the
allow-list (``--webhook-allow HOST[:PORT]``) lets one through."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenttx.errors import OutboundRefused
from agenttx.outbound import Endpoint, OutboundGuard

# Every form that carries an IPv4 address inside an IPv6 one, around loopback and the
# link-local metadata address: (the IPv6 address, the form the refusal names).
EMBEDDED_LOOPBACK = [
    ("::ffff:127.0.0.1", "IPv4-mapped"),
    ("::ffff:0:127.0.0.1", "IPv4-translated"),
    ("::127.0.0.1", "IPv4-compatible"),
    ("2002:7f00:1::", "6to4"),
    ("2001:0:7f00:1::", "Teredo server"),
    ("2001:0:5db8:1:0:0:80ff:fffe", "Teredo client"),  # 127.0.0.1 inverted
    ("64:ff9b::7f00:1", "NAT64"),
    ("64:ff9b::127.0.0.1", "NAT64"),
    ("64:ff9b:1::7f00:1", "NAT64 /96"),
    ("64:ff9b:1:0:7f:0:100::", "NAT64 /64"),
    ("64:ff9b:1:7f:0:1::", "NAT64 /56"),
    ("64:ff9b:1:7f00:0:100::", "NAT64 /48"),
    ("2606:4700::5efe:7f00:1", "ISATAP"),
    ("2606:4700::200:5efe:127.0.0.1", "ISATAP"),
]
EMBEDDED_LINK_LOCAL = [
    ("::169.254.169.254", "IPv4-compatible"),
    ("64:ff9b::a9fe:a9fe", "NAT64"),
    ("2002:a9fe:a9fe::1", "6to4"),
    ("fe80::200:5efe:169.254.169.254", "ISATAP"),
]

REFUSED_URLS = [
    "http://127.0.0.1/",
    "http://127.1/",  # the short form resolvers accept
    "http://2130706433/",  # 127.0.0.1 as one number
    "http://0x7f.0.0.1/",
    "http://0.0.0.0/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",  # shared address space
    "http://100.100.100.200/",  # Alibaba metadata
    "http://169.254.169.254/",
    "http://224.0.0.1/",
    "http://[::1]/",
    "http://[::]/",
    "http://[fe80::1]/",
    "http://[fd00:ec2::254]/",  # AWS metadata over IPv6
    "http://[ff02::1]/",
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped
    "http://[2002:7f00:1::]/",  # 6to4 around 127.0.0.1
    *(f"http://[{a}]/" for a, _ in [*EMBEDDED_LOOPBACK, *EMBEDDED_LINK_LOCAL]),
    "http://localhost/",
    "http://LOCALHOST./",
    "http://api.localhost/",
    "http://metadata.google.internal/",
]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_internal_targets_are_refused_as_written(url: str) -> None:
    with pytest.raises(OutboundRefused, match="webhook target refused"):
        OutboundGuard().check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/x",
        "http://93.184.216.34:8080/",
        "https://[2606:4700::1]/",
        # A public IPv4 address inside stays public: the embedding is judged by what it carries.
        "http://[::ffff:93.184.216.34]/",
        "http://[64:ff9b::93.184.216.34]/",
        "http://[2002:5db8:d822::1]/",
    ],
)
def test_public_targets_pass(url: str) -> None:
    OutboundGuard().check_url(url)


@pytest.mark.parametrize(("address", "form"), EMBEDDED_LOOPBACK)
def test_an_ipv4_embedded_in_ipv6_is_unwrapped_before_the_decision(address: str, form: str) -> None:
    with pytest.raises(OutboundRefused) as refused:
        OutboundGuard().check_url(f"http://[{address}]:8080/")
    assert f"embeds 127.0.0.1 ({form}), a loopback address" in refused.value.message
    # The allow-list still names the address as written, as for every refusal.
    assert "--webhook-allow [" in refused.value.message


@pytest.mark.parametrize(("address", "form"), EMBEDDED_LINK_LOCAL)
def test_the_metadata_address_embedded_in_ipv6_is_refused(address: str, form: str) -> None:
    with pytest.raises(OutboundRefused, match=rf"embeds 169.254.169.254 \({form}\), a link-local"):
        OutboundGuard().check_url(f"http://[{address}]/latest/")


def test_the_local_use_nat64_prefix_is_refused_whole() -> None:
    # 64:ff9b:1::/48 (RFC 8215) is not globally reachable, whatever its IPv4 reading.
    with pytest.raises(OutboundRefused, match="64:ff9b:1::"):
        OutboundGuard().check_url("http://[64:ff9b:1:5db8:d8:2200::]/")


@pytest.mark.parametrize(("address", "form"), EMBEDDED_LOOPBACK)
async def test_a_name_resolving_to_an_embedded_loopback_is_refused_at_delivery(
    address: str, form: str
) -> None:
    async def dns(host: str, port: int) -> list[str]:
        return [address]

    with pytest.raises(OutboundRefused) as refused:
        await OutboundGuard(resolver=dns).resolve("http://hooks.example.com/")
    assert f"embeds 127.0.0.1 ({form}), a loopback address" in refused.value.message
    assert refused.value.message.startswith("webhook target refused: hooks.example.com (")


def test_the_allow_list_matches_host_and_port() -> None:
    guard = OutboundGuard(["127.0.0.1:8080", "[::1]", "intranet.local:443"])
    guard.check_url("http://127.0.0.1:8080/x")
    guard.check_url("http://[::1]:1234/")  # no port: any port
    guard.check_url("https://INTRANET.local/")  # 443 by default
    with pytest.raises(OutboundRefused, match=r"--webhook-allow 127\.0\.0\.1:8081"):
        guard.check_url("http://127.0.0.1:8081/")


async def test_a_name_is_refused_by_what_it_resolves_to_unless_allowed() -> None:
    async def dns(host: str, port: int) -> list[str]:
        return {"in.example.com": ["10.1.2.3"], "out.example.com": ["93.184.216.34"]}[host]

    guard = OutboundGuard(resolver=dns)
    assert (await guard.resolve("https://out.example.com/")).address == "93.184.216.34"
    with pytest.raises(OutboundRefused, match=r"in.example.com \(10.1.2.3\) is a private"):
        await guard.resolve("https://in.example.com/")
    allowed = OutboundGuard(["in.example.com:443"], resolver=dns)
    assert (await allowed.resolve("https://in.example.com/")).address == "10.1.2.3"
    by_address = OutboundGuard(["10.1.2.3"], resolver=dns)
    assert (await by_address.resolve("https://in.example.com/")).address == "10.1.2.3"


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [
        ("example.com", Endpoint("example.com", None)),
        ("Example.COM:8443", Endpoint("example.com", 8443)),
        ("[::1]:9000", Endpoint("::1", 9000)),
        ("::1", Endpoint("::1", None)),
        ("127.0.0.1:80", Endpoint("127.0.0.1", 80)),
    ],
)
def test_allow_entries_parse(text: str, endpoint: Endpoint) -> None:
    assert Endpoint.parse(text) == endpoint


@pytest.mark.parametrize("text", ["", "host:0", "host:99999", "host:x", "[::1", ":80"])
def test_bad_allow_entries_say_what_is_wrong(text: str) -> None:
    with pytest.raises(ValueError, match=r"webhook-allow|HOST"):
        Endpoint.parse(text)


async def test_engine_open_refuses_a_bad_allow_list(tmp_path: Path) -> None:
    import agenttx

    url = f"sqlite:///{tmp_path / 'a.db'}"
    with pytest.raises(agenttx.InvalidArgument, match="webhook_allow must be a list"):
        await agenttx.Engine.open(url, webhook_allow="127.0.0.1:80")  # type: ignore[arg-type]
    with pytest.raises(agenttx.InvalidArgument, match=r"the port must be 1\.\.65535"):
        await agenttx.Engine.open(url, webhook_allow=["127.0.0.1:0"])


@pytest.mark.parametrize("url", ["http://exa mple.com/", "http://bad_host!.com/", "http://a..b/"])
def test_a_host_that_is_no_host_name_fails_the_step(url: str) -> None:
    with pytest.raises(OutboundRefused, match="is not a host name"):
        OutboundGuard().check_url(url)


def test_an_international_name_is_a_host_name() -> None:
    OutboundGuard().check_url("https://bücher.example/")
