"""web_search through loopback engines that answer like the real APIs (SearXNG, Brave, Tavily), their
many date formats, the fallback order, research contents, and what the error says when nothing is
configured. Native search is in ``test_web_search_native``."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest

from neuralis_jupyter.tools import web_search
from neuralis_jupyter.tools.web_search_providers import published_day

from .webfixtures import Bench, Route, WebServer, bench_fixture, call, web_fixture  # noqa: F401

TODAY = datetime.now(UTC)


@pytest.fixture(autouse=True)
def no_search_keys(monkeypatch):
    for name in ("BRAVE_API_KEY", "TAVILY_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def searcher(bench: Bench, *, search: dict | None = None, web: dict | None = None):
    env = bench.env(SearchSettings=search or {}, WebSettings=web or {})
    return web_search.handlers(env)["web_search"]


def query_of(path: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(path).query)


SEARXNG = {
    "query": "pinning",
    "results": [
        {
            "url": "https://a.example/1",
            "title": "One",
            "content": "first",
            "publishedDate": "2024-05-01T12:00:00",
        },
        {"url": "https://a.example/2", "title": "Two", "content": "second", "publishedDate": None},
        {
            "url": "https://a.example/3",
            "title": "Three",
            "content": "third",
            "publishedDate": "Wed, 08 May 2024 10:00:00 GMT",
        },
        {"url": "ftp://a.example/4", "title": "Not the web", "content": "dropped"},
    ],
}


def test_searxng_results_are_normalised(bench, web):
    web.json("/search", SEARXNG)
    out = call(
        searcher(bench, search={"searxng_url": web.url}), bench.context(), query="pinning", provider="searxng"
    )
    assert out.outcome == "ok", out.content
    assert out.data["provider"] == "searxng"
    assert out.data["results"] == [
        {"title": "One", "url": "https://a.example/1", "snippet": "first", "publishedAt": "2024-05-01"},
        {"title": "Two", "url": "https://a.example/2", "snippet": "second"},
        {"title": "Three", "url": "https://a.example/3", "snippet": "third", "publishedAt": "2024-05-08"},
    ]
    assert query_of(web.hits[0].path) == {"q": ["pinning"], "format": ["json"]}
    assert "1. One\n   https://a.example/1\n   Published: 2024-05-01\n   first" in out.content


def test_brave_sends_its_key_and_its_dates_are_read(bench, web, monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", "brv-test")
    three_days_ago = (TODAY - timedelta(days=3)).date().isoformat()
    results = [
        {
            "title": "<strong>Pinned</strong> DNS",
            "url": "https://b.example/1",
            "description": "a &amp; <strong>b</strong>",
            "page_age": "2024-05-01T12:00:00",
        },
        {"title": "Written", "url": "https://b.example/2", "description": "d", "age": "May 1, 2024"},
        {"title": "Relative", "url": "https://b.example/3", "description": "d", "age": "3 days ago"},
        {"title": "Vague", "url": "https://b.example/4", "description": "d", "age": "sometime last spring"},
    ]
    web.json("/res/v1/web/search", {"type": "search", "web": {"type": "search", "results": results}})
    out = call(
        searcher(bench, search={"brave_base_url": web.url}),
        bench.context(),
        query="dns",
        provider="brave",
        max_results=4,
    )
    got = out.data["results"]
    assert [r.get("publishedAt") for r in got] == ["2024-05-01", "2024-05-01", three_days_ago, None]
    assert got[0]["title"] == "Pinned DNS"
    assert got[0]["snippet"] == "a & b"
    assert web.hits[0].headers["x-subscription-token"] == "brv-test"
    assert query_of(web.hits[0].path) == {"q": ["dns"], "count": ["4"]}


def test_tavily_reads_its_key_from_the_project_credentials(bench, web):
    path = bench.store.data_root.project_dir("default") / "credentials.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"TAVILY_API_KEY": "tvly-test"}))
    os.chmod(path, 0o600)
    results = [
        {
            "title": "T1",
            "url": "https://t.example/1",
            "content": "c1",
            "score": 0.9,
            "published_date": "2024-05-01",
        },
        {
            "title": "T2",
            "url": "https://t.example/2",
            "content": "c2",
            "score": 0.8,
            "published_date": 1714557600,
        },
        {
            "title": "T3",
            "url": "https://t.example/3",
            "content": "c3",
            "score": 0.7,
            "published_date": "01/05/2024",
        },
    ]
    web.json("/search", {"query": "q", "results": results, "response_time": 0.5})
    out = call(
        searcher(bench, search={"tavily_base_url": web.url}),
        bench.context(),
        query="q",
        provider="tavily",
        mode="research",
    )
    assert [r.get("publishedAt") for r in out.data["results"]] == ["2024-05-01", "2024-05-01", None]
    hit = web.hits[0]
    assert hit.method == "POST"
    assert json.loads(hit.body) == {
        "api_key": "tvly-test",
        "query": "q",
        "max_results": 8,
        "search_depth": "advanced",
    }
    assert hit.headers["authorization"] == "Bearer tvly-test"


def test_a_credentials_file_others_can_read_is_not_used(bench, web):
    path = bench.store.data_root.project_dir("default") / "credentials.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"TAVILY_API_KEY": "tvly-test"}))
    os.chmod(path, 0o644)
    out = call(
        searcher(bench, search={"tavily_base_url": web.url}), bench.context(), query="q", provider="tavily"
    )
    assert out.is_error
    assert "tavily: not configured" in out.content
    assert "readable" in out.content or "permission" in out.content.lower()
    assert not web.hits


def test_max_results_is_honoured(bench, web):
    many = [{"url": f"https://m.example/{i}", "title": f"R{i}", "content": "c"} for i in range(10)]
    web.json("/search", {"results": many})
    out = call(searcher(bench, search={"searxng_url": web.url}), bench.context(), query="q", max_results=3)
    assert [r["url"] for r in out.data["results"]] == [f"https://m.example/{i}" for i in range(3)]


def test_auto_falls_back_in_order(bench, monkeypatch):
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    monkeypatch.setenv("BRAVE_API_KEY", "brv-test")
    with WebServer() as tavily, WebServer() as brave, WebServer() as searxng:
        tavily.routes["/search"] = Route(status=500, body=b'{"detail": "upstream down"}')
        brave.json(
            "/res/v1/web/search",
            {"web": {"results": [{"title": "B", "url": "https://b.example/", "description": "ok"}]}},
        )
        searxng.json("/search", SEARXNG)
        settings = {"tavily_base_url": tavily.url, "brave_base_url": brave.url, "searxng_url": searxng.url}
        out = call(searcher(bench, search=settings), bench.context(), query="q")
    assert out.outcome == "ok"
    assert out.data["provider"] == "brave"
    assert out.data["attempts"] == ['tavily: tavily answered HTTP 500: {"detail": "upstream down"}']
    assert "Fell back past: tavily" in out.content
    assert len(tavily.hits) == 1
    assert len(brave.hits) == 1
    assert not searxng.hits


def test_a_named_engine_falls_back_to_the_keyless_ones(bench, web):
    web.json("/search", SEARXNG)
    out = call(searcher(bench, search={"searxng_url": web.url}), bench.context(), query="q", provider="brave")
    assert out.data["provider"] == "searxng"
    assert out.data["attempts"] == ["brave: not configured (no BRAVE_API_KEY)"]


def test_nothing_configured_says_what_to_configure(bench):
    out = call(searcher(bench), bench.context(), query="q")
    assert out.is_error
    for needed in ("TAVILY_API_KEY", "BRAVE_API_KEY", "c.SearchSettings.searxng_url", "Anthropic model"):
        assert needed in out.content
    assert out.data["attempts"] == [
        "tavily: not configured (no TAVILY_API_KEY)",
        "brave: not configured (no BRAVE_API_KEY)",
        "searxng: not configured (no c.SearchSettings.searxng_url)",
        "native: not configured (native search needs an Anthropic model; "
        "this conversation runs on scripted:demo)",
    ]


def test_research_mode_adds_each_page_through_the_guarded_fetch(bench, web):
    web.route(
        "/page/1",
        "<html><body><main><h1>First page</h1><p>Body one.</p></main></body></html>",
        content_type="text/html",
    )
    web.route("/page/2", "plain two", content_type="text/plain")
    results = [
        {"url": f"{web.url}/page/1", "title": "P1", "content": "s1"},
        {"url": "http://10.0.0.1/admin", "title": "Internal", "content": "s2"},
        {"url": f"{web.url}/page/2", "title": "P2", "content": "s3"},
        {"url": f"{web.url}/page/3", "title": "P3", "content": "not fetched: beyond content_results"},
    ]
    web.json("/search", {"results": results})
    handler = searcher(
        bench, search={"searxng_url": web.url, "content_results": 3}, web={"allowed_hosts": ["127.0.0.1"]}
    )
    out = call(handler, bench.context(), query="q", mode="research", include_content=True)
    got = out.data["results"]
    assert got[0]["content"] == "# First page\n\nBody one."
    assert got[1]["content"].startswith("(content unavailable: 10.0.0.1 is a private (RFC 1918) address")
    assert got[2]["content"] == "plain two"
    assert "content" not in got[3]
    assert not any(h.path == "/page/3" for h in web.hits)
    assert "   Content:\n   # First page" in out.content


@pytest.mark.parametrize(
    ("value", "day"),
    [
        ("2024-05-01", "2024-05-01"),
        ("2024-05-01T23:30:00-05:00", "2024-05-01"),
        ("2024-05-01T12:00:00.123Z", "2024-05-01"),
        ("2024/5/1", "2024-05-01"),
        ("20240501", "2024-05-01"),
        ("Wed, 01 May 2024 10:00:00 GMT", "2024-05-01"),
        ("May 1, 2024", "2024-05-01"),
        ("1 May 2024", "2024-05-01"),
        ("Sep 9, 2023", "2023-09-09"),
        (1714557600, "2024-05-01"),
        (1714557600000, "2024-05-01"),
        ("1714557600", "2024-05-01"),
        ("yesterday", (TODAY - timedelta(days=1)).date().isoformat()),
        ("2 weeks ago", (TODAY - timedelta(weeks=2)).date().isoformat()),
        ("an hour ago", (TODAY - timedelta(hours=1)).date().isoformat()),
        ("2 months ago", None),
        ("2024-05", None),
        ("2024-02-30", None),
        ("01/05/2024", None),
        ("", None),
        (None, None),
        (True, None),
        ("soon", None),
    ],
)
def test_published_days_in_the_engines_formats(value, day):
    assert published_day(value, now=TODAY) == day
