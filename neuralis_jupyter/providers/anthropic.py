"""The Anthropic Messages API behind the :class:`~neuralis_jupyter.providers.base.Model` seam.

One ``stream()`` call is one ``POST /v1/messages`` with ``stream: true``, read as the SDK's raw event
stream (``messages.create(stream=True)``; the ``messages.stream`` helper rebuilds a full message
snapshot on every event, which we do not need).

Request: the static system prompt goes first with ``cache_control`` so that the byte-stable prefix
(tools + static system) is cached; the per-step ``system_dynamic`` follows uncached. Our message blocks
already have Anthropic's shapes: our own keys (``name``, ``outcome`` on tool results) and empty text
blocks (which the API refuses) are dropped, consecutive same-role messages merged (the API wants
alternating turns), and a user turn's tool results put first.

Response: text deltas are passed on at once; a tool_use block's ``input_json_delta`` fragments are
buffered until its ``content_block_stop``; usage is ``message_start.usage`` updated by the cumulative
``message_delta.usage``. It is reported twice: as a partial UsageEvent as soon as ``message_start``
arrives (so a step stopped or failed mid-stream is still charged its input tokens), and in full just
before the stop reason.

SDK clients (and their connection pools) are shared per event loop and per settings, and closed when
their loop shuts down (see :mod:`._clients`): a step reuses the previous step's connection.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

from ._sdk import SDKModel
from ._wire import parse_tool_input, plain
from .base import (
    Message,
    ModelEvent,
    ModelRequest,
    StopEvent,
    StopReason,
    TextDelta,
    ToolSpec,
    ToolUseEvent,
    UsageEvent,
)
from .errors import ModelCallFailed, ProviderError
from .guard import blocked_cause, check_url

if TYPE_CHECKING:
    import anthropic

__all__ = ["DEFAULT_BASE_URL", "AnthropicModel", "to_wire"]

log = logging.getLogger(__name__)

PROVIDER = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    # The output was cut off by the context window rather than max_tokens: the same remedy applies.
    "model_context_window_exceeded": "max_tokens",
}


class CacheControl(TypedDict):
    type: Literal["ephemeral"]


class SystemBlock(TypedDict):
    type: Literal["text"]
    text: str
    cache_control: NotRequired[CacheControl]


class WireTool(TypedDict):
    name: str
    description: str
    input_schema: dict[str, Any]


class WireMessage(TypedDict):
    role: Literal["user", "assistant"]
    content: list[dict[str, Any]]


class WireParams(TypedDict):
    """The keyword arguments of ``messages.create`` (besides ``stream``)."""

    model: str
    max_tokens: int
    messages: list[WireMessage]
    system: NotRequired[list[SystemBlock]]
    tools: NotRequired[list[WireTool]]
    extra_body: NotRequired[dict[str, Any]]


def _system(request: ModelRequest) -> list[SystemBlock]:
    # The API refuses empty text blocks, so an empty part is left out rather than sent blank.
    blocks: list[SystemBlock] = []
    if request.system:
        blocks.append({"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}})
    if request.system_dynamic:
        blocks.append({"type": "text", "text": request.system_dynamic})
    return blocks


def _block(block: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block["text"]} if block["text"] else None
    if kind == "tool_use":
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": plain(block["input"])}
    if kind == "tool_result":
        out = {"type": "tool_result", "tool_use_id": block["tool_use_id"], "content": block["content"]}
        if block.get("is_error"):
            out["is_error"] = True
        return out
    return dict(block)  # a block type we do not model (e.g. thinking) goes back as it came


def _messages(messages: Iterable[Message]) -> list[WireMessage]:
    out: list[WireMessage] = []
    for message in messages:
        content = [b for b in map(_block, message["content"]) if b is not None]
        if not content:
            continue
        if out and out[-1]["role"] == message["role"]:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": message["role"], "content": content})
    for wire in out:
        # The API wants a user turn's tool results before anything else in it; merging a note that
        # arrived while tools ran (an inbox message) could put text first.
        if wire["role"] == "user":
            wire["content"].sort(key=lambda b: b.get("type") != "tool_result")
    return out


def _tools(tools: Iterable[ToolSpec]) -> list[WireTool]:
    return [
        {"name": t.name, "description": t.description, "input_schema": plain(t.input_schema)} for t in tools
    ]


def to_wire(request: ModelRequest, model: str) -> WireParams:
    """The ``messages.create`` arguments for ``request`` sent to the API model ``model``."""
    params: WireParams = {
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": _messages(request.messages),
    }
    if system := _system(request):
        params["system"] = system
    if request.tools:
        params["tools"] = _tools(request.tools)
    if request.temperature is not None:
        # anthropic 2.x no longer has a temperature argument; the field still reaches the API this way.
        params["extra_body"] = {"temperature": request.temperature}
    return params


@dataclass(kw_only=True)
class _PendingTool:
    id: str
    name: str
    initial: dict[str, Any]
    parts: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class _Parser:
    """Turns raw stream events into model events; holds what must wait for the end of a block or message."""

    tools: dict[int, _PendingTool] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    server_tool_uses: dict[str, int] = field(default_factory=dict)
    stop_reason: str | None = None

    def _take_usage(self, usage: Any) -> None:
        for ours, theirs in (
            ("input_tokens", "input_tokens"),
            ("output_tokens", "output_tokens"),
            ("cache_read_tokens", "cache_read_input_tokens"),
            ("cache_write_tokens", "cache_creation_input_tokens"),
        ):
            value = getattr(usage, theirs, None)
            if value is not None:  # message_delta repeats only what it knows; keep the rest
                self.usage[ours] = value
        server = getattr(usage, "server_tool_use", None)
        if server is not None:
            for name, count in (
                ("web_search", server.web_search_requests),
                ("web_fetch", server.web_fetch_requests),
            ):
                if count:
                    self.server_tool_uses[name] = count

    def feed(self, event: Any) -> ModelEvent | None:
        kind = event.type
        if kind == "message_start":
            self._take_usage(event.message.usage)
            return self.usage_event(partial=True)
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "tool_use":
                self.tools[event.index] = _PendingTool(
                    id=block.id, name=block.name, initial=dict(block.input or {})
                )
            elif block.type == "text" and block.text:
                return TextDelta(text=block.text)
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta" and delta.text:
                return TextDelta(text=delta.text)
            if delta.type == "input_json_delta" and event.index in self.tools:
                self.tools[event.index].parts.append(delta.partial_json)
        elif kind == "content_block_stop":
            pending = self.tools.pop(event.index, None)
            if pending is not None:
                raw = "".join(pending.parts)
                tool_input = parse_tool_input(PROVIDER, pending.name, raw, initial=pending.initial)
                return ToolUseEvent(id=pending.id, name=pending.name, input=tool_input)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self._take_usage(event.usage)
        return None

    def usage_event(self, *, partial: bool = False) -> UsageEvent:
        return UsageEvent(**self.usage, server_tool_uses=dict(self.server_tool_uses), partial=partial)

    def finish(self) -> tuple[UsageEvent, StopEvent]:
        if self.stop_reason is None:
            raise ModelCallFailed(PROVIDER, "the response stream ended before its stop reason")
        return self.usage_event(), StopEvent(
            reason=_STOP_REASONS.get(self.stop_reason, "other"), raw_reason=self.stop_reason
        )


def _failure(exc: Exception, base_url: str) -> ProviderError:
    import anthropic

    if (blocked := blocked_cause(exc)) is not None:
        return blocked
    if isinstance(exc, anthropic.APIStatusError):
        # An error event in the middle of a stream arrives on a 200 response: no status to report.
        status = exc.status_code if exc.status_code >= 400 else None
        return ModelCallFailed(PROVIDER, exc.api_message or exc.message, status=status)
    if isinstance(exc, anthropic.APITimeoutError):
        return ModelCallFailed(PROVIDER, f"timed out waiting for {base_url}")
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelCallFailed(PROVIDER, f"could not reach {base_url}: {exc.__cause__ or exc}")
    return ModelCallFailed(PROVIDER, f"{type(exc).__name__}: {exc}")


class AnthropicModel(SDKModel):
    """An Anthropic model; ``model_id`` is the API model id sent on the wire.

    ``request.model`` is not sent: the model is fixed at construction, as its prices are.
    ``base_url`` None is Anthropic's public API; :func:`~neuralis_jupyter.providers.build_model` fills it
    from ``ANTHROPIC_BASE_URL``. The SDK's own environment lookups are bypassed so that what is checked by
    the guard is what is called.

    ``catalog_id`` is the id the catalog prices it under, when that differs from the API id.
    """

    PROVIDER = PROVIDER
    DEFAULT_BASE_URL = DEFAULT_BASE_URL

    def _sdk_class(self) -> type[anthropic.AsyncAnthropic]:
        import anthropic  # a second of import time: paid on the first model call, not at kernel start

        return anthropic.AsyncAnthropic

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        base_url = self.base_url or DEFAULT_BASE_URL
        check_url(base_url)
        import anthropic
        import httpx2

        params = to_wire(request, self.api_model_id)
        parser = _Parser()
        try:
            client = await self.client()
            events = await client.messages.create(**params, stream=True)
            async with events:
                async for event in events:
                    if (out := parser.feed(event)) is not None:
                        yield out
        # A connection lost mid-stream surfaces from httpx2 directly: the SDK only wraps errors of the
        # request itself.
        except (anthropic.APIError, httpx2.TransportError) as exc:
            raise _failure(exc, base_url) from exc
        usage, stop = parser.finish()
        log.debug("anthropic %s: %s, %s", self.api_model_id, usage, stop.raw_reason)
        yield usage
        yield stop
