"""``web_search``: search the public web through the first engine that answers.

Engines (:mod:`.web_search_providers`): ``tavily`` (``TAVILY_API_KEY``), ``brave`` (``BRAVE_API_KEY``),
``searxng`` (``c.SearchSettings.searxng_url``) and ``native`` (the conversation's own Anthropic model
with Anthropic's server-side search tool). Keys come from the environment, else the project's
``credentials.json`` (owner-only, like the model keys).

``provider: auto`` (the default) tries ``c.SearchSettings.auto_order`` (tavily, brave, searxng,
native): engines that are not configured are skipped, an engine that fails hands over to the next.
A named provider is tried first and then falls back to the keyless engines (searxng, native), as the
tool's contract says. When nothing answers, the error names every engine tried and what would
configure one.

Native search runs on the turn's own model, so its tokens and per-search fee belong to the turn: the
call's :class:`~..providers.base.UsageEvent` goes to ``ctx.record_usage(provider, model, usage)``,
which the runtime charges to the same usage partition (and row) as the turn's steps.

In ``mode: research`` with ``include_content``, the top ``content_results`` pages are fetched through
``web_fetch``'s guarded pipeline (same allowlist, pinning and caps) and added as Markdown ``content``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from traitlets import Enum, Float, Integer, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from ..providers.credentials import InsecureCredentials, lookup_secret
from ..providers.errors import ProviderError
from ..runtime import ToolContext, ToolOutput
from . import web_search_providers as engines
from .convert import ConversionError, render
from .environment import ToolEnvironment
from .netguard import Refused
from .pinned_http import FetchFailed, FetchOptions, fetch
from .web_fetch import WebSettings
from .web_search_providers import Engine, Query, SearchFailed, SearchResult, SearchUnavailable

if TYPE_CHECKING:
    import httpx

    from ..store.paths import DataRoot

__all__ = ["SearchSettings", "handlers"]

log = logging.getLogger(__name__)

ENGINES: tuple[Engine, ...] = ("tavily", "brave", "searxng", "native")
KEYLESS: tuple[Engine, ...] = ("searxng", "native")
CONFIGURE = (
    "set TAVILY_API_KEY or BRAVE_API_KEY (environment or the project's credentials.json), "
    "set c.SearchSettings.searxng_url, or run the conversation on an Anthropic model for native search"
)


class SearchSettings(Configurable):
    """``c.SearchSettings.*``: the engines behind web_search."""

    searxng_url = Unicode(
        "", help="Base URL of a SearXNG instance with the JSON format on. Empty: none."
    ).tag(config=True)
    brave_base_url = Unicode("https://api.search.brave.com", help="Base URL of the Brave Search API.").tag(
        config=True
    )
    tavily_base_url = Unicode("https://api.tavily.com", help="Base URL of the Tavily API.").tag(config=True)
    auto_order = List(
        Enum(ENGINES), default_value=list(ENGINES), help="The engines provider auto tries, in order."
    ).tag(config=True)
    native_max_uses = Integer(
        5, help="Searches a native research call may run (a quick one runs one); each is billed."
    ).tag(config=True)
    native_max_tokens = Integer(2048, help="Output token limit of the native search call.").tag(config=True)
    timeout = Float(
        20.0,
        help="Seconds one engine has to answer before the next is tried (native search: three times that).",
    ).tag(config=True)
    content_results = Integer(3, help="Top results whose pages research mode fetches for content.").tag(
        config=True
    )
    content_max_chars = Integer(8000, help="Characters of each fetched page kept as content.").tag(
        config=True
    )

    @validate("native_max_uses", "native_max_tokens", "timeout", "content_max_chars")
    def _positive(self, proposal: dict[str, Any]) -> Any:
        if proposal["value"] <= 0:
            raise TraitError(f"{proposal['trait'].name} must be positive, got {proposal['value']!r}")
        return proposal["value"]


def _secret(name: str, data_root: DataRoot, project_id: str) -> str | None:
    """``name`` from the environment, else the project's credential file (refused when not owner-only)."""
    return lookup_secret(name, data_root=data_root, project_id=project_id)


class _Search:
    """One web_search call: runs engines in order and remembers why each one did not answer."""

    def __init__(self, settings: SearchSettings, data_root: DataRoot, ctx: ToolContext) -> None:
        self.settings = settings
        self.data_root = data_root
        self.ctx = ctx
        self.notes: list[str] = []

    async def _key(self, name: str) -> str:
        try:
            key = await asyncio.to_thread(_secret, name, self.data_root, self.ctx.session.project_id)
        except (InsecureCredentials, ProviderError) as exc:
            raise SearchUnavailable(str(exc)) from None
        if key is None:
            raise SearchUnavailable(f"no {name}")
        return key

    async def _run(self, engine: Engine, client: httpx.AsyncClient, query: Query) -> list[SearchResult]:
        s = self.settings
        if engine == "tavily":
            return await engines.tavily(
                client, query, base_url=s.tavily_base_url, key=await self._key("TAVILY_API_KEY")
            )
        if engine == "brave":
            return await engines.brave(
                client, query, base_url=s.brave_base_url, key=await self._key("BRAVE_API_KEY")
            )
        if engine == "searxng":
            if not s.searxng_url:
                raise SearchUnavailable("no c.SearchSettings.searxng_url")
            return await engines.searxng(client, query, base_url=s.searxng_url)
        model = self.ctx.request.model
        uses = s.native_max_uses if query.research else 1
        try:
            results, usage = await engines.native(model, query, max_uses=uses, max_tokens=s.native_max_tokens)
        except SearchFailed as exc:
            if exc.usage is not None:
                self._charge(model.provider, model.model_id, exc.usage)
            raise
        self._charge(model.provider, model.model_id, usage)
        return results

    def _charge(self, provider: str, model: str, usage: Any) -> None:
        if self.ctx.record_usage is not None:
            self.ctx.record_usage(provider, model, usage)
        else:
            log.warning("a native search's usage could not be charged: this context has no record_usage")

    async def first_answer(
        self, chain: list[Engine], query: Query
    ) -> tuple[Engine, list[SearchResult]] | None:
        import httpx

        timeout = httpx.Timeout(self.settings.timeout)
        async with httpx.AsyncClient(timeout=timeout, trust_env=False, follow_redirects=False) as client:
            for engine in chain:
                try:
                    async with asyncio.timeout(self.settings.timeout * (3 if engine == "native" else 1)):
                        return engine, await self._run(engine, client, query)
                except SearchUnavailable as exc:
                    self.notes.append(f"{engine}: not configured ({exc})")
                except (SearchFailed, TimeoutError) as exc:
                    log.info("web_search: %s failed: %s", engine, exc)
                    self.notes.append(f"{engine}: {exc or 'timed out'}")
        return None


def _chain(provider: str, auto_order: list[Engine]) -> list[Engine]:
    if provider == "auto":
        return list(dict.fromkeys(auto_order))
    return list(dict.fromkeys([provider, *KEYLESS]))  # type: ignore[list-item]


async def _add_content(
    results: list[SearchResult], count: int, options: FetchOptions, max_chars: int
) -> None:
    async def one(result: SearchResult) -> None:
        try:
            fetched = await fetch(result["url"], options)
            page = await asyncio.to_thread(
                render,
                fetched.body,
                content_type=fetched.content_type,
                fmt="markdown",
                base_url=fetched.url,
                truncated=fetched.truncated,
            )
        except (Refused, FetchFailed, ConversionError) as exc:
            result["content"] = f"(content unavailable: {exc})"
            return
        text = page.text
        result["content"] = text if len(text) <= max_chars else f"{text[:max_chars]}\n[… truncated]"

    await asyncio.gather(*(one(r) for r in results[:count]))


def _format(query: str, engine: Engine, results: list[SearchResult], notes: list[str]) -> str:
    lines = [f'Web search for "{query}": {len(results)} results from {engine}.']
    if notes:
        lines.append("Fell back past: " + "; ".join(notes) + ".")
    for number, r in enumerate(results, start=1):
        lines += ["", f"{number}. {r['title']}", f"   {r['url']}"]
        if "publishedAt" in r:
            lines.append(f"   Published: {r['publishedAt']}")
        if r["snippet"]:
            lines.append(f"   {r['snippet']}")
        if "content" in r:
            lines += ["", "   Content:", *("   " + line for line in r["content"].splitlines())]
    return "\n".join(lines)


def handlers(env: ToolEnvironment) -> dict[str, Any]:
    settings = SearchSettings(config=env.config)
    fetch_options = WebSettings(config=env.config).options()
    data_root = env.store.data_root

    async def web_search(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        research = args.get("mode", "quick") == "research"
        query = Query(text=args["query"], max_results=int(args.get("max_results", 8)), research=research)
        search = _Search(settings, data_root, ctx)
        answer = await search.first_answer(_chain(args.get("provider", "auto"), settings.auto_order), query)
        if answer is None:
            tried = "; ".join(search.notes)
            return ToolOutput(
                content=f"No web search engine answered ({tried}). To search the web, {CONFIGURE}.",
                is_error=True,
                outcome="error",
                data={"query": query.text, "attempts": search.notes},
            )
        engine, results = answer
        if research and args.get("include_content"):
            await _add_content(results, settings.content_results, fetch_options, settings.content_max_chars)
        return ToolOutput(
            content=_format(query.text, engine, results, search.notes),
            data={"query": query.text, "provider": engine, "results": results, "attempts": search.notes},
        )

    return {"web_search": web_search}
