"""The SSRF corpus: every URL here is refused by web_fetch before a connection is opened.

Each case is fetched through the real handler with a real DNS server and a real HTTP server on
loopback. The HTTP server is also the canary: every loopback target in the corpus points at its
``/secret`` path, so a guard that let one through would show up as a hit there, not only as a
missing refusal. Positive controls at the bottom prove the same setup does fetch what it may.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterator

import pytest

from neuralis_jupyter.tools import web_fetch
from neuralis_jupyter.tools.netguard import Resolver

from .webfixtures import PUBLIC_IP, Bench, DNSServer, WebServer, bench_fixture, call  # noqa: F401

pytestmark = pytest.mark.timeout(60)

P = "{port}"  # the canary's port, filled in per case
LOOPBACK = "is a loopback address"
LOCAL_NAME = "names a local, internal or metadata service"
METADATA = "is a cloud metadata address"
RFC1918 = "private (RFC 1918)"
SCHEME = "only http and https"
CREDENTIALS = "credentials"
#: (URL, the words the refusal must give): each is refused for the right reason, not merely refused.
DIRECT = [
    # loopback, in every spelling a resolver accepts
    (f"http://127.0.0.1:{P}/secret", LOOPBACK),
    (f"http://127.0.0.2:{P}/secret", "127.0.0.2 is a loopback"),
    (f"http://127.1:{P}/secret", LOOPBACK),
    (f"http://2130706433:{P}/secret", "127.0.0.1 is a loopback"),
    (f"http://0x7f000001:{P}/secret", "127.0.0.1 is a loopback"),
    (f"http://017700000001:{P}/secret", "127.0.0.1 is a loopback"),
    (f"http://0177.0.0.1:{P}/secret", "127.0.0.1 is a loopback"),
    (f"http://0x7f.0x0.0x0.0x1:{P}/secret", "127.0.0.1 is a loopback"),
    (f"http://0x7f.1:{P}/secret", "127.0.0.1 is a loopback"),
    (f"http://127.000.000.001:{P}/secret", "127.0.0.1 is a loopback"),
    (f"http://127.0.0.1.:{P}/secret", LOOPBACK),
    (f"http://%31%32%37.0.0.1:{P}/secret", "127.0.0.1 is a loopback"),
    (f"http://１２７.０.０.１:{P}/secret", "127.0.0.1 is a loopback"),
    (f"http://127。0。0。1:{P}/secret", "127.0.0.1 is a loopback"),
    (f"http://[::1]:{P}/secret", LOOPBACK),
    (f"http://[0:0:0:0:0:0:0:1]:{P}/secret", LOOPBACK),
    (f"http://[::ffff:127.0.0.1]:{P}/secret", "IPv4-mapped"),
    (f"http://[::ffff:7f00:1]:{P}/secret", "IPv4-mapped"),
    (f"http://[::127.0.0.1]:{P}/secret", "IPv4-compatible"),
    (f"http://[2002:7f00:1::1]:{P}/secret", "embedding 127.0.0.1"),
    (f"http://[fe80::1%25eth0]:{P}/secret", "zone id"),
    (f"http://localhost:{P}/secret", LOCAL_NAME),
    (f"http://LOCALHOST.:{P}/secret", LOCAL_NAME),
    (f"http://app.localhost:{P}/secret", LOCAL_NAME),
    (f"http://0:{P}/secret", "0.0.0.0 is the unspecified"),
    (f"http://0.0.0.0:{P}/secret", "unspecified"),
    (f"http://[::]:{P}/secret", "unspecified"),
    # private, shared and special ranges
    ("http://10.0.0.1/", RFC1918),
    ("http://10.1/", "10.0.0.1 is a private"),
    ("http://172.16.0.1/", RFC1918),
    ("http://192.168.1.1/", RFC1918),
    ("http://3232235777/", "192.168.1.1 is a private"),
    ("http://100.64.0.1/", "carrier-grade NAT"),
    ("http://192.0.2.1/", "documentation"),
    ("http://198.18.0.1/", "benchmarking"),
    ("http://224.0.0.1/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://255.255.255.255/", "reserved"),
    ("http://[fe80::1]/", "link-local"),
    ("http://[fd12:3456::1]/", "unique-local"),
    ("http://[ff02::1]/", "multicast"),
    ("http://[64:ff9b::a9fe:a9fe]/", "embedding 169.254.169.254"),
    ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "Teredo"),
    # cloud metadata
    ("http://169.254.169.254/latest/meta-data/", METADATA),
    ("http://0xa9fea9fe/latest/meta-data/", "169.254.169.254 is a cloud metadata"),
    ("http://2852039166/latest/meta-data/", "169.254.169.254 is a cloud metadata"),
    ("http://169.254.170.2/v2/credentials", METADATA),
    ("http://[fd00:ec2::254]/latest/meta-data/", METADATA),
    ("http://metadata.google.internal/computeMetadata/v1/", LOCAL_NAME),
    ("http://metadata/computeMetadata/v1/", LOCAL_NAME),
    ("http://100.100.100.200/latest/meta-data/", METADATA),
    ("http://168.63.129.16/machine?comp=goalstate", METADATA),
    ("http://192.0.0.192/", METADATA),
    # names that are internal by shape
    ("http://intranet/", "single-label"),
    ("http://printer.local/", LOCAL_NAME),
    ("http://db.internal/", LOCAL_NAME),
    # schemes, credentials and parser tricks
    ("file:///etc/passwd", SCHEME),
    (f"gopher://127.0.0.1:{P}/_GET", SCHEME),
    ("ftp://example.com/", SCHEME),
    ("dict://127.0.0.1:11211/stats", SCHEME),
    (f"http://evil.test@127.0.0.1:{P}/secret", CREDENTIALS),
    ("http://user:pass@example.com/", CREDENTIALS),
    (f"http://127.0.0.1:{P}@evil.test/secret", CREDENTIALS),
    (f"http://evil.test\\@127.0.0.1:{P}/secret", CREDENTIALS),
    (f"http://127.0.0.1:{P}/secret\n", "whitespace"),
    (f"http://[::1:{P}/secret", "malformed"),
    ("http://1.2.3.4.5/", "not a valid IPv4"),
    ("http://256.0.0.1/", "out-of-range"),
    ("http://example.123/", "not a valid IPv4"),
    (f"http://127.0.0.1:0{P}0/secret", "port"),
    # names whose DNS answers are not public (the loopback DNS server answers them)
    (f"http://loop.test:{P}/secret", "127.0.0.1 (which loop.test resolves to) is a loopback"),
    ("http://private.test/", "10.0.0.7 (which private.test resolves to) is a private"),
    ("http://linklocal.test/", METADATA),
    ("http://cgnat.test/", "carrier-grade NAT"),
    (f"http://v6loop.test:{P}/secret", "::1 (which v6loop.test resolves to) is a loopback"),
    ("http://ula.test/", "unique-local"),
    (f"http://mapped.test:{P}/secret", "IPv4-mapped"),
    ("http://mixed.test/", "10.0.0.1 (which mixed.test resolves to)"),
    (f"http://dual.test:{P}/secret", "::1 (which dual.test resolves to)"),
    ("http://alias.test/", "10.0.0.7 (which alias.test resolves to)"),
    ("http://zero.test/", "unspecified"),
    ("http://sixtofour.test/", "embedding 127.0.0.1"),
    ("http://nat64.test/", "embedding 169.254.169.254"),
    ("http://metadata6.test/", METADATA),
    ("http://wireserver.test/", METADATA),
]
#: Where the allowlisted redirector sends the client (each a 302 unless the id says otherwise).
REDIRECTED = [
    "http://169.254.169.254/latest/meta-data/",
    f"http://2130706433:{P}/secret",
    f"http://0x7f.1:{P}/secret",
    f"http://0177.0.0.1:{P}/secret",
    f"http://[::1]:{P}/secret",
    f"http://[::ffff:127.0.0.1]:{P}/secret",
    f"http://localhost:{P}/secret",
    f"http://loop.test:{P}/secret",
    "http://10.0.0.1/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://[fd00:ec2::254]/",
    "file:///etc/passwd",
    f"gopher://127.0.0.1:{P}/_GET",
    f"//127.0.0.1:{P}/secret",
    f"http://user:pw@redirector.test:{P}/ok",
    "http://private.test/",
]


@pytest.fixture(scope="module")
def dns() -> Iterator[DNSServer]:
    with DNSServer() as server:
        server.add("loop.test", A=["127.0.0.1"])
        server.add("redirector.test", A=["127.0.0.1"])
        server.add("private.test", A=["10.0.0.7"])
        server.add("linklocal.test", A=["169.254.169.254"])
        server.add("cgnat.test", A=["100.64.1.1"])
        server.add("v6loop.test", AAAA=["::1"])
        server.add("ula.test", AAAA=["fd12:3456::1"])
        server.add("mapped.test", AAAA=["::ffff:127.0.0.1"])
        server.add("mixed.test", A=[PUBLIC_IP, "10.0.0.1"])
        server.add("dual.test", A=[PUBLIC_IP], AAAA=["::1"])
        server.add("alias.test", CNAME="private.test")
        server.add("zero.test", A=["0.0.0.0"])
        server.add("sixtofour.test", AAAA=["2002:7f00:1::1"])
        server.add("nat64.test", AAAA=["64:ff9b::a9fe:a9fe"])
        server.add("metadata6.test", AAAA=["fd00:ec2::254"])
        server.add("wireserver.test", A=["168.63.129.16"])
        yield server


@pytest.fixture(scope="module")
def canary() -> Iterator[WebServer]:
    with WebServer() as server:
        server.route("/secret", "the canary was reached", content_type="text/plain")
        server.route("/ok", "<html><body><p>allowed page</p></body></html>", content_type="text/html")
        yield server


@pytest.fixture
def fetch_handler(bench: Bench, dns: DNSServer):
    env = bench.env(WebSettings={"allowed_hosts": ["redirector.test"], "dns_servers": [dns.address]})
    return web_fetch.handlers(env)["web_fetch"]


def _secret_hits(server: WebServer) -> int:
    return sum(1 for hit in server.hits if hit.path.startswith("/secret"))


def _assert_refused(out, canary: WebServer, before: int) -> None:
    assert out.outcome == "refused", out.content
    assert out.is_error
    assert out.content.startswith("Refused: ")
    assert _secret_hits(canary) == before, "the canary was reached"


def _id(url: str) -> str:
    return url.replace(P, "PORT").replace("\n", "\\n")


@pytest.mark.parametrize(("template", "why"), DIRECT, ids=[_id(u) for u, _ in DIRECT])
def test_direct_url_is_refused(template, why, bench, canary, fetch_handler):
    before = _secret_hits(canary)
    out = call(fetch_handler, bench.context(), url=template.replace(P, str(canary.port)))
    _assert_refused(out, canary, before)
    assert why in out.content


@pytest.mark.parametrize("status", [302, 301, 307])
@pytest.mark.parametrize("template", REDIRECTED, ids=[_id(u) for u in REDIRECTED])
def test_redirect_from_an_allowlisted_host_is_revetted(template, status, bench, canary, fetch_handler):
    path = f"/r/{status}/{REDIRECTED.index(template)}"
    canary.redirect(path, template.replace(P, str(canary.port)), status=status)
    before = _secret_hits(canary)
    out = call(fetch_handler, bench.context(), url=f"http://redirector.test:{canary.port}{path}")
    _assert_refused(out, canary, before)
    assert any(hit.path == path for hit in canary.hits), "the allowlisted first hop was fetched"
    assert "redirected to" in out.content


def test_a_refusal_deep_in_a_redirect_chain(bench, canary, fetch_handler):
    canary.redirect("/chain/1", f"http://redirector.test:{canary.port}/chain/2")
    canary.redirect("/chain/2", f"http://2130706433:{canary.port}/secret")
    before = _secret_hits(canary)
    out = call(fetch_handler, bench.context(), url=f"http://redirector.test:{canary.port}/chain/1")
    _assert_refused(out, canary, before)
    assert "/chain/2" in out.content


def test_endless_redirects_stop_at_the_limit(bench, canary, fetch_handler):
    canary.redirect("/loop", "/loop")
    out = call(fetch_handler, bench.context(), url=f"http://redirector.test:{canary.port}/loop")
    assert out.outcome == "refused"
    assert "more than 5 redirects" in out.content


# -- DNS rebinding ------------------------------------------------------------------------------------


@pytest.fixture
def connects(monkeypatch) -> list[tuple[str, int]]:
    """Every TCP connect the process attempts, recorded before the suite's loopback-only guard runs."""
    seen: list[tuple[str, int]] = []
    guarded = socket.socket.connect

    def recording(sock: socket.socket, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            seen.append((str(address[0]), int(address[1])))
        return guarded(sock, address)

    monkeypatch.setattr(socket.socket, "connect", recording)
    return seen


@pytest.mark.parametrize("loopback_allowed", [False, True], ids=["plain", "loopback-allowlisted"])
def test_dns_rebinding_connects_only_to_the_pinned_first_answer(
    loopback_allowed, bench, dns, canary, connects
):
    """The name answers a public address first and 127.0.0.1 afterwards. The fetch must resolve once and
    connect to the public address (which the test suite's guard refuses, so the fetch fails naming it),
    never to the canary on 127.0.0.1, even when 127.0.0.1 itself is allowlisted (so only pinning, not
    address re-validation, keeps the second answer out)."""
    name = f"rebind-{loopback_allowed}.test".lower()
    dns.add(name, A=lambda asked: [PUBLIC_IP] if asked == 0 else ["127.0.0.1"])
    allowed = ["127.0.0.1"] if loopback_allowed else []
    env = bench.env(WebSettings={"allowed_hosts": allowed, "dns_servers": [dns.address]})
    handler = web_fetch.handlers(env)["web_fetch"]
    before = _secret_hits(canary)
    url = f"http://{name}:{canary.port}/secret"

    out = call(handler, bench.context(), url=url)

    assert dns.count(name, "A") == 1, "resolved once"
    assert out.outcome == "error"
    assert f"{PUBLIC_IP} port {canary.port} (pinned for {name})" in out.content
    assert (PUBLIC_IP, canary.port) in connects
    assert ("127.0.0.1", canary.port) not in connects
    assert _secret_hits(canary) == before
    # The trap is real: the name now resolves to the canary's address, and a fresh fetch that is
    # allowed to reach loopback does reach it.
    resolver = Resolver(nameservers=((dns.address.split(":")[0], int(dns.address.split(":")[1])),))
    assert asyncio.run(resolver.resolve(name)) == (ipaddress.ip_address("127.0.0.1"),)
    if loopback_allowed:
        again = call(handler, bench.context(), url=url)
        assert again.outcome == "ok", again.content
        assert _secret_hits(canary) == before + 1


# -- positive controls -------------------------------------------------------------------------------


def test_the_allowlisted_host_is_fetched(bench, canary, fetch_handler):
    canary.redirect("/hop", "/ok")
    out = call(fetch_handler, bench.context(), url=f"http://redirector.test:{canary.port}/hop")
    assert out.outcome == "ok", out.content
    assert "allowed page" in out.content
    assert out.data["redirects"] == [f"http://redirector.test:{canary.port}/hop"]
    assert out.data["address"] == "127.0.0.1"


def test_an_allowlisted_address_is_fetched_in_an_odd_spelling(bench, canary):
    env = bench.env(WebSettings={"allowed_hosts": ["127.0.0.0/8"]})
    handler = web_fetch.handlers(env)["web_fetch"]
    before = _secret_hits(canary)
    out = call(handler, bench.context(), url=f"http://0x7f.1:{canary.port}/secret")
    assert out.outcome == "ok", out.content
    assert out.data["finalUrl"] == f"http://127.0.0.1:{canary.port}/secret"
    assert _secret_hits(canary) == before + 1


def test_metadata_addresses_pass_no_allowlist(bench, canary):
    env = bench.env(WebSettings={"allowed_hosts": ["169.254.0.0/16", "0.0.0.0/0"]})
    out = call(web_fetch.handlers(env)["web_fetch"], bench.context(), url="http://169.254.169.254/")
    assert out.outcome == "refused"
    assert "cloud metadata" in out.content


def test_the_corpus_is_large_enough():
    assert len(DIRECT) + len(REDIRECTED) * 3 >= 60
    assert len(DIRECT) >= 60
