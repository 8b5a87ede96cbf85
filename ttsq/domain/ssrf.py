"""Where the service may send a request: the SSRF guard for completion webhooks' ``callback_url``.

A ``callback_url`` is chosen by whoever submits a task, so without a guard the service would POST,
from inside the network, to anything that submitter names: the cloud metadata endpoint, Redis, an
admin port. :class:`SsrfGuard` accepts only http(s) without credentials; the host is resolved and
*every* address must be globally routable (or allow-listed), so a name with one public and one
private address is refused. The addresses it approves are the only ones the deliverer connects to
(:class:`Target`), so a DNS-rebinding receiver cannot swap in a private address afterwards.

Both sides use it: a submit refuses a bad URL at once (:mod:`ttsq.api.service`), and every delivery
checks again (:mod:`ttsq.runtime.deliverer`). It is policy, with no I/O of its own: names are
resolved by the :data:`Resolver` the process hands it (the OS's, through the event loop, in
production; a table in tests).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import httpx

MAX_URL_CHARS = 2048

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressClass(StrEnum):
    """Why an address is not one the service may call (each named in the refusal)."""

    UNSPECIFIED = "unspecified"
    LOOPBACK = "loopback"
    PRIVATE = "private"
    LINK_LOCAL = "link-local"
    MULTICAST = "multicast"
    SHARED = "shared"
    RESERVED = "reserved"
    SPECIAL = "special-purpose"
    CLOUD_METADATA = "cloud metadata"


_METADATA = {
    ipaddress.ip_address("169.254.169.254"): "cloud metadata",
    ipaddress.ip_address("169.254.170.2"): "cloud metadata, AWS ECS",
    ipaddress.ip_address("fd00:ec2::254"): "AWS instance metadata over IPv6",
    ipaddress.ip_address("100.100.100.200"): "Alibaba Cloud",
    ipaddress.ip_address("168.63.129.16"): "Azure WireServer",
}
"""Metadata endpoints, refused by name (168.63.129.16 is even globally routable)."""

_PRIVATE = [ipaddress.ip_network(net) for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "fec0::/10")]
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class Refusal:
    """Why one address is refused."""

    address: IPAddress
    address_class: AddressClass
    note: str | None = None

    def describe(self) -> str:
        article = "an" if self.address_class.value[0] in "aeiou" else "a"
        kind = f"{article} {self.address_class.value} address"
        return f"{kind} ({self.note})" if self.note else kind


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4): it is where packets end up."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "IPv4-mapped"
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "NAT64"
    if address.sixtofour is not None:
        return address.sixtofour, "6to4"
    return None


def classify(address: IPAddress) -> Refusal | None:
    """Why the service must not call ``address``; None when it is globally routable."""
    if isinstance(address, ipaddress.IPv6Address):
        address = address if address.scope_id is None else ipaddress.IPv6Address(str(address).split("%")[0])
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner = classify(embedded[0])
            if inner is not None:
                return Refusal(
                    address, inner.address_class, f"{embedded[1]} {embedded[0]}" + (f", {inner.note}" if inner.note else "")
                )
    if address in _METADATA:
        name = _METADATA[address]
        return Refusal(address, AddressClass.LINK_LOCAL if address.is_link_local else AddressClass.CLOUD_METADATA, name)
    if address.is_unspecified or address in _THIS_NETWORK:
        return Refusal(address, AddressClass.UNSPECIFIED)
    checks: tuple[tuple[bool, AddressClass, str | None], ...] = (
        (address.is_loopback, AddressClass.LOOPBACK, None),
        (address.is_link_local, AddressClass.LINK_LOCAL, None),
        (address.is_multicast, AddressClass.MULTICAST, None),
        (address in _SHARED, AddressClass.SHARED, "carrier-grade NAT, 100.64.0.0/10"),
        (any(address in net for net in _PRIVATE), AddressClass.PRIVATE, None),
        (address.is_reserved, AddressClass.RESERVED, None),
        (not address.is_global, AddressClass.SPECIAL, "not globally routable"),
    )
    for hit, address_class, note in checks:
        if hit:
            return Refusal(address, address_class, note)
    return None


class RefusedUrl(ValueError):
    """A ``callback_url`` the service will not call, ever (not retried). The message is for the client."""

    def __init__(self, message: str, refusal: Refusal | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal


MAX_HOST_CHARS = 253
MAX_LABEL_CHARS = 63
"""DNS limits on a host name and on each of its dot-separated labels (RFC 1035, 2.3.4)."""


def _check_host_name(host: str) -> None:
    """Refuse a host name DNS cannot carry. Python's resolver encodes a name with the IDNA codec before it asks, and a
    label over 63 characters raised ``UnicodeError`` there: a 500 on submit that any caller could cause."""
    if host.startswith("["):
        return  # an IPv6 literal
    name = host.rstrip(".")
    if len(name) > MAX_HOST_CHARS:
        raise RefusedUrl(f"callback_url host is {len(name)} characters long; DNS names have at most {MAX_HOST_CHARS}")
    for label in name.split("."):
        if not 1 <= len(label) <= MAX_LABEL_CHARS:
            raise RefusedUrl(f"callback_url host has a label of {len(label)} characters; DNS labels have 1 to {MAX_LABEL_CHARS}")


class UnresolvableUrl(Exception):
    """The host did not resolve (now): a delivery retries; a submit may refuse it."""


Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""(host, port) → IP address strings: :func:`ttsq.runtime.deliverer.system_resolver` in production, a table in tests."""


@dataclass(frozen=True)
class Target:
    """A URL the guard approved and the addresses it approved for it (connect only to these)."""

    url: httpx.URL
    port: int
    addresses: tuple[IPAddress, ...]


DEFAULT_PORTS = frozenset({80, 443})
"""The ports an allow-list entry without one opens: http's and https's own."""

Ports = frozenset[int] | None
"""The ports an allow-list entry opens; None: every port (``:*``)."""


def _ports(entry: str, text: str) -> Ports:
    if text == "*":
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"webhook allow-list entry {entry!r} has no valid port (1-65535, or * for every port)")
    return frozenset({int(text)})


def _allow_entry(entry: str) -> tuple[str, Ports]:
    """An allow-list entry's target (a network, an address or a host name) and the ports it opens.

    ``TARGET`` opens ports 80 and 443, ``TARGET:PORT`` that port, ``TARGET:*`` every port; an IPv6 target with a
    port is written in brackets (``[fd00::/8]:8443``), and one without brackets has no port.
    """
    try:
        ipaddress.ip_network(entry, strict=False)
        return entry, DEFAULT_PORTS
    except ValueError:
        pass
    if entry.startswith("["):
        inner, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"webhook allow-list entry {entry!r} is not [IPv6]:port")
        return inner, _ports(entry, rest[1:]) if rest else DEFAULT_PORTS
    target, colon, port = entry.rpartition(":")
    if not colon or not (port.isdigit() or port == "*"):
        return entry, DEFAULT_PORTS  # no port (a ':' elsewhere makes it no host name either: refused below)
    return target, _ports(entry, port)


def _opens(ports: Ports, port: int) -> bool:
    return ports is None or port in ports


class SsrfGuard:
    """Only http(s), no credentials in the URL, and every resolved address globally routable.

    ``allow`` names exceptions (``WEBHOOK_ALLOW``): CIDR networks or single addresses
    (``10.20.0.0/16``, ``127.0.0.1``, ``fd00::/8``), or host names whose every address is then
    accepted (an allow-listed name trusts its DNS: prefer networks). Each opens only its ports: 80 and
    443 unless the entry names one (``hooks.internal:8080``, ``[fd00::/8]:8443``) or every one
    (``10.20.0.0/16:*``), so an allow-listed host is not a port scanner's way into everything it runs.
    """

    def __init__(self, allow: Iterable[str], *, resolver: Resolver, resolve_timeout_s: float) -> None:
        self.networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, Ports]] = []
        self.hosts: list[tuple[str, Ports]] = []
        for entry in (item.strip() for item in allow):
            if not entry:
                continue
            target, ports = _allow_entry(entry)
            try:
                self.networks.append((ipaddress.ip_network(target, strict=False), ports))
            except ValueError:
                host = target.lower().rstrip(".")
                if not host or any(not (c.isalnum() or c in "-._") for c in host):
                    raise ValueError(f"webhook allow-list entry {entry!r} is neither a network nor a host name") from None
                self.hosts.append((host, ports))
        self.resolver = resolver
        self.resolve_timeout_s = resolve_timeout_s

    def parse(self, url: str) -> httpx.URL:
        """The checks that need no DNS (for a submit to refuse a bad URL at once): scheme, credentials, host."""
        if len(url) > MAX_URL_CHARS:
            raise RefusedUrl(f"callback_url is longer than {MAX_URL_CHARS} characters")
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise RefusedUrl(f"callback_url is not a valid URL: {exc}") from exc
        if not parsed.scheme:
            raise RefusedUrl("callback_url must be an absolute http or https URL")
        if parsed.scheme not in ("http", "https"):
            raise RefusedUrl(f"callback_url must be an http or https URL, not {parsed.scheme}")
        if parsed.userinfo:
            raise RefusedUrl("callback_url must not carry a user name or password")
        if not parsed.host:
            raise RefusedUrl("callback_url has no host")
        if parsed.port is not None and not 1 <= parsed.port <= 65_535:
            raise RefusedUrl(f"callback_url port {parsed.port} is not a TCP port (1-65535)")
        _check_host_name(parsed.raw_host.decode("ascii"))
        return parsed

    def _allowed(self, address: IPAddress, port: int) -> bool:
        candidates: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)
        return any(candidate in net and _opens(ports, port) for candidate in candidates for net, ports in self.networks)

    async def check(self, url: str) -> Target:
        """Approve ``url`` and the addresses to connect to, or raise :class:`RefusedUrl` / :class:`UnresolvableUrl`."""
        parsed = self.parse(url)
        host = parsed.raw_host.decode("ascii")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            addresses: list[IPAddress] = [ipaddress.ip_address(host)]
        except ValueError:
            addresses = await self._resolve(host, port)
        named = any(name == host.lower().rstrip(".") and _opens(ports, port) for name, ports in self.hosts)
        for address in addresses:
            refusal = classify(address)
            if refusal is not None and not named and not self._allowed(address, port):
                raise RefusedUrl(f"callback_url resolves to {address}, {refusal.describe()}; refused", refusal)
        return Target(url=parsed, port=port, addresses=tuple(addresses))

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        try:
            async with asyncio.timeout(self.resolve_timeout_s):
                found = await self.resolver(host, port)
        except (OSError, TimeoutError, UnicodeError) as exc:  # UnicodeError: the IDNA codec inside getaddrinfo
            raise UnresolvableUrl(f"callback_url host {host!r} did not resolve: {exc or 'timed out'}") from exc
        addresses: list[IPAddress] = []
        for text in found:
            try:
                addresses.append(ipaddress.ip_address(text.split("%")[0]))
            except ValueError as exc:
                raise UnresolvableUrl(f"callback_url host {host!r} resolved to {text!r}, not an address") from exc
        if not addresses:
            raise UnresolvableUrl(f"callback_url host {host!r} has no address")
        return addresses
