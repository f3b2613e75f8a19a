"""The SSRF guard refuses every spelling of a non-public address, statically and after DNS."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.delivery.ssrf import (
    CODE_FORBIDDEN,
    CODE_INVALID,
    GuardedResolver,
    UrlRefused,
    check_url,
    is_forbidden_address,
    literal_address,
    resolve_and_check,
)

FORBIDDEN_ADDRESSES = [
    "127.0.0.1",
    "127.255.255.254",
    "10.0.0.1",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "100.64.0.1",
    "100.100.100.200",  # Alibaba metadata
    "169.254.169.254",  # AWS/GCP/Azure metadata
    "169.254.0.1",
    "0.0.0.0",
    "0.1.2.3",
    "198.18.0.1",
    "198.19.255.255",
    "192.0.2.1",
    "198.51.100.7",
    "203.0.113.9",
    "192.0.0.8",
    "224.0.0.1",
    "224.0.1.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "::",
    "::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::127.0.0.1",  # IPv4-compatible
    "64:ff9b::127.0.0.1",  # NAT64
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b:1::1",  # local-use NAT64
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::",  # 6to4 of 169.254.169.254
    "fc00::1",
    "fd00:ec2::254",  # AWS metadata over IPv6
    "fe80::1",
    "fec0::1",
    "ff02::1",
    "100::1",
    "2001:db8::1",
    "2001::1",  # Teredo
    "3fff::1",
]

PUBLIC_ADDRESSES = [
    "93.184.216.34",
    "8.8.8.8",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
]


@pytest.mark.parametrize("address", FORBIDDEN_ADDRESSES)
def test_forbidden_addresses(address: str) -> None:
    assert is_forbidden_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC_ADDRESSES)
def test_public_addresses(address: str) -> None:
    assert not is_forbidden_address(ipaddress.ip_address(address))


def test_scoped_ipv6_is_forbidden() -> None:
    assert is_forbidden_address(ipaddress.IPv6Address("fe80::1%eth0"))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://127.0.0.1:8080/hook",
        "https://localhost/hook",
        "http://LOCALHOST./hook",
        "http://api.localhost/hook",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[::ffff:7f00:1]/hook",
        "http://[0:0:0:0:0:0:0:1]/",
        "http://10.1.2.3/",
        "http://172.16.5.4/",
        "http://192.168.0.10/",
        "http://100.64.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:8080/",
        "http://[::]/",
        "http://2130706433/",  # decimal 127.0.0.1
        "http://0x7f000001/",  # hex
        "http://0x7f.1/",
        "http://0177.0.0.1/",  # octal
        "http://017700000001/",
        "http://127.1/",
        "http://127.0.1/",
        "http://127.0.0.1./",
        "http://0/",
        "http://3232235777/",  # 192.168.1.1
        "http://0xA9.0xFE.0xA9.0xFE/",  # 169.254.169.254
        "http://１２７.０.０.１/",  # full-width digits
        "http://127。0。0。1/",  # ideographic full stops
        "http://[fd00:ec2::254]/",
        "http://[fe80::1%25eth0]/",
    ],
)
def test_check_url_refuses_private_literals(url: str) -> None:
    with pytest.raises(UrlRefused) as info:
        check_url(url, allow_private=False)
    assert info.value.code == CODE_FORBIDDEN
    check_url(url, allow_private=True)  # the same URL is fine when private networks are allowed


@pytest.mark.parametrize(
    "url",
    [
        "http://93.184.216.34/hook",
        "https://93.184.216.34:8443/hook?x=1",
        "https://[2606:4700:4700::1111]/hook",
        "https://example.com/hook",
        "https://hooks.example.com:444/a/b?token=xyz#frag",
        "HTTPS://EXAMPLE.COM/",
        "http://1.1.1.1/",
        "http://16843009/",  # decimal 1.1.1.1
    ],
)
def test_check_url_allows_public_hosts_without_dns(url: str) -> None:
    check_url(url, allow_private=False)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "ftp://example.com/",
        "file:///etc/passwd",
        "gopher://example.com/",
        "javascript:alert(1)",
        "example.com/hook",
        "http:///hook",
        "http://",
        "https://user:pass@example.com/",
        "https://token@example.com/",
        "http://example.com:0/",
        "http://example.com:65536/",
        "http://example.com:port/",
        "http://[::1/",
        "http://exa mple.com/",
        "http://example.com/\nHost: evil",
        "http://1.2.3.999/",
        "http://1.2.3.4.5/",
        "http://example.08/",
        "http://[not-an-ip]/",
        "https://example.com/" + "a" * 5000,
    ],
)
def test_check_url_rejects_malformed(url: str) -> None:
    with pytest.raises(UrlRefused) as info:
        check_url(url, allow_private=True)
    assert info.value.code == CODE_INVALID
    assert str(info.value)


def test_literal_address_forms() -> None:
    assert literal_address("2130706433") == ipaddress.IPv4Address("127.0.0.1")
    assert literal_address("0x7f.1") == ipaddress.IPv4Address("127.0.0.1")
    assert literal_address("example.com") is None
    assert literal_address("::1") == ipaddress.IPv6Address("::1")


async def test_resolve_and_check_localhost_is_refused() -> None:
    with pytest.raises(UrlRefused) as info:
        await resolve_and_check("localhost", 80, allow_private=False)
    assert info.value.code == CODE_FORBIDDEN
    assert "127.0.0.1" in await resolve_and_check("localhost", 80, allow_private=True)


async def test_resolve_and_check_literals() -> None:
    assert await resolve_and_check("93.184.216.34", 443, allow_private=False) == ["93.184.216.34"]
    with pytest.raises(UrlRefused):
        await resolve_and_check("2130706433", 80, allow_private=False)


async def test_resolve_and_check_unknown_name_is_an_os_error_not_a_refusal() -> None:
    with pytest.raises(OSError):
        await resolve_and_check("no-such-host.invalid", 80, allow_private=False)


class _FakeDNS(AbstractResolver):
    """A DNS server under an attacker's control: answers whatever the test says."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host=a,
                port=port,
                family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                proto=0,
                flags=0,
            )
            for a in self.answers[host]
        ]

    async def close(self) -> None:
        pass


async def test_guarded_resolver_refuses_real_localhost_resolution() -> None:
    resolver = GuardedResolver(allow_private=False)
    try:
        with pytest.raises(UrlRefused, match=r"127\.0\.0\.1"):
            await resolver.resolve("localhost", 80)
    finally:
        await resolver.close()


async def test_guarded_resolver_refuses_if_any_answer_is_private() -> None:
    dns = _FakeDNS({"mixed.test": ["93.184.216.34", "10.0.0.5"], "public.test": ["93.184.216.34"]})
    resolver = GuardedResolver(allow_private=False, inner=dns)
    with pytest.raises(UrlRefused) as info:
        await resolver.resolve("mixed.test", 443)
    assert info.value.code == CODE_FORBIDDEN
    assert [r["host"] for r in await resolver.resolve("public.test", 443)] == ["93.184.216.34"]


async def test_guarded_resolver_passes_everything_when_private_is_allowed() -> None:
    dns = _FakeDNS({"internal.test": ["10.0.0.5", "::1"]})
    resolver = GuardedResolver(allow_private=True, inner=dns)
    assert [r["host"] for r in await resolver.resolve("internal.test", 80)] == ["10.0.0.5", "::1"]


def test_remembered_verdicts_still_refuse_every_time() -> None:
    """check_url memoises its verdict: a refused URL must keep raising, a fresh exception each time."""
    from gateway.delivery.ssrf import UrlRefused, check_url

    seen = []
    for _ in range(3):
        with pytest.raises(UrlRefused) as info:
            check_url("http://127.0.0.1/hook", allow_private=False)
        seen.append(info.value)
    assert len({id(e) for e in seen}) == 3
    check_url("http://127.0.0.1/hook", allow_private=True)  # the other setting is its own verdict
