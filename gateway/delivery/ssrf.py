"""The SSRF guard: webhooks go to the public internet only, unless the operator says otherwise.

A webhook URL is chosen by an API client, so without a guard the gateway would POST wherever it
is told: its own admin ports on loopback, the cloud metadata service at 169.254.169.254, the
private network it runs in. The guard works at two moments:

* `check_url` when a job is created (and again before each attempt): no DNS, so it catches literal
  addresses in every spelling (`127.1`, `2130706433`, `0x7f.1`, `[::ffff:127.0.0.1]`) and the
  `localhost` names, and the API can answer 422 at once;
* `GuardedResolver` when the connection is made: the addresses a name resolves to are checked and
  the connection is made to exactly those addresses, so a DNS answer that changes between the check
  and the connect (DNS rebinding) cannot slip a private address through.

Only globally routable unicast is allowed: IPv4-mapped, NAT64 and 6to4 IPv6 forms are unwrapped and
the IPv4 address inside is judged instead.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import unicodedata
from typing import Final
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

CODE_FORBIDDEN: Final = "webhook_url_forbidden"
CODE_INVALID: Final = "webhook_url_invalid"
MAX_URL_LENGTH: Final = 4096


class UrlRefused(Exception):
    """The webhook URL is malformed (`webhook_url_invalid`) or points somewhere forbidden."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _nets4(*cidrs: str) -> tuple[ipaddress.IPv4Network, ...]:
    return tuple(ipaddress.IPv4Network(c) for c in cidrs)


def _nets6(*cidrs: str) -> tuple[ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.IPv6Network(c) for c in cidrs)


# IANA special-purpose registries plus what cloud providers use internally. The interpreter's own
# `is_global` is consulted as well, but it is not enough on its own (before CPython 3.11.10 / 3.12.4
# it calls 224.0.1.1, ::127.0.0.1 and 2002:7f00:1:: global), hence the explicit tables.
_FORBIDDEN_V4: Final = _nets4(
    "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the local host on Linux
    "10.0.0.0/8",  # private
    "100.64.0.0/10",  # carrier-grade NAT (and Alibaba's metadata at 100.100.100.200)
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, including the 169.254.169.254 metadata services
    "172.16.0.0/12",  # private
    "192.0.0.0/24",  # IETF protocol assignments
    "192.0.2.0/24",  # documentation (TEST-NET-1)
    "192.88.99.0/24",  # deprecated 6to4 relay anycast
    "192.168.0.0/16",  # private
    "198.18.0.0/15",  # benchmarking
    "198.51.100.0/24",  # documentation (TEST-NET-2)
    "203.0.113.0/24",  # documentation (TEST-NET-3)
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, including 255.255.255.255 broadcast
)

# Global unicast is 2000::/3; everything outside it (loopback, ::, ULA fc00::/7, link-local, site-local,
# multicast, discard-only 100::/64, IPv4-compatible ::/96...) is refused by that test alone. These are
# the non-global ranges carved out of 2000::/3 itself.
_GLOBAL_UNICAST_V6: Final = ipaddress.IPv6Network("2000::/3")
_FORBIDDEN_V6: Final = _nets6(
    "2001::/23",  # IETF protocol assignments: Teredo, benchmarking, ORCHID...
    "2001:db8::/32",  # documentation
    "3fff::/20",  # documentation (RFC 9637)
)
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")  # well-known prefix: IPv4 in the last 32 bits
_SIX_TO_FOUR: Final = ipaddress.IPv6Network("2002::/16")


def _unwrap(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one stands for (mapped, NAT64, 6to4), else the address itself."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip in _SIX_TO_FOUR and ip.sixtofour is not None:
            return ip.sixtofour
    return ip


def is_forbidden_address(ip: IPAddress) -> bool:
    """True unless `ip` (after unwrapping embedded IPv4) is globally routable unicast."""
    ip = _unwrap(ip)
    if isinstance(ip, ipaddress.IPv4Address):
        if any(ip in net for net in _FORBIDDEN_V4):
            return True
    else:
        if ip.scope_id is not None:
            return True
        if ip not in _GLOBAL_UNICAST_V6 or any(ip in net for net in _FORBIDDEN_V6):
            return True
    return not ip.is_global or ip.is_multicast or ip.is_private or ip.is_reserved


def _parse_ipv4_part(part: str) -> int | None:
    if not part:
        return None
    try:
        if part[:2] in ("0x", "0X"):
            return int(part[2:], 16) if len(part) > 2 else 0
        if len(part) > 1 and part[0] == "0":
            return int(part[1:], 8)
        return int(part, 10) if part.isascii() and part.isdigit() else None
    except ValueError:
        return None


def _looks_numeric(label: str) -> bool:
    if label.isascii() and label.isdigit():
        return True
    return label[:2] in ("0x", "0X") and all(c in "0123456789abcdefABCDEF" for c in label[2:])


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """Parse `host` the way browsers and `inet_aton` do (WHATWG URL "IPv4 parser").

    Returns None when the host is a name. Raises UrlRefused when it ends in a number but is not a
    valid address (`1.2.3.999`): such a host is neither a usable name nor an address.
    """
    parts = host.split(".")
    if parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if not parts or not _looks_numeric(parts[-1]):
        return None
    if len(parts) > 4:
        raise UrlRefused(CODE_INVALID, f"host {host!r} is not a valid IPv4 address")
    numbers = [_parse_ipv4_part(p) for p in parts]
    if any(n is None for n in numbers):
        raise UrlRefused(CODE_INVALID, f"host {host!r} is not a valid IPv4 address")
    values = [n for n in numbers if n is not None]
    if any(n > 255 for n in values[:-1]) or values[-1] >= 256 ** (5 - len(values)):
        raise UrlRefused(CODE_INVALID, f"host {host!r} is not a valid IPv4 address")
    address = values[-1]
    for i, n in enumerate(values[:-1]):
        address += n << (8 * (3 - i))
    return ipaddress.IPv4Address(address)


def _normalise_host(host: str) -> str:
    """Lower-case, and fold full-width digits and ideographic dots the way IDNA mapping would."""
    if not host.isascii():
        host = unicodedata.normalize("NFKC", host)
        for dot in ("\u3002", "\uff0e", "\uff61"):
            host = host.replace(dot, ".")
    return host.lower()


def literal_address(host: str) -> IPAddress | None:
    """The address a URL host denotes without DNS (IPv6, dotted or legacy IPv4), or None for a name."""
    host = _normalise_host(host)
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise UrlRefused(CODE_INVALID, f"host {host!r} is not a valid IPv6 address") from exc
    return _legacy_ipv4(host)


def _is_localhost_name(host: str) -> bool:
    name = _normalise_host(host).rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


def _check_url(url: str, allow_private: bool) -> None:
    """Refuse a webhook URL that is malformed or (statically) points at a forbidden address.

    Policy, beyond http(s) and a host:
    * credentials in the URL (`https://user:pass@host/`) are refused: the URL is stored, shown in
      `GET /v1/jobs/{id}` listings and logged, so a password in it would leak; use a secret path or
      query token, and verify our signature on the receiving side;
    * whitespace and control characters are refused rather than guessed at.
    Names other than `localhost` are judged after DNS resolution, by `GuardedResolver`.
    """
    if not isinstance(url, str) or not url:
        raise UrlRefused(CODE_INVALID, "webhook_url must be a non-empty string")
    if len(url) > MAX_URL_LENGTH:
        raise UrlRefused(CODE_INVALID, f"webhook_url is longer than {MAX_URL_LENGTH} characters")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise UrlRefused(CODE_INVALID, "webhook_url contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(CODE_INVALID, f"webhook_url is not a valid URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise UrlRefused(CODE_INVALID, "webhook_url must use http or https")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise UrlRefused(CODE_INVALID, "webhook_url must not contain credentials (user:password@)")
    host = parts.hostname
    if not host:
        raise UrlRefused(CODE_INVALID, "webhook_url has no host")
    if port == 0:
        raise UrlRefused(CODE_INVALID, "webhook_url port must be between 1 and 65535")
    address = literal_address(host)
    if allow_private:
        return
    if address is not None:
        if is_forbidden_address(address):
            raise UrlRefused(CODE_FORBIDDEN, f"webhook_url points at a non-public address ({address})")
    elif _is_localhost_name(host):
        raise UrlRefused(CODE_FORBIDDEN, "webhook_url points at localhost")


def _check_resolved(host: str, addresses: list[str]) -> None:
    """Refuse when ANY resolved address is forbidden, not only when all are.

    Refusing only all-forbidden answers would let a name publish one public and one private address
    and have the connection try the private one (happy eyeballs tries several); a receiver with a
    private address in its public DNS is misconfigured anyway.
    """
    if not addresses:
        raise UrlRefused(CODE_FORBIDDEN, f"{host} resolved to no addresses")
    for text in addresses:
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            raise UrlRefused(CODE_FORBIDDEN, f"{host} resolved to an unparsable address {text!r}") from None
        if is_forbidden_address(ip):
            raise UrlRefused(CODE_FORBIDDEN, f"{host} resolves to a non-public address ({ip})")


async def resolve_and_check(host: str, port: int, allow_private: bool) -> list[str]:
    """Resolve `host` and return its addresses, refusing (UrlRefused) if any is forbidden.

    A resolution failure raises `OSError` (`socket.gaierror`): that is a transient delivery error,
    not a policy refusal.
    """
    address = literal_address(host)
    if address is not None:
        if not allow_private and is_forbidden_address(address):
            raise UrlRefused(CODE_FORBIDDEN, f"{host} is a non-public address")
        return [str(address)]
    if not allow_private and _is_localhost_name(host):
        raise UrlRefused(CODE_FORBIDDEN, "localhost is not a public host")
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not allow_private:
        _check_resolved(host, addresses)
    return addresses


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that refuses names resolving to forbidden addresses.

    aiohttp connects to exactly the addresses a resolver returns, so checking them here (not in a
    separate lookup before the request) closes the DNS-rebinding window. The refusal is raised as
    `UrlRefused`, which aiohttp passes through unwrapped. Literal IP hosts never reach a resolver;
    the transport checks those with `check_url` before each request.
    """

    def __init__(self, allow_private: bool = False, inner: AbstractResolver | None = None) -> None:
        self._allow_private = allow_private
        self._inner = inner if inner is not None else ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        if not self._allow_private:
            _check_resolved(host, [r["host"] for r in results])
        return results

    async def close(self) -> None:
        await self._inner.close()


@functools.lru_cache(maxsize=4096)
def _verdict(url: str, allow_private: bool) -> UrlRefused | None:
    try:
        _check_url(url, allow_private)
    except UrlRefused as exc:
        return exc
    return None


def check_url(url: str, allow_private: bool) -> None:
    """Refuse a webhook URL that is malformed or (statically) points at a forbidden address.

    The verdict is a pure function of the URL, and a tenant sends the same few URLs over and over
    (at every create and every attempt): it is remembered for the last 4096 URLs.
    """
    if not isinstance(url, str):
        raise UrlRefused(CODE_INVALID, "webhook_url must be a non-empty string")
    refused = _verdict(url, allow_private)
    if refused is not None:
        raise UrlRefused(refused.code, refused.message)
