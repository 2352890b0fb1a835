"""A model that answers from a script: for tests, demos and benchmarks.

Each :class:`Reply` is one model response (text, tool calls, token counts). A script entry may also be
a function of the request, for answers that depend on what the model was sent. The same ``Reply``
values drive the loopback fake LLM server (:mod:`neuralis_jupyter.testing.fake_llm`), which renders
them in the Anthropic and OpenAI wire formats.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .base import ModelEvent, ModelRequest, StopEvent, StopReason, TextDelta, ToolUseEvent, UsageEvent

__all__ = ["Call", "Reply", "ScriptExhausted", "ScriptedModel", "estimate_tokens"]

_ids = itertools.count(1)


class ScriptExhausted(AssertionError):
    """The model was called more often than the script has replies."""


@dataclass(frozen=True, kw_only=True)
class Call:
    """A tool call the scripted model makes."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Reply:
    """One scripted response. Unset token counts are estimated from the request and the reply."""

    text: str = ""
    calls: tuple[Call, ...] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    stop: StopReason | None = None
    #: Split the text into deltas of this many characters (0: one delta).
    chunk: int = 0
    #: Seconds to wait before each delta, to leave room for a stop.
    delay: float = 0.0

    @property
    def stop_reason(self) -> StopReason:
        return self.stop or ("tool_use" if self.calls else "end_turn")

    def chunks(self) -> list[str]:
        if not self.text:
            return []
        if self.chunk <= 0:
            return [self.text]
        return [self.text[i : i + self.chunk] for i in range(0, len(self.text), self.chunk)]

    def with_ids(self) -> Reply:
        """Give every call an id (``toolu_s<n>``) so that it can be referred to."""
        if all(c.id for c in self.calls):
            return self
        calls = tuple(
            c if c.id else Call(name=c.name, input=c.input, id=f"toolu_s{next(_ids):04d}") for c in self.calls
        )
        return Reply(**{**self.__dict__, "calls": calls})


Script = Reply | Callable[[ModelRequest], Reply]


def estimate_tokens(text: str) -> int:
    """About four characters a token; deterministic so tests can assert exact counts."""
    return (len(text) + 3) // 4


def request_text(request: ModelRequest) -> str:
    parts = [request.system, request.system_dynamic]
    parts += [json.dumps(m["content"], sort_keys=True) for m in request.messages]
    parts += [json.dumps({"n": t.name, "s": t.input_schema}, sort_keys=True) for t in request.tools]
    return "".join(parts)


def reply_usage(request: ModelRequest, reply: Reply) -> UsageEvent:
    out = reply.text + "".join(json.dumps(dict(c.input), sort_keys=True) for c in reply.calls)
    return UsageEvent(
        input_tokens=reply.input_tokens
        if reply.input_tokens is not None
        else estimate_tokens(request_text(request)),
        output_tokens=reply.output_tokens if reply.output_tokens is not None else estimate_tokens(out),
        cache_read_tokens=reply.cache_read_tokens,
        cache_write_tokens=reply.cache_write_tokens,
    )


class ScriptedModel:
    """Answers each request with the next scripted reply and records every request."""

    def __init__(
        self, script: Iterable[Script] = (), *, provider: str = "scripted", model_id: str = "demo"
    ) -> None:
        self._provider = provider
        self._model_id = model_id
        self._script: deque[Script] = deque(script)
        self.requests: list[ModelRequest] = []

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def model_id(self) -> str:
        return self._model_id

    def enqueue(self, *replies: Script) -> ScriptedModel:
        self._script.extend(replies)
        return self

    @property
    def remaining(self) -> int:
        return len(self._script)

    def assert_complete(self) -> None:
        if self._script:
            raise AssertionError(f"{len(self._script)} scripted replies were never requested")

    def next_reply(self, request: ModelRequest) -> Reply:
        self.requests.append(request)
        if not self._script:
            raise ScriptExhausted(
                f"the model was called {len(self.requests)} times but the script has only "
                f"{len(self.requests) - 1} replies"
            )
        entry = self._script.popleft()
        reply = entry(request) if callable(entry) else entry
        return reply.with_ids()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        reply = self.next_reply(request)
        usage = reply_usage(request, reply)
        # As Anthropic does: the input side is reported first, so a stop mid-stream still charges it.
        yield replace(usage, output_tokens=0, partial=True)
        for piece in reply.chunks():
            if reply.delay:
                await asyncio.sleep(reply.delay)
            yield TextDelta(text=piece)
        for call in reply.calls:
            assert call.id is not None
            yield ToolUseEvent(id=call.id, name=call.name, input=dict(call.input))
        yield usage
        yield StopEvent(reason=reply.stop_reason, raw_reason=reply.stop_reason)
