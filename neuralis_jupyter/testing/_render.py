"""Rendering scripted replies in the Anthropic and OpenAI wire formats, for the fake LLM server.

A :class:`Reply` becomes either one JSON body (``stream: false``) or a list of :class:`Frame` values,
each a piece of the ``text/event-stream`` body with the pause to take before sending it. The shapes
follow the real APIs event for event (message_start, content_block_*, message_delta, message_stop and a
ping for Anthropic; role, content, tool_calls, finish and usage chunks then ``[DONE]`` for OpenAI), so
the real SDKs parse them with their own code. Tool inputs are sent in several fragments on purpose:
accumulating them is the part of a provider most likely to be wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from ..providers.base import StopReason
from ..providers.scripted import Reply

__all__ = [
    "Fail",
    "Frame",
    "Raw",
    "Tokens",
    "anthropic_error",
    "anthropic_message",
    "anthropic_stream",
    "openai_completion",
    "openai_error",
    "openai_stream",
    "raw_stream",
]

#: A fixed creation time keeps recorded responses byte-stable between runs.
CREATED = 1_750_000_000
#: How many fragments a tool call's JSON input is split into.
FRAGMENTS = 3


@dataclass(frozen=True)
class Fail:
    """A scripted HTTP error, answered in the provider's own error body shape.

    Fail responses carry ``x-should-retry: false`` so that an SDK left at its default ``max_retries``
    still makes one request per entry; ``retry=True`` invites the retry instead (with a 1 ms
    ``retry-after-ms``), and the retry consumes the next script entry.
    """

    status: int
    message: str
    _: KW_ONLY
    #: The provider's error type; by default the one the real API uses for ``status``.
    type: str | None = None
    retry: bool = False


@dataclass(frozen=True, kw_only=True)
class Raw:
    """Stream events sent verbatim: Anthropic ``{"type": ...}`` events or OpenAI chunks.

    For what a :class:`Reply` cannot say (a mid-stream error event, an unusual stop reason, server tool
    usage). Answers streaming requests only.
    """

    events: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, kw_only=True)
class Frame:
    delay: float
    data: bytes


@dataclass(frozen=True, kw_only=True)
class Tokens:
    input: int
    output: int
    cache_read: int = 0
    cache_write: int = 0


def _fragments(text: str) -> list[str]:
    size = max(1, -(-len(text) // FRAGMENTS))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _call_json(reply: Reply) -> list[tuple[str, str, str]]:
    out = []
    for call in reply.calls:
        assert call.id is not None, "replies are given ids before rendering"
        out.append((call.id, call.name, json.dumps(dict(call.input))))
    return out


# -- Anthropic ------------------------------------------------------------------------------------

_ANTHROPIC_STOP: dict[StopReason, str] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "other": "pause_turn",
}
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def _sse(event: Mapping[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _anthropic_usage(tokens: Tokens, output: int) -> dict[str, int]:
    return {
        "input_tokens": tokens.input,
        "output_tokens": output,
        "cache_creation_input_tokens": tokens.cache_write,
        "cache_read_input_tokens": tokens.cache_read,
    }


def anthropic_message(reply: Reply, *, model: str, message_id: str, tokens: Tokens) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [
        {"type": "tool_use", "id": i, "name": n, "input": json.loads(j)} for i, n, j in _call_json(reply)
    ]
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _ANTHROPIC_STOP[reply.stop_reason],
        "stop_sequence": None,
        "usage": _anthropic_usage(tokens, tokens.output),
    }


def anthropic_stream(reply: Reply, *, model: str, message_id: str, tokens: Tokens) -> list[Frame]:
    start = anthropic_message(reply, model=model, message_id=message_id, tokens=tokens)
    # The real message_start has no content or stop reason yet and a token or so of output.
    start.update(content=[], stop_reason=None, usage=_anthropic_usage(tokens, 1))
    frames = [Frame(delay=0, data=_sse({"type": "message_start", "message": start}))]
    frames.append(Frame(delay=0, data=_sse({"type": "ping"})))
    index = 0
    if reply.text:
        block = {"type": "text", "text": ""}
        frames.append(
            Frame(delay=0, data=_sse({"type": "content_block_start", "index": 0, "content_block": block}))
        )
        for piece in reply.chunks():
            delta = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": piece},
            }
            frames.append(Frame(delay=reply.delay, data=_sse(delta)))
        frames.append(Frame(delay=0, data=_sse({"type": "content_block_stop", "index": 0})))
        index = 1
    for call_id, name, arguments in _call_json(reply):
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        frames.append(
            Frame(delay=0, data=_sse({"type": "content_block_start", "index": index, "content_block": block}))
        )
        for fragment in ["", *_fragments(arguments)]:  # the API opens with an empty fragment too
            delta = {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": fragment},
            }
            frames.append(Frame(delay=0, data=_sse(delta)))
        frames.append(Frame(delay=0, data=_sse({"type": "content_block_stop", "index": index})))
        index += 1
    delta = {"stop_reason": _ANTHROPIC_STOP[reply.stop_reason], "stop_sequence": None}
    end = {"type": "message_delta", "delta": delta, "usage": {"output_tokens": tokens.output}}
    frames.append(Frame(delay=0, data=_sse(end)))
    frames.append(Frame(delay=0, data=_sse({"type": "message_stop"})))
    return frames


def anthropic_error(fail: Fail, *, request_id: str) -> dict[str, Any]:
    kind = (
        fail.type
        or _ANTHROPIC_ERRORS.get(fail.status)
        or ("api_error" if fail.status >= 500 else "invalid_request_error")
    )
    return {"type": "error", "error": {"type": kind, "message": fail.message}, "request_id": request_id}


# -- OpenAI ---------------------------------------------------------------------------------------

_OPENAI_FINISH: dict[StopReason, str] = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "stop_sequence": "stop",
    "refusal": "content_filter",
    "other": "function_call",
}


def _openai_usage(tokens: Tokens) -> dict[str, Any]:
    # OpenAI bills no separate cache write: written tokens are ordinary prompt tokens.
    prompt = tokens.input + tokens.cache_read + tokens.cache_write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": tokens.output,
        "total_tokens": prompt + tokens.output,
        "prompt_tokens_details": {"cached_tokens": tokens.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def openai_completion(reply: Reply, *, model: str, completion_id: str, tokens: Tokens) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": j}}
            for i, n, j in _call_json(reply)
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _OPENAI_FINISH[reply.stop_reason],
            }
        ],
        "usage": _openai_usage(tokens),
        "system_fingerprint": None,
    }


def openai_stream(
    reply: Reply, *, model: str, completion_id: str, tokens: Tokens, include_usage: bool
) -> list[Frame]:
    def chunk(delta: dict[str, Any], finish: str | None = None, delay: float = 0) -> Frame:
        body: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            body["usage"] = None  # as the API does: null on every chunk but the last
        return Frame(delay=delay, data=f"data: {json.dumps(body)}\n\n".encode())

    frames = [chunk({"role": "assistant", "content": "", "refusal": None})]
    frames += [chunk({"content": piece}, delay=reply.delay) for piece in reply.chunks()]
    for index, (call_id, name, arguments) in enumerate(_call_json(reply)):
        head = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        frames.append(chunk({"tool_calls": [head]}))
        frames += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
            for fragment in _fragments(arguments)
        ]
    frames.append(chunk({}, finish=_OPENAI_FINISH[reply.stop_reason]))
    if include_usage:
        last = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": None,
            "choices": [],
            "usage": _openai_usage(tokens),
        }
        frames.append(Frame(delay=0, data=f"data: {json.dumps(last)}\n\n".encode()))
    frames.append(Frame(delay=0, data=b"data: [DONE]\n\n"))
    return frames


def openai_error(fail: Fail) -> dict[str, Any]:
    if fail.status == 429:
        kind, code = "requests", "rate_limit_exceeded"
    elif fail.status >= 500:
        kind, code = "server_error", None
    else:
        kind, code = "invalid_request_error", None
    return {"error": {"message": fail.message, "type": fail.type or kind, "param": None, "code": code}}


def raw_stream(raw: Raw, *, provider: str) -> list[Frame]:
    if provider == "anthropic":
        return [Frame(delay=0, data=_sse(event)) for event in raw.events]
    frames = [Frame(delay=0, data=f"data: {json.dumps(dict(event))}\n\n".encode()) for event in raw.events]
    return [*frames, Frame(delay=0, data=b"data: [DONE]\n\n")]
