"""The engines behind ``web_search``, each normalised to :class:`SearchResult`.

* ``searxng``: ``GET {url}/search?q=...&format=json`` (the instance must enable the JSON format);
* ``brave``: ``GET {base}/res/v1/web/search`` with ``X-Subscription-Token``;
* ``tavily``: ``POST {base}/search`` with the key in the body (``api_key``) and as a Bearer token;
* ``native``: the conversation's own Anthropic model with Anthropic's server tool
  ``{"type": "web_search_20250305", "name": "web_search", "max_uses": N}``, one streamed call through
  the model's own SDK client; results come from its ``web_search_tool_result`` blocks, snippets from
  the citations of its answer, and the call's :class:`~..providers.base.UsageEvent` (tokens plus
  ``server_tool_uses``) is returned for the caller to charge to the turn.

The configured base URLs are trusted endpoints and are called directly (no address vetting, no
redirects followed); result pages are only ever fetched through ``web_fetch``'s guarded pipeline.
:class:`SearchUnavailable` means "not configured here" (try the next engine quietly);
:class:`SearchFailed` means the engine was asked and failed.
"""

from __future__ import annotations

import email.utils
import html
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

if TYPE_CHECKING:
    import httpx

    from ..providers.base import Model, UsageEvent

__all__ = [
    "Engine",
    "Query",
    "SearchFailed",
    "SearchResult",
    "SearchUnavailable",
    "brave",
    "native",
    "published_day",
    "searxng",
    "tavily",
]

Engine = Literal["tavily", "brave", "searxng", "native"]
_MAX_RESPONSE = 4 * 1024 * 1024


class SearchResult(TypedDict):
    title: str
    url: str
    snippet: str
    #: ``YYYY-MM-DD``; absent when no day could be determined.
    publishedAt: NotRequired[str]
    #: The page as Markdown (mode research with include_content).
    content: NotRequired[str]


class SearchUnavailable(Exception):
    """The engine is not configured here; the message names what would configure it."""


class SearchFailed(Exception):
    """The engine was asked and did not answer usefully. ``usage``: what the attempt still cost (native)."""

    def __init__(self, message: str, *, usage: UsageEvent | None = None) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True, kw_only=True)
class Query:
    text: str
    max_results: int
    research: bool = False


# -- dates ------------------------------------------------------------------------------------------

_ISO = re.compile(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?:$|[T ,])")
_RELATIVE = re.compile(r"(\d+|an?)\s+(second|minute|hour|day|week)s?\s+ago", re.IGNORECASE)
_WRITTEN = ("%B %d, %Y", "%b %d, %Y", "%d %B %Y", "%d %b %Y", "%B %d %Y", "%b %d %Y", "%b. %d, %Y")


def _day(year: int, month: int, day: int) -> str | None:
    try:
        return date(year, month, day).isoformat()
    except ValueError:
        return None


def published_day(value: object, *, now: datetime | None = None) -> str | None:
    """A publication date in any of the engines' formats as ``YYYY-MM-DD``, or None.

    ISO 8601 (the day as written, before any time-zone shift), ``YYYY/MM/DD``, RFC 2822, written
    English dates (``May 1, 2024``, ``1 May 2024``), Unix timestamps (seconds or milliseconds), and
    relative ages down to weeks (``3 days ago``, against ``now``). A bare month, a coarser relative age
    ("2 months ago") or an ambiguous ``01/05/2024`` is no day: None.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = value / 1000 if value > 1e11 else value
        return datetime.fromtimestamp(seconds, UTC).date().isoformat() if seconds > 0 else None
    text = " ".join(str(value).split())
    if match := _ISO.match(text):
        return _day(*(int(g) for g in match.groups()))
    if re.fullmatch(r"\d{8}", text):
        return _day(int(text[:4]), int(text[4:6]), int(text[6:]))
    if re.fullmatch(r"\d{9,13}", text):
        return published_day(int(text), now=now)
    now = now or datetime.now(UTC)
    if text.lower() in ("today", "just now"):
        return now.date().isoformat()
    if text.lower() == "yesterday":
        return (now - timedelta(days=1)).date().isoformat()
    if match := _RELATIVE.search(text):
        count = 1 if match.group(1).lower() in ("a", "an") else int(match.group(1))
        return (now - timedelta(**{match.group(2).lower() + "s": count})).date().isoformat()
    try:
        return email.utils.parsedate_to_datetime(text).date().isoformat()
    except (TypeError, ValueError, IndexError):
        pass
    for pattern in _WRITTEN:
        try:
            parsed = time.strptime(text, pattern)
        except ValueError:
            continue
        return _day(parsed.tm_year, parsed.tm_mon, parsed.tm_mday)
    return None


# -- HTTP engines -----------------------------------------------------------------------------------


def _text(value: object) -> str:
    """Plain text from an engine's field, which may carry HTML highlighting (``<strong>``) and entities."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", str(value or ""))).split())


def _result(title: object, url: object, snippet: object, published: object) -> SearchResult | None:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    result: SearchResult = {"title": _text(title) or url, "url": url, "snippet": _text(snippet)}
    if day := published_day(published):
        result["publishedAt"] = day
    return result


async def _json(client: httpx.AsyncClient, engine: Engine, method: str, url: str, **kwargs: Any) -> Any:
    import httpx

    try:
        async with client.stream(method, url, **kwargs) as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > _MAX_RESPONSE:
                    raise SearchFailed(f"{engine} answered more than {_MAX_RESPONSE} bytes")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise SearchFailed(f"{engine} could not be reached at {url}: {exc or type(exc).__name__}") from None
    if response.status_code != 200:
        detail = _text(body[:200].decode("utf-8", "replace"))
        raise SearchFailed(f"{engine} answered HTTP {response.status_code}: {detail}")
    try:
        return json.loads(body)
    except ValueError:
        raise SearchFailed(f"{engine} answered something that is not JSON") from None


def _items(doc: Any, *path: str) -> list[Mapping[str, Any]]:
    for key in path:
        doc = doc.get(key) if isinstance(doc, Mapping) else None
    return [item for item in doc or () if isinstance(item, Mapping)] if isinstance(doc, list) else []


def _take(results: list[SearchResult | None], query: Query) -> list[SearchResult]:
    return [r for r in results if r is not None][: query.max_results]


async def searxng(client: httpx.AsyncClient, query: Query, *, base_url: str) -> list[SearchResult]:
    params = {"q": query.text, "format": "json"}
    doc = await _json(client, "searxng", "GET", f"{base_url.rstrip('/')}/search", params=params)
    items = _items(doc, "results")
    return _take(
        [_result(i.get("title"), i.get("url"), i.get("content"), i.get("publishedDate")) for i in items],
        query,
    )


async def brave(client: httpx.AsyncClient, query: Query, *, base_url: str, key: str) -> list[SearchResult]:
    headers = {"X-Subscription-Token": key, "Accept": "application/json"}
    params = {"q": query.text, "count": str(min(query.max_results, 20))}
    doc = await _json(
        client, "brave", "GET", f"{base_url.rstrip('/')}/res/v1/web/search", params=params, headers=headers
    )
    items = _items(doc, "web", "results")
    return _take(
        [
            _result(i.get("title"), i.get("url"), i.get("description"), i.get("page_age") or i.get("age"))
            for i in items
        ],
        query,
    )


async def tavily(client: httpx.AsyncClient, query: Query, *, base_url: str, key: str) -> list[SearchResult]:
    body = {
        "api_key": key,
        "query": query.text,
        "max_results": query.max_results,
        "search_depth": "advanced" if query.research else "basic",
    }
    headers = {"Authorization": f"Bearer {key}"}
    doc = await _json(client, "tavily", "POST", f"{base_url.rstrip('/')}/search", json=body, headers=headers)
    items = _items(doc, "results")
    return _take(
        [_result(i.get("title"), i.get("url"), i.get("content"), i.get("published_date")) for i in items],
        query,
    )


# -- native -----------------------------------------------------------------------------------------

_NATIVE_PROMPT = (
    "Search the web for: {query}\n\n"
    "Use the web_search tool, then list the most relevant sources, quoting one relevant sentence from each."
)


async def native(
    model: Model, query: Query, *, max_uses: int, max_tokens: int
) -> tuple[list[SearchResult], UsageEvent]:
    """Search with the model's own server-side search tool; the results and the call's usage."""
    from ..providers.anthropic import DEFAULT_BASE_URL, AnthropicModel

    if not isinstance(model, AnthropicModel):
        running = f"{model.provider}:{model.model_id}"
        raise SearchUnavailable(
            f"native search needs an Anthropic model; this conversation runs on {running}"
        )
    import anthropic
    import httpx2

    from ..providers.anthropic import _Parser
    from ..providers.errors import ProviderError
    from ..providers.guard import check_url

    parser = _Parser()  # the provider's own usage accounting: tokens and server_tool_use, as for a step
    found: dict[str, SearchResult] = {}
    cited: dict[str, str] = {}
    errors: list[str] = []
    tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": max_uses}
    try:
        check_url(model.base_url or DEFAULT_BASE_URL)
        client = await model.client()
        events = await client.messages.create(
            model=model.api_model_id,
            max_tokens=max_tokens,
            messages=[{"role": "user", "content": _NATIVE_PROMPT.format(query=query.text)}],
            tools=[tool],  # type: ignore[list-item]
            stream=True,
        )
        async with events:
            async for event in events:
                parser.feed(event)
                if (
                    event.type == "content_block_start"
                    and event.content_block.type == "web_search_tool_result"
                ):
                    content = event.content_block.content
                    if not isinstance(content, list):
                        errors.append(str(getattr(content, "error_code", content)))
                        continue
                    for item in content:
                        if (r := _result(item.title, item.url, "", item.page_age)) is not None:
                            found.setdefault(r["url"], r)
                elif event.type == "content_block_delta" and event.delta.type == "citations_delta":
                    citation = event.delta.citation
                    if citation.type == "web_search_result_location":
                        cited.setdefault(citation.url, citation.cited_text)
        usage, _ = parser.finish()
    except (anthropic.APIError, httpx2.TransportError, ProviderError) as exc:
        raise SearchFailed(f"native search through {model.provider}:{model.model_id} failed: {exc}") from None
    if errors and not found:
        raise SearchFailed(f"native search failed: {', '.join(errors)}", usage=usage)
    results = [{**r, "snippet": _text(cited.get(url, ""))} for url, r in found.items()]
    return _take(results, query), usage  # type: ignore[arg-type]
