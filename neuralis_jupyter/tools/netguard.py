"""The SSRF guard under ``web_fetch``: what a URL names, whether it may be reached, and where to connect.

:func:`vet_url` turns a URL into a :class:`Destination` or raises :class:`Refused` before any
connection is opened:

1. the URL: only ``http``/``https``; no credentials (``user@host``), no whitespace, control characters
   or backslashes, no IPv6 zone ids; ports 1-65535, any port (a public address is public on every
   port; what is refused is WHERE the connection goes, not the service behind it);
2. the host is normalised the way a resolver would read it: percent-decoded, IDNA-mapped (full-width
   digits and dots become ASCII), lower-cased, one trailing dot dropped, and a host that ends in a
   number parsed with ``inet_aton`` rules (``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``127.1`` are
   all 127.0.0.1), as WHATWG URL parsing and libc do;
3. names: a single-label name, ``localhost`` and the internal suffixes and metadata names in
   :data:`BLOCKED_SUFFIXES` / :data:`BLOCKED_NAMES` are refused without a lookup;
4. the name is resolved ONCE (A and AAAA) and every address must pass :func:`forbidden_reason`:
   refusing one bad answer among good ones, so a mixed answer cannot slip through;
5. the first address is PINNED in the :class:`Destination`; :class:`~.pinned_http.PinnedBackend` is the
   only way the HTTP layer opens a socket, and it connects to that address whatever the name resolves
   to later (DNS rebinding), while TLS still verifies the certificate against the name.

:class:`AddressPolicy` holds the administrator's allowlist (``c.WebSettings.allowed_hosts``): names,
addresses and CIDRs that pass the non-public rules (tests reach loopback fixtures that way). Cloud
metadata addresses pass no allowlist.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "BLOCKED_NAMES",
    "BLOCKED_SUFFIXES",
    "AddressPolicy",
    "Destination",
    "Refused",
    "ResolveFailed",
    "Resolver",
    "forbidden_reason",
    "normalise_host",
    "vet_url",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(Exception):
    """The URL or the address it leads to may not be fetched; the message says why, for the model."""


class ResolveFailed(Exception):
    """The name did not resolve (no such name, no answer, a timeout)."""


#: Names refused without a lookup: the local machine and the clouds' metadata services.
BLOCKED_NAMES = frozenset(("localhost", "metadata", "metadata.goog", "instance-data", "kubernetes.default"))
BLOCKED_NAMES |= {"metadata.google.internal", "metadata.azure.internal", "metadata.tencentyun.com"}
#: Suffixes of local, internal or non-DNS names, refused without a lookup.
BLOCKED_SUFFIXES = (".localhost", ".local", ".localdomain", ".internal", ".intranet", ".lan", ".svc")
BLOCKED_SUFFIXES += (".home.arpa", ".in-addr.arpa", ".ip6.arpa", ".onion")
#: Cloud metadata and host-service endpoints: refused even when an allowlist covers them.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, Azure, GCP, Oracle, OpenStack, DigitalOcean, Hetzner
        "169.254.169.253",  # AWS VPC DNS
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.0.23",  # Tencent Cloud
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (legacy)
        "168.63.129.16",  # Azure WireServer: a PUBLIC address, so only this list refuses it
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS VPC DNS over IPv6
        "fd20:ce::254",  # GCP metadata over IPv6
    )
)

_V4_RANGES: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "the unspecified 'this network' range"),
    ("127.0.0.0/8", "a loopback address"),
    ("10.0.0.0/8", "a private (RFC 1918) address"),
    ("172.16.0.0/12", "a private (RFC 1918) address"),
    ("192.168.0.0/16", "a private (RFC 1918) address"),
    ("169.254.0.0/16", "a link-local address"),
    ("100.64.0.0/10", "a carrier-grade NAT (RFC 6598) address"),
    ("192.0.0.0/24", "an IETF protocol assignment address"),
    ("192.0.2.0/24", "a documentation address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("192.88.99.0/24", "a 6to4 relay anycast address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
)
_V6_RANGES: tuple[tuple[str, str], ...] = (
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("::ffff:0:0/96", "an IPv4-mapped IPv6 address"),
    ("::/96", "an IPv4-compatible IPv6 address"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("2001::/32", "a Teredo tunnel address"),
    ("2001:2::/48", "a benchmarking address"),
    ("2001:db8::/32", "a documentation address"),
    ("3fff::/20", "a documentation address"),
    ("fc00::/7", "a unique-local address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
)
_RANGES: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(net), why) for net, why in (*_V4_RANGES, *_V6_RANGES)
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


def forbidden_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not a public destination, or ``None`` when it is one."""
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and (inner := forbidden_reason(embedded)) is not None:
            return f"an IPv6 address embedding {embedded} ({inner})"
    for network, why in _RANGES:
        if address.version == network.version and address in network:
            return why
    return None if address.is_global else "a non-public address"


def _ipv4_part(part: str) -> int | None:
    if part[:2] in ("0x", "0X"):
        digits, base = part[2:], 16
    elif len(part) > 1 and part.startswith("0"):
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    if digits == "" and base == 16:
        return 0  # WHATWG: a bare "0x" is zero
    allowed = {16: "0123456789abcdefABCDEF", 8: "01234567", 10: "0123456789"}[base]
    if not digits or any(c not in allowed for c in digits):
        return None
    return int(digits, base)


def _ends_in_number(labels: Sequence[str]) -> bool:
    last = labels[-1]
    return last.isdigit() or (last[:2] in ("0x", "0X") and _ipv4_part(last) is not None)


def _parse_ipv4(host: str, labels: Sequence[str]) -> ipaddress.IPv4Address:
    """``inet_aton`` semantics: 1 to 4 parts, each decimal, octal (leading 0) or hex (0x)."""
    numbers = [_ipv4_part(p) for p in labels]
    if len(labels) > 4 or any(n is None for n in numbers):
        raise Refused(f"the host {host!r} ends in a number but is not a valid IPv4 address")
    values = [n for n in numbers if n is not None]
    *head, last = values
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(values)):
        raise Refused(f"the host {host!r} is an out-of-range IPv4 address")
    number = last
    for index, n in enumerate(head):
        number += n << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def normalise_host(raw: str) -> str | IPAddress:
    """The host as a resolver would read it: an address, or a lower-case ASCII name without a final dot."""
    host = unquote(raw) if "%" in raw else raw
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if "%" in host:
        raise Refused(f"the host {raw!r} has a zone id or stray percent sign")
    if not host or any(c.isspace() or ord(c) < 0x21 or c in "\\/@#?[]" for c in host):
        raise Refused(f"the host {raw!r} is malformed")
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise Refused(f"the host {raw!r} is not a valid IPv6 address") from None
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise Refused(f"the host {raw!r} is not a valid internationalised name") from None
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    labels = host.split(".")
    if not host or "" in labels:
        raise Refused(f"the host {raw!r} has an empty label")
    if _ends_in_number(labels):
        return _parse_ipv4(raw, labels)
    if not all(_LABEL.fullmatch(label) for label in labels) or len(host) > 253:
        raise Refused(f"the host {raw!r} is not a valid host name")
    return host


@dataclass(frozen=True, kw_only=True)
class AddressPolicy:
    """Which non-public destinations an administrator allows (``WebSettings.allowed_hosts``)."""

    names: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> AddressPolicy:
        """Host names, addresses or CIDRs; ``ValueError`` names an entry that is none of them."""
        names: set[str] = set()
        networks: list[Network] = []
        for entry in entries:
            text = entry.strip()
            try:
                networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            try:
                host = normalise_host(text)
            except Refused as exc:
                raise ValueError(f"{entry!r} is not a host name, address or CIDR: {exc}") from None
            if isinstance(host, str):
                names.add(host)
            else:
                networks.append(ipaddress.ip_network(host))
        return cls(names=frozenset(names), networks=tuple(networks))

    def check_name(self, host: str) -> None:
        if host in self.names:
            return
        if host in BLOCKED_NAMES or host.endswith(BLOCKED_SUFFIXES):
            raise Refused(f"the host {host!r} names a local, internal or metadata service")
        if "." not in host:
            raise Refused(f"the single-label host {host!r} could name an internal machine")

    def check_address(self, host: str | IPAddress, address: IPAddress) -> None:
        reason = forbidden_reason(address)
        if reason is None:
            return
        allowed = host in self.names or any(
            address.version == n.version and address in n for n in self.networks
        )
        if not allowed or address in METADATA_ADDRESSES:
            named = "" if host == address else f" (which {host} resolves to)"
            raise Refused(f"{address}{named} is {reason}")


@dataclass(frozen=True, kw_only=True)
class Resolver:
    """Resolves a name once (A and AAAA). ``nameservers`` empty: the system resolver (``getaddrinfo`` in
    the loop's executor; /etc/hosts and search domains apply, and every address is checked all the
    same); else those servers, asked directly for the absolute name, with no cache and no search list."""

    nameservers: tuple[tuple[str, int], ...] = ()
    timeout: float = 5.0

    async def resolve(self, name: str) -> tuple[IPAddress, ...]:
        try:
            async with asyncio.timeout(self.timeout):
                found = await (self._dns(name) if self.nameservers else self._system(name))
        except TimeoutError:
            raise ResolveFailed(f"resolving {name} timed out after {self.timeout:g} s") from None
        unique = tuple(dict.fromkeys(found))
        if not unique:
            raise ResolveFailed(f"{name} has no A or AAAA record")
        return unique

    async def _system(self, name: str) -> list[IPAddress]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ResolveFailed(f"cannot resolve {name}: {exc.strerror}") from None
        return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]

    async def _dns(self, name: str) -> list[IPAddress]:
        import dns.asyncresolver
        import dns.exception
        import dns.nameserver
        import dns.resolver

        resolver = dns.asyncresolver.Resolver(configure=False)
        resolver.nameservers = [dns.nameserver.Do53Nameserver(h, p) for h, p in self.nameservers]
        resolver.lifetime = resolver.timeout = self.timeout
        answers = []
        for rdtype in ("A", "AAAA"):
            try:
                answer = await resolver.resolve(name + ".", rdtype, search=False, raise_on_no_answer=False)
            except dns.resolver.NXDOMAIN:
                raise ResolveFailed(f"{name} does not exist (NXDOMAIN)") from None
            except dns.exception.DNSException as exc:
                raise ResolveFailed(f"cannot resolve {name}: {exc}") from None
            answers += [ipaddress.ip_address(r.address) for r in answer.rrset or ()]
        return answers


@dataclass(frozen=True, kw_only=True)
class Destination:
    """One vetted request target: what to ask for, and the one address to connect to."""

    scheme: Literal["http", "https"]
    host: str
    port: int
    #: Path and query, percent-encoded ASCII.
    target: str
    address: IPAddress

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}{self.target}"


_SAFE_PATH = "/%:@!$&'()*+,;=-._~"


_PORT = re.compile(r"[0-9]{1,5}")


def _split(url: str) -> tuple[Literal["http", "https"], str, int, str]:
    """(scheme, raw host, port, target) of ``url``; the authority is split here, not by ``urlsplit``."""
    if len(url) > 8192:
        raise Refused("the URL is longer than 8192 characters")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise Refused("the URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise Refused(f"the URL is malformed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused(f"only http and https URLs are fetched, not {parts.scheme or 'a relative URL'}:")
    netloc = parts.netloc
    if "@" in netloc:
        raise Refused("URLs with credentials (user@host) are refused")
    if "\\" in netloc:
        raise Refused("the URL has a backslash in its authority")
    if netloc.startswith("["):
        end = netloc.find("]")
        host, rest = (netloc[: end + 1], netloc[end + 1 :]) if end > 0 else (netloc, "")
    else:
        host, colon, port_text = netloc.partition(":")
        rest = colon + port_text
    if not host:
        raise Refused("the URL has no host")
    port_text = rest[1:]
    if (rest and not rest.startswith(":")) or (port_text and not _PORT.fullmatch(port_text)):
        raise Refused(f"the URL's port {rest!r} is malformed")
    port = int(port_text) if port_text else (443 if scheme == "https" else 80)
    if not 0 < port < 65536:
        raise Refused(f"{port} is not a TCP port")
    path = quote(parts.path, safe=_SAFE_PATH) or "/"
    query = f"?{quote(parts.query, safe=_SAFE_PATH + '?')}" if parts.query else ""
    return scheme, host, port, path + query


async def vet_url(url: str, *, policy: AddressPolicy, resolver: Resolver) -> Destination:
    """Check ``url``, resolve its host once and pin the address; :class:`Refused` says why not."""
    scheme, raw_host, port, target = _split(url)
    host = normalise_host(raw_host)
    if isinstance(host, str):
        policy.check_name(host)
        addresses = await resolver.resolve(host)
    else:
        addresses = (host,)
    for address in addresses:
        policy.check_address(host, address)
    return Destination(scheme=scheme, host=str(host), port=port, target=target, address=addresses[0])
