"""OpenAI Chat Completions (and any OpenAI-compatible server) behind the Model seam.

One ``stream()`` call is one ``POST {base_url}/chat/completions`` with ``stream: true`` and
``stream_options.include_usage``, so the last chunk carries the usage (and only the last: a stream
stopped or failed before it reports none, so no partial UsageEvent is yielded).

Request: one system message (static prompt, then the dynamic part); our Anthropic-shaped blocks are
rewritten: an assistant message's text and tool_use blocks become ``content`` + ``tool_calls``; each
tool_result block becomes its own ``role: tool`` message, in order, placed before any text of the same
user message because the API wants tool answers right after the assistant message that asked.

Response: content deltas are passed on at once; tool-call deltas are accumulated by index (id and name
first, then argument fragments) and reported when the stream ends, in index order. OpenAI's
``prompt_tokens`` includes cached tokens; ours does not, so ``input_tokens = prompt_tokens - cached``.

As for Anthropic, SDK clients are shared per event loop (see :mod:`._clients`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict
from urllib.parse import urlsplit

from ._sdk import SDKModel
from ._wire import parse_tool_input, plain
from .base import (
    Message,
    ModelEvent,
    ModelRequest,
    StopEvent,
    StopReason,
    TextDelta,
    ToolUseEvent,
    UsageEvent,
)
from .credentials import PROVIDER_KEYS
from .errors import ModelCallFailed, ProviderError
from .guard import blocked_cause, check_url

if TYPE_CHECKING:
    import openai

__all__ = ["DEFAULT_BASE_URL", "OpenAIModel", "to_wire"]

log = logging.getLogger(__name__)

PROVIDER = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class WireToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: dict[str, str]


class WireMessage(TypedDict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None
    tool_calls: NotRequired[list[WireToolCall]]
    tool_call_id: NotRequired[str]


class WireParams(TypedDict):
    """The keyword arguments of ``chat.completions.create`` (besides ``stream``)."""

    model: str
    messages: list[WireMessage]
    stream_options: dict[str, bool]
    tools: NotRequired[list[dict[str, Any]]]
    max_tokens: NotRequired[int]
    max_completion_tokens: NotRequired[int]
    temperature: NotRequired[float]


def _texts(blocks: Iterable[Any]) -> str:
    return "\n\n".join(b["text"] for b in blocks if b.get("type") == "text" and b["text"])


def _message(message: Message) -> list[WireMessage]:
    blocks = message["content"]
    if message["role"] == "assistant":
        calls: list[WireToolCall] = [
            {
                "id": b["id"],
                "type": "function",
                "function": {"name": b["name"], "arguments": json.dumps(b["input"], default=dict)},
            }
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        text = _texts(blocks)
        if not text and not calls:
            return []
        out: WireMessage = {"role": "assistant", "content": text or None}
        if calls:
            out["tool_calls"] = calls
        return [out]
    wire: list[WireMessage] = [
        {"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]}
        for b in blocks
        if b.get("type") == "tool_result"
    ]
    if text := _texts(blocks):
        wire.append({"role": "user", "content": text})
    return wire


def _max_tokens_field(base_url: str) -> Literal["max_tokens", "max_completion_tokens"]:
    # OpenAI's own API deprecated max_tokens (reasoning models refuse it); compatible servers
    # (vLLM, llama.cpp, Ollama, LM Studio) all understand max_tokens, not all the newer name.
    host = (urlsplit(base_url).hostname or "").lower()
    return "max_completion_tokens" if host in PROVIDER_KEYS[PROVIDER].own_hosts else "max_tokens"


def to_wire(request: ModelRequest, model: str, *, base_url: str = DEFAULT_BASE_URL) -> WireParams:
    """The ``chat.completions.create`` arguments for ``request`` sent to ``model`` at ``base_url``."""
    messages: list[WireMessage] = []
    if system := "\n\n".join(p for p in (request.system, request.system_dynamic) if p):
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        messages.extend(_message(message))
    params: WireParams = {"model": model, "messages": messages, "stream_options": {"include_usage": True}}
    params[_max_tokens_field(base_url)] = request.max_tokens
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": plain(t.input_schema),
                },
            }
            for t in request.tools
        ]
    if request.temperature is not None:
        params["temperature"] = request.temperature
    return params


@dataclass(kw_only=True)
class _PendingCall:
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class _Parser:
    calls: dict[int, _PendingCall] = field(default_factory=dict)
    usage: Any = None
    finish_reason: str | None = None

    def feed(self, chunk: Any) -> list[ModelEvent]:
        out: list[ModelEvent] = []
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices:
            if choice.index != 0:  # we never ask for n > 1
                continue
            delta = choice.delta
            for text in (delta.content, delta.refusal):
                if text:
                    out.append(TextDelta(text=text))
            for call in delta.tool_calls or ():
                pending = self.calls.setdefault(call.index, _PendingCall())
                # Some compatible servers repeat the id and name in every fragment: keep the first.
                pending.id = pending.id or (call.id or "")
                if call.function is not None:
                    pending.name = pending.name or (call.function.name or "")
                    if call.function.arguments:
                        pending.parts.append(call.function.arguments)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        return out

    def _usage(self) -> UsageEvent:
        if self.usage is None:
            log.warning("the OpenAI-compatible server sent no usage; recording 0 tokens")
            return UsageEvent()
        details = self.usage.prompt_tokens_details
        cached = (details.cached_tokens if details is not None else None) or 0
        return UsageEvent(
            input_tokens=self.usage.prompt_tokens - cached,
            output_tokens=self.usage.completion_tokens,
            cache_read_tokens=cached,
        )

    def finish(self) -> list[ModelEvent]:
        if self.finish_reason is None:
            raise ModelCallFailed(PROVIDER, "the response stream ended without a finish_reason")
        out: list[ModelEvent] = []
        for index in sorted(self.calls):
            pending = self.calls[index]
            tool_input = parse_tool_input(PROVIDER, pending.name, "".join(pending.parts))
            # A local server may leave the id out; the tool result still needs one to refer to.
            call_id = pending.id or f"call_{uuid.uuid4().hex[:24]}"
            out.append(ToolUseEvent(id=call_id, name=pending.name, input=tool_input))
        reason = _FINISH_REASONS.get(self.finish_reason, "other")
        if self.calls and reason == "end_turn":
            reason = "tool_use"  # some compatible servers finish a tool call with "stop"
        out.append(self._usage())
        out.append(StopEvent(reason=reason, raw_reason=self.finish_reason))
        return out


def _failure(exc: Exception, base_url: str) -> ProviderError:
    import openai

    if (blocked := blocked_cause(exc)) is not None:
        return blocked
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        message = body.get("message") if isinstance(body, dict) else None
        return ModelCallFailed(PROVIDER, str(message or exc.message), status=exc.status_code)
    if isinstance(exc, openai.APITimeoutError):
        return ModelCallFailed(PROVIDER, f"timed out waiting for {base_url}")
    if isinstance(exc, openai.APIConnectionError):
        return ModelCallFailed(PROVIDER, f"could not reach {base_url}: {exc.__cause__ or exc}")
    return ModelCallFailed(PROVIDER, f"{type(exc).__name__}: {exc}")


class OpenAIModel(SDKModel):
    """A model behind the OpenAI Chat Completions API; ``model_id`` is the id sent on the wire.

    ``request.model`` is not sent: the model is fixed at construction, as its prices are.
    ``base_url`` None is OpenAI's public API; any OpenAI-compatible server works (its URL ends in
    ``/v1``). ``catalog_id`` is the id the catalog prices it under, when that differs.
    """

    PROVIDER = PROVIDER
    DEFAULT_BASE_URL = DEFAULT_BASE_URL

    def _sdk_class(self) -> type[openai.AsyncOpenAI]:
        import openai  # a second of import time: paid on the first model call, not at kernel start

        return openai.AsyncOpenAI

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        base_url = self.base_url or DEFAULT_BASE_URL
        check_url(base_url)
        import httpx2
        import openai

        params = to_wire(request, self.api_model_id, base_url=base_url)
        parser = _Parser()
        try:
            client = await self.client()
            chunks = await client.chat.completions.create(**params, stream=True)
            async with chunks:
                async for chunk in chunks:
                    for event in parser.feed(chunk):
                        yield event
        # A connection lost mid-stream surfaces from httpx2 directly.
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            raise _failure(exc, base_url) from exc
        events = parser.finish()
        log.debug("openai %s: %s", self.api_model_id, events[-2:])
        for event in events:
            yield event
