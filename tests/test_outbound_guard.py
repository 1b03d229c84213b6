"""The outbound guard on its own: which targets it refuses, in which forms, and how the
allow-list (``--webhook-allow HOST[:PORT]``) lets one through."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenttx.errors import OutboundRefused
from agenttx.outbound import Endpoint, OutboundGuard

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
    "url", ["https://hooks.example.com/x", "http://93.184.216.34:8080/", "https://[2606:4700::1]/"]
)
def test_public_targets_pass(url: str) -> None:
    OutboundGuard().check_url(url)


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
    with pytest.raises(agenttx.InvalidArgument, match="not one string"):
        await agenttx.Engine.open(url, webhook_allow="127.0.0.1:80")  # type: ignore[arg-type]
    with pytest.raises(agenttx.InvalidArgument, match=r"the port must be 1\.\.65535"):
        await agenttx.Engine.open(url, webhook_allow=["127.0.0.1:0"])


@pytest.mark.parametrize("url", ["http://exa mple.com/", "http://bad_host!.com/", "http://a..b/"])
def test_a_host_that_is_no_host_name_fails_the_step(url: str) -> None:
    with pytest.raises(OutboundRefused, match="is not a host name"):
        OutboundGuard().check_url(url)


def test_an_international_name_is_a_host_name() -> None:
    OutboundGuard().check_url("https://bücher.example/")
