"""The SSRF guard's parts on their own: host normalisation, the allowlist, TLS pinning, the settings."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading

import httpcore
import pytest
from traitlets import TraitError
from traitlets.config import Config

from neuralis_jupyter.tools import web_fetch
from neuralis_jupyter.tools.netguard import AddressPolicy, Destination, Refused, normalise_host
from neuralis_jupyter.tools.pinned_http import PinnedBackend
from neuralis_jupyter.tools.web_fetch import WebSettings

from .webfixtures import DNSServer, bench_fixture, call, dns_fixture  # noqa: F401


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0x0.0x0.0x1", "127.0.0.1"),
        ("0x7F.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("10.0.258", "10.0.1.2"),
        ("0", "0.0.0.0"),
        ("127.0.0.1.", "127.0.0.1"),
        ("%31%32%37.0.0.1", "127.0.0.1"),
        ("１２７.０.０.１", "127.0.0.1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("Example.COM.", "example.com"),
        ("ｅｘａｍｐｌｅ.com", "example.com"),
        ("bücher.example", "xn--bcher-kva.example"),
    ],
)
def test_hosts_are_read_the_way_a_resolver_reads_them(raw, expected):
    host = normalise_host(raw)
    assert str(host) == expected


@pytest.mark.parametrize(
    "raw", ["1.2.3.4.5", "08.1.2.3", "1.16777216", "a..b", "-bad.example", "x y.example"]
)
def test_malformed_hosts_are_refused(raw):
    with pytest.raises(Refused):
        normalise_host(raw)


def test_the_allowlist_takes_names_addresses_and_cidrs():
    policy = AddressPolicy.from_entries(["Fixture.Test.", "127.0.0.1", "10.0.0.0/8", "[::1]"])
    assert policy.names == {"fixture.test"}
    loopback = ipaddress.ip_address("127.0.0.1")
    policy.check_address("fixture.test", ipaddress.ip_address("192.168.0.1"))  # the name is allowed
    policy.check_address(loopback, loopback)
    policy.check_address("other.test", ipaddress.ip_address("10.2.3.4"))
    with pytest.raises(Refused, match=r"127\.0\.0\.2"):
        policy.check_address("other.test", ipaddress.ip_address("127.0.0.2"))
    with pytest.raises(ValueError, match="not a host name"):
        AddressPolicy.from_entries(["http://x/"])


def test_bad_settings_are_refused_with_the_value():
    with pytest.raises(TraitError, match="allowed_hosts"):
        WebSettings(config=Config({"WebSettings": {"allowed_hosts": ["not a host"]}}))
    with pytest.raises(TraitError, match="dns_servers"):
        WebSettings(config=Config({"WebSettings": {"dns_servers": ["dns.example"]}}))
    with pytest.raises(TraitError, match="max_bytes"):
        WebSettings(config=Config({"WebSettings": {"max_bytes": 0}}))


def test_the_pinned_backend_connects_nowhere_but_its_destination():
    dest = Destination(
        scheme="http", host="pinned.test", port=80, target="/", address=ipaddress.ip_address("127.0.0.1")
    )
    backend = PinnedBackend(destination=dest)
    with pytest.raises(httpcore.ConnectError, match="not the pinned destination"):
        asyncio.run(backend.connect_tcp("other.test", 80))
    with pytest.raises(httpcore.ConnectError, match="not the pinned destination"):
        asyncio.run(backend.connect_tcp("pinned.test", 8080))


def _sni(client_hello: bytes) -> str | None:
    """The server name of a TLS ClientHello record (RFC 8446 4.1.2, RFC 6066 3)."""
    data = client_hello[5:]  # record header
    assert data[0] == 1, "a ClientHello"
    pos = 4 + 2 + 32  # handshake header, legacy version, random
    pos += 1 + data[pos]  # session id
    pos += 2 + int.from_bytes(data[pos : pos + 2], "big")  # cipher suites
    pos += 1 + data[pos]  # compression methods
    end = pos + 2 + int.from_bytes(data[pos : pos + 2], "big")
    pos += 2
    while pos < end:
        kind, size = (
            int.from_bytes(data[pos : pos + 2], "big"),
            int.from_bytes(data[pos + 2 : pos + 4], "big"),
        )
        if kind == 0:  # server_name: list length, name type, name length, name
            length = int.from_bytes(data[pos + 7 : pos + 9], "big")
            return data[pos + 9 : pos + 9 + length].decode()
        pos += 4 + size
    return None


def test_https_connects_to_the_pinned_address_and_names_the_host(bench, dns):
    """There is no TLS fixture: a plain TCP listener on 127.0.0.1 records the ClientHello. It must arrive
    at the pinned address (the listener) and carry the host name as SNI, so that the certificate is
    checked against the name while the socket goes to the address resolved once."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received: list[bytes] = []

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            received.append(conn.recv(16384))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    dns.add("pinned.test", A=["127.0.0.1"])
    env = bench.env(WebSettings={"allowed_hosts": ["pinned.test"], "dns_servers": [dns.address]})
    try:
        out = call(web_fetch.handlers(env)["web_fetch"], bench.context(), url=f"https://pinned.test:{port}/")
    finally:
        thread.join(timeout=5)
        listener.close()
    assert out.outcome == "error"  # the listener speaks no TLS
    assert received, "the connection reached the pinned address"
    assert _sni(received[0]) == "pinned.test"
    assert dns.count("pinned.test") == 1
