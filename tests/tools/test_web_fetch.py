"""web_fetch against loopback fixtures: conversion of each kind, the caps and max_chars (save_to:
test_web_fetch_save.py)."""

from __future__ import annotations

import gzip
import json
import threading

import pytest

from neuralis_jupyter.tools import web_fetch

from .webfixtures import Hit, Route, WebServer, bench_fixture, call, gzip_bomb, tiny_pdf, web_fixture  # noqa: F401

ARTICLE = """<!doctype html>
<html><head><title>Pinned  Article</title><style>body { color: red }</style></head>
<body>
  <nav><a href="/home">Home</a> | <a href="/about">About</a></nav>
  <div role="banner">Subscribe now!</div>
  <main>
    <h1>Resolving once</h1>
    <p>Read <a href="/rfc">the RFC</a> and <a href="javascript:alert(1)">this</a>.</p>
    <h2>Steps</h2>
    <ul><li>resolve</li><li>pin<ul><li>connect</li></ul></li></ul>
    <pre><code>fetch(url)</code></pre>
    <table><tr><th>kind</th><th>refused</th></tr><tr><td>loopback</td><td>yes</td></tr></table>
  </main>
  <aside>Related stories</aside>
  <footer>© 2025</footer>
  <script>track()</script>
</body></html>"""


@pytest.fixture
def fetcher(bench):
    def make(**settings):
        env = bench.env(WebSettings={"allowed_hosts": ["127.0.0.1"], **settings})
        return web_fetch.handlers(env)["web_fetch"]

    return make


def test_html_becomes_markdown_without_the_page_chrome(bench, web, fetcher):
    web.route("/article", ARTICLE, content_type="text/html; charset=utf-8")
    out = call(fetcher(), bench.context(), url=f"{web.url}/article")
    assert out.outcome == "ok", out.content
    header, _, body = out.content.partition("\n\n")
    assert (
        header == f"{web.url}/article · HTTP 200 · text/html; charset=utf-8 · {len(ARTICLE.encode())} bytes"
    )
    assert body.startswith("# Resolving once")
    assert f"[the RFC]({web.url}/rfc)" in body
    assert "## Steps" in body
    assert "- resolve" in body
    assert "- connect" in body.replace("  ", "")
    assert "```\nfetch(url)\n```" in body
    assert "| loopback | yes |" in body
    for chrome in ("Home", "Subscribe", "Related stories", "© 2025", "track()", "color: red", "javascript"):
        assert chrome not in body
    assert out.data["title"] == "Pinned Article"
    assert out.data["status"] == 200
    assert out.data["address"] == "127.0.0.1"


def test_html_as_text_and_raw(bench, web, fetcher):
    web.route("/article", ARTICLE, content_type="text/html")
    text = call(fetcher(), bench.context(), url=f"{web.url}/article", format="text").content
    assert "Resolving once" in text
    assert "#" not in text
    assert "track()" not in text
    raw = call(fetcher(), bench.context(), url=f"{web.url}/article", format="raw").content
    assert "<script>track()</script>" in raw


def test_json_is_pretty_printed_and_format_json_needs_json(bench, web, fetcher):
    web.json("/data", {"name": "neuralis", "tools": ["web_fetch", "web_search"]})
    web.route("/page", ARTICLE, content_type="text/html")
    md = call(fetcher(), bench.context(), url=f"{web.url}/data").content
    assert '```json\n{\n  "name": "neuralis",' in md
    as_json = call(fetcher(), bench.context(), url=f"{web.url}/data", format="json")
    assert json.loads(as_json.content.partition("\n\n")[2]) == {
        "name": "neuralis",
        "tools": ["web_fetch", "web_search"],
    }
    refused = call(fetcher(), bench.context(), url=f"{web.url}/page", format="json")
    assert refused.is_error
    assert "format json needs a JSON response" in refused.content


def test_xml_is_fenced_or_reduced_to_its_text(bench, web, fetcher):
    feed = '<?xml version="1.0"?><rss><channel><title>Feed</title><item><title>Post</title></item></channel>'
    feed += "</rss>"
    web.route("/feed.xml", feed, content_type="application/rss+xml")
    md = call(fetcher(), bench.context(), url=f"{web.url}/feed.xml").content
    assert "```xml\n<?xml" in md
    text = call(fetcher(), bench.context(), url=f"{web.url}/feed.xml", format="text").content
    assert text.endswith("Feed\nPost")


def test_pdf_text_is_extracted(bench, web, fetcher):
    web.route("/paper.pdf", tiny_pdf("Pinned resolution", "Second line"), content_type="application/pdf")
    out = call(fetcher(), bench.context(), url=f"{web.url}/paper.pdf")
    assert out.outcome == "ok", out.content
    assert "## Page 1\n\nPinned resolution\nSecond line" in out.content
    assert out.data["title"] == "Tiny"
    raw = call(fetcher(), bench.context(), url=f"{web.url}/paper.pdf", format="raw").content
    assert "a PDF of" in raw
    assert "%PDF" not in raw


def test_a_pdf_without_a_content_type_is_sniffed(bench, web, fetcher):
    web.route("/download", tiny_pdf("Sniffed"), content_type="application/octet-stream")
    assert "Sniffed" in call(fetcher(), bench.context(), url=f"{web.url}/download").content


def test_max_chars_cuts_with_a_marker(bench, web, fetcher):
    web.route("/long.txt", "x" * 5000, content_type="text/plain")
    out = call(fetcher(), bench.context(), url=f"{web.url}/long.txt", max_chars=100)
    body = out.content.partition("\n\n")[2]
    assert body.startswith("x" * 100 + "\n\n[… truncated: 100 of 5000 characters shown")
    assert "x" * 101 not in body


def test_gzip_bodies_are_decoded(bench, web, fetcher):
    web.route("/z", gzip.compress(b"compressed hello"), content_type="text/plain", content_encoding="gzip")
    out = call(fetcher(), bench.context(), url=f"{web.url}/z")
    assert out.content.endswith("compressed hello")
    assert "16 bytes" in out.content


def test_the_byte_cap_cuts_text_and_refuses_json(bench, web, fetcher):
    web.route("/big.txt", "y" * 300_000, content_type="text/plain")
    web.json("/big.json", ["z" * 300_000])
    handler = fetcher(max_bytes=100_000)
    text = call(handler, bench.context(), url=f"{web.url}/big.txt", max_chars=10**6)
    assert text.outcome == "ok"
    assert "100000 bytes (cut at the byte cap)" in text.content
    assert text.content.partition("\n\n")[2] == "y" * 100_000
    data = call(handler, bench.context(), url=f"{web.url}/big.json")
    assert data.is_error
    assert "larger than the byte cap" in data.content


def test_a_decompression_bomb_is_refused(bench, web, fetcher):
    bomb = gzip_bomb(20 * 1024 * 1024)
    web.route("/bomb", bomb, content_type="text/html", content_encoding="gzip")
    out = call(fetcher(max_bytes=1024 * 1024), bench.context(), url=f"{web.url}/bomb")
    assert out.outcome == "refused"
    assert "decompression bomb" in out.content
    assert len(bomb) < 100_000


def test_an_http_error_is_reported_with_its_page(bench, web, fetcher):
    web.route("/gone", "<html><body><p>No such page</p></body></html>", status=404, content_type="text/html")
    out = call(fetcher(), bench.context(), url=f"{web.url}/gone")
    assert out.is_error
    assert out.outcome == "error"
    assert "HTTP 404" in out.content
    assert "No such page" in out.content


def test_a_closed_port_and_a_slow_server_fail_cleanly(bench, web, fetcher):
    release = threading.Event()

    def slow(hit: Hit) -> Route:
        release.wait(10)
        return Route(body=b"late")

    web.routes["/slow"] = slow
    closed = WebServer()  # bound, never started, then closed: nothing listens on its port
    port = closed.port
    closed._server.server_close()
    try:
        refused = call(fetcher(), bench.context(), url=f"http://127.0.0.1:{port}/")
        assert refused.outcome == "error"
        assert "connecting to 127.0.0.1" in refused.content
        late = call(fetcher(timeout=0.3), bench.context(), url=f"{web.url}/slow")
        assert late.outcome == "error"
        assert "0.3 s" in late.content
    finally:
        release.set()
