"""The outbound guard: which hosts a webhook may reach.

A webhook is an HTTP request the server makes on an agent's behalf, so an agent that can name
any URL could make the server reach what only the server can reach: its own loopback
services, the private network, the cloud metadata endpoint (server-side request forgery).
The guard refuses such targets unless an operator allow-listed them (``--webhook-allow
HOST[:PORT]``):

- **At the step** (``check_url``): the URL's shape (http or https, a host, no credentials)
  and its host as written: an IP literal in a refused range, ``localhost`` and its
  subdomains, the metadata names. A refusal is a step failure with a hint, before anything
  is staged.
- **At delivery** (``resolve``): the host is resolved and *every* address it resolves to is
  checked; the request then goes to the address that was checked (``Target.address``), never
  to a second resolution, so a name that answers a public address to the check and a private
  one to the connection (DNS rebinding) cannot slip through. Every redirect is checked again
  the same way.

Refused: every address that is not globally routable (``ipaddress``'s ``is_global`` is false:
loopback, RFC 1918 private, link-local — which holds 169.254.169.254, the metadata address of
AWS, GCP and Azure —, shared 100.64/10 — Alibaba's 100.100.100.200 —, unique-local IPv6 —
AWS's fd00:ec2::254 —, unspecified, reserved, documentation ranges), multicast, and any IPv6
address that carries a refused IPv4 address (``embedded_ipv4``). An IPv6 address is unwrapped
before it is judged, since a host that translates or tunnels it reaches the IPv4 inside:
IPv4-mapped ``::ffff:0:0/96``, IPv4-translated ``::ffff:0:0:0/96``, IPv4-compatible ``::/96``,
6to4 ``2002::/16``, Teredo ``2001::/32`` (both the server, bits 32–63, and the client, the last
32 bits inverted), NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48`` (every RFC 6052 prefix length
the local-use /48 allows, /48 to /96, since the operator's choice is not known here; the /48 is
refused whole anyway, as not globally reachable), and ISATAP interface ids
(``…:0:5efe:a.b.c.d``, ``…:200:5efe:a.b.c.d`` under any prefix). One decision serves the step
and the delivery, so a refused address is never connected to. This module imports only the
standard library and the error tree: the tools check at the step with it, the webhook channel
at delivery.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from agenttx.errors import OutboundRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# (host, port) -> the addresses the host resolves to, as text. The default asks the system
# resolver (``getaddrinfo``) off the event loop.
Resolver = Callable[[str, int], Awaitable[list[str]]]

# Names of the metadata service wherever they are resolved (with ``localhost`` and its
# subdomains, which are loopback by RFC 6761): refused before any lookup.
_METADATA_NAMES = ("metadata.google.internal", "metadata.goog", "metadata")
_DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_URL_BYTES = 8192  # longer URLs are refused at the step: no real endpoint needs one


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One ``--webhook-allow`` entry: a host (a name or an IP, compared as written) and an
    optional port (``None``: any port)."""

    host: str
    port: int | None

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT``; a bare IPv6 is taken whole."""
        raw = text.strip()
        if not raw:
            raise ValueError("an empty --webhook-allow entry; give HOST or HOST:PORT")
        port: int | None = None
        if raw.startswith("["):
            host, bracket, rest = raw[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                raise ValueError(f"--webhook-allow {text!r}: expected [IPv6] or [IPv6]:PORT")
            port_text = rest[1:]
        elif raw.count(":") == 1:
            host, _, port_text = raw.partition(":")
        else:
            host, port_text = raw, ""
        if port_text:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ValueError(f"--webhook-allow {text!r}: the port must be 1..65535")
            port = int(port_text)
        if not host:
            raise ValueError(f"--webhook-allow {text!r}: the host is missing")
        return cls(_normal_host(host), port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Target:
    """A checked webhook target: the URL as given, and where to connect."""

    url: str
    scheme: str
    host: str  # as written in the URL, lower case, without brackets
    port: int
    address: str  # the IP the request connects to (set by ``resolve``; "" after ``check_url``)


class OutboundGuard:
    """Checks webhook targets against the refused ranges and the allow-list (see the module
    docstring). Immutable after construction: the step and the dispatcher share one."""

    def __init__(
        self,
        allow: Iterable[str | Endpoint] = (),
        *,
        resolver: Resolver | None = None,
        resolve_timeout_s: float = 5.0,
    ) -> None:
        self.allow: tuple[Endpoint, ...] = tuple(
            a if isinstance(a, Endpoint) else Endpoint.parse(a) for a in allow
        )
        self.resolver: Resolver = resolver or system_resolve
        self.resolve_timeout_s = resolve_timeout_s

    def allowed(self, host: str, port: int) -> bool:
        """True iff an allow-list entry names ``host`` (a name or an address) and ``port``."""
        host = _normal_host(host)
        return any(e.host == host and e.port in (None, port) for e in self.allow)

    def check_url(self, url: str) -> Target:
        """The URL's shape and its host as written; raises ``OutboundRefused`` with what to do.
        No lookup: that happens at delivery, where the connection is made."""
        if len(url.encode()) > MAX_URL_BYTES:
            raise OutboundRefused(
                f"webhook url is {len(url.encode())} bytes, over the limit of {MAX_URL_BYTES}"
            )
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise OutboundRefused(f"webhook url {url!r} does not parse: {exc}") from None
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise OutboundRefused(
                f"webhook url {url!r} must start with http:// or https://, not {scheme or '?'}:"
            )
        host = _normal_host(parts.hostname or "")
        if not host:
            raise OutboundRefused(f"webhook url {url!r} has no host")
        if parts.username is not None or parts.password is not None:
            raise OutboundRefused(
                "webhook url holds credentials (user:password@); pass them in headers instead"
            )
        if _ip(host) is None and not _is_hostname(host):
            raise OutboundRefused(f"webhook url {url!r}: {host!r} is not a host name")
        port = port if port is not None else _DEFAULT_PORTS[scheme]
        target = Target(url, scheme, host, port, "")
        if self.allowed(host, port):
            return target
        literal = _ip(host)
        if literal is not None:
            self._refuse_address(target, literal)
        elif host == "localhost" or host.endswith(".localhost"):
            raise OutboundRefused(self._refusal(target, f"{host} names this machine (loopback)"))
        elif host in _METADATA_NAMES:
            raise OutboundRefused(self._refusal(target, f"{host} names the cloud metadata service"))
        return target

    async def resolve(self, url: str) -> Target:
        """``check_url``, then the host resolved and every address checked; the returned
        target's ``address`` is the one to connect to. Raises ``OutboundRefused`` (a target
        refused: retrying cannot help) or ``OSError`` (the name did not resolve: it may)."""
        target = self.check_url(url)
        literal = _ip(target.host)
        if literal is not None:
            return _at(target, literal)
        async with asyncio.timeout(self.resolve_timeout_s):
            answers = await self.resolver(target.host, target.port)
        addresses = [ipaddress.ip_address(a.partition("%")[0]) for a in answers]
        if not addresses:
            raise OSError(f"{target.host} resolved to no address")
        if not self.allowed(target.host, target.port):
            for address in addresses:  # every one: the connection may use any of them
                if not self.allowed(str(address), target.port):
                    self._refuse_address(target, address)
        return _at(target, addresses[0])

    def _refuse_address(self, target: Target, address: IPAddress) -> None:
        why = refusal_reason(address)
        if why and not self.allowed(str(address), target.port):
            shown = target.host if target.host == str(address) else f"{target.host} ({address})"
            raise OutboundRefused(self._refusal(target, f"{shown} {why}"))

    def _refusal(self, target: Target, why: str) -> str:
        host = f"[{target.host}]" if ":" in target.host else target.host
        # The flag before the explanation: a hint is cut at 240 characters, and an IPv6 target
        # with an embedded address is long.
        return (
            f"webhook target refused: {why}. If this target is intended, the server operator "
            f"can allow it with --webhook-allow {host}:{target.port}; webhooks may only reach "
            "public addresses"
        )


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses of ``host`` from the system resolver (on the loop's executor)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [str(info[4][0]) for info in infos]


def refusal_reason(address: IPAddress) -> str:
    """Why the guard refuses ``address``, as the words after it ("is a loopback address",
    "embeds 127.0.0.1 (IPv4-compatible), a loopback address"); "" if it does not."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = embedded_ipv4(address)
        # Any one refused refuses the address (each may be what is reached). The refusal names
        # the most telling one: a local-use NAT64 address has four readings, and the ones of
        # unused bits (0.0.1.0) say less than a loopback or link-local one.
        refused = [(form, v4, kind) for form, v4 in embedded if (kind := refused_kind(v4))]
        telling = [r for r in refused if r[2] not in ("private", "non-public")]
        if telling or (refused and address not in _LOCAL_NAT64):
            form, ipv4, kind = (telling or refused)[0]
            return f"embeds {ipv4} ({form}), a {kind} address"
        if address in _LOCAL_NAT64:
            return "is a local-use NAT64 address (64:ff9b:1::/48, not globally reachable)"
        if any(form != "ISATAP" for form, _ in embedded):
            # A translated or tunnelled address is the IPv4 inside it, which passed; its
            # prefix's own entry in ``ipaddress`` (reserved, private) is not what is reached.
            return ""
    kind = refused_kind(address)
    return f"is a {kind} address" if kind else ""


def refused_kind(address: IPAddress) -> str:
    """The refused range ``address`` itself is in ("" if none), not unwrapping IPv6 forms
    (``refusal_reason`` does)."""
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local (cloud metadata)" if _is_metadata(address) else "link-local"
    if address.is_multicast:
        return "multicast"
    if _is_metadata(address):
        return "cloud metadata"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "non-public"
    return ""


_METADATA = {
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
}
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215


def _is_metadata(address: IPAddress) -> bool:
    return address in _METADATA


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """Every IPv4 address ``address`` may carry, with the name of the form carrying it (the
    module docstring lists them). Bit positions count from the most significant bit."""
    n = int(address)
    high, low = n >> 32, n & _V4

    def v4(bits: int) -> ipaddress.IPv4Address:
        return ipaddress.IPv4Address(bits & _V4)

    found: list[tuple[str, ipaddress.IPv4Address]] = []
    if high == 0xFFFF:
        found.append(("IPv4-mapped", v4(low)))
    elif high == 0xFFFF_0000:
        found.append(("IPv4-translated", v4(low)))
    elif high == 0 and n > 1:  # :: and ::1 are the unspecified and loopback addresses
        found.append(("IPv4-compatible", v4(low)))
    if n >> 112 == 0x2002:
        found.append(("6to4", v4(n >> 80)))
    if n >> 96 == 0x2001_0000:
        found.append(("Teredo server", v4(n >> 64)))
        found.append(("Teredo client", v4(~n)))
    if high == 0x0064_FF9B_0000_0000_0000_0000:
        found.append(("NAT64", v4(low)))
    if n >> 80 == 0x0064_FF9B_0001:
        # RFC 6052 §2.2: the IPv4 address around the reserved bits 64–71, per prefix length.
        # /96 first: the usual length, so the one a refusal names.
        found.append(("NAT64 /96", v4(low)))
        found.append(("NAT64 /64", v4(n >> 24)))
        found.append(("NAT64 /56", v4(((n >> 64) & 0xFF) << 24 | (n >> 32) & 0xFF_FFFF)))
        found.append(("NAT64 /48", v4(((n >> 64) & 0xFFFF) << 16 | (n >> 40) & 0xFFFF)))
    if high & 0xFCFF_FFFF == 0x0000_5EFE:  # ISATAP, the u and g bits either way (RFC 5214)
        found.append(("ISATAP", v4(low)))
    return found


_V4 = 0xFFFF_FFFF


def _ip(host: str) -> IPAddress | None:
    """``host`` as an address, also in the short and numeric IPv4 forms resolvers accept
    (``127.1``, ``2130706433``, ``0x7f.1``), so those are refused at the step too."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host) and host[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _is_hostname(host: str) -> bool:
    """Letters, digits, hyphens and dots once IDNA-encoded (``bücher.example`` is one)."""
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    labels = ascii_host.split(".")
    return all(_LABEL.fullmatch(label) for label in labels)


_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)", re.IGNORECASE)


def _normal_host(host: str) -> str:
    """Lower case, without IPv6 brackets, a trailing dot or a zone; IPs in canonical form
    (``::0001`` and ``::1`` are one host); international names in their IDNA form, as DNS
    and the wire see them (``bücher.example`` is ``xn--bcher-kva.example``)."""
    host = host.strip().lower().removeprefix("[").removesuffix("]").rstrip(".")
    address = _ip(host.partition("%")[0])
    if address is not None:
        return str(address)
    if not host.isascii():
        try:
            return host.encode("idna").decode("ascii")
        except UnicodeError:
            return host  # not a name: check_url says so
    return host


def _at(target: Target, address: IPAddress) -> Target:
    return Target(target.url, target.scheme, target.host, target.port, str(address))
