"""AnthropicModel through the real anthropic SDK against the loopback fake server."""

from __future__ import annotations

import asyncio
import socket

import pytest

from neuralis_jupyter.providers import (
    AnthropicModel,
    Message,
    ModelCallFailed,
    ModelRequest,
    StopEvent,
    TextDelta,
    ToolSpec,
    ToolUseEvent,
    UsageEvent,
)
from neuralis_jupyter.testing import Call, Fail, FakeLLMServer, Raw, Reply, collect_events

HAIKU = "claude-haiku-4-5"
USER_HI: Message = {"role": "user", "content": [{"type": "text", "text": "hi"}]}


def _model(server: FakeLLMServer) -> AnthropicModel:
    return AnthropicModel(HAIKU, api_key="sk-ant-test", base_url=server.anthropic_base_url, max_retries=0)


def _request(*messages: Message, **kwargs) -> ModelRequest:
    return ModelRequest(model=HAIKU, system="You are a test.", messages=messages or (USER_HI,), **kwargs)


def _message_events(stop_reason: str, usage: dict, *blocks: tuple[dict, list[dict]]) -> list[dict]:
    """Raw Anthropic stream events: message_start, each (start block, deltas), message_delta."""
    start_usage = {"input_tokens": 3, "output_tokens": 1}
    events = [{"type": "message_start", "message": {
        "id": "msg_raw", "type": "message", "role": "assistant", "model": HAIKU, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage,
    }}]  # fmt: skip
    for index, (block, deltas) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": usage})
    events.append({"type": "message_stop"})
    return events


def test_text_stream(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="Hello from the fake model", chunk=4))
    events = collect_events(_model(fake_llm), _request())
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 7
    assert "".join(d.text for d in deltas) == "Hello from the fake model"
    assert [type(e) for e in events[-2:]] == [UsageEvent, StopEvent]
    # The input side is reported as soon as message_start arrives; the final report closes the stream.
    assert [e.partial for e in events if isinstance(e, UsageEvent)] == [True, False]
    assert isinstance(events[0], UsageEvent)
    assert sum(isinstance(e, StopEvent) for e in events) == 1
    assert events[-1] == StopEvent(reason="end_turn", raw_reason="end_turn")
    fake_llm.assert_complete()


def test_parallel_tool_calls_from_fragments(fake_llm: FakeLLMServer) -> None:
    calls = (
        Call(name="execute", input={"code": "import pandas as pd\nprint(pd.__version__)"}, id="toolu_a"),
        Call(name="todos", input={"items": [{"text": "write tests", "done": False}]}, id="toolu_b"),
    )
    fake_llm.enqueue(Reply(text="Running two things.", calls=calls))
    events = collect_events(_model(fake_llm), _request())
    assert [e for e in events if isinstance(e, ToolUseEvent)] == [
        ToolUseEvent(
            id="toolu_a", name="execute", input={"code": "import pandas as pd\nprint(pd.__version__)"}
        ),
        ToolUseEvent(id="toolu_b", name="todos", input={"items": [{"text": "write tests", "done": False}]}),
    ]
    assert events[-1] == StopEvent(reason="tool_use", raw_reason="tool_use")


def test_tool_call_without_arguments_has_empty_input(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(calls=(Call(name="list_variables", id="toolu_1"),)))
    events = collect_events(_model(fake_llm), _request())
    assert events[1] == ToolUseEvent(id="toolu_1", name="list_variables", input={})


def test_exact_token_counts_with_cache(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(
        Reply(text="ok", input_tokens=1200, output_tokens=37, cache_read_tokens=9000, cache_write_tokens=450)
    )
    usage = [e for e in collect_events(_model(fake_llm), _request()) if isinstance(e, UsageEvent)]
    assert usage == [
        UsageEvent(
            input_tokens=1200, output_tokens=1, cache_read_tokens=9000, cache_write_tokens=450, partial=True
        ),
        UsageEvent(input_tokens=1200, output_tokens=37, cache_read_tokens=9000, cache_write_tokens=450),
    ]


def test_usage_from_message_delta_and_server_tool_uses(fake_llm: FakeLLMServer) -> None:
    # message_delta repeats cumulative counts (and server tool use); they win over message_start.
    delta_usage = {
        "output_tokens": 60,
        "input_tokens": 20,
        "cache_read_input_tokens": 7,
        "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 0},
    }
    text = ({"type": "text", "text": ""}, [{"type": "text_delta", "text": "found it"}])
    fake_llm.enqueue(Raw(events=_message_events("end_turn", delta_usage, text)))
    events = collect_events(_model(fake_llm), _request())
    assert events[-2] == UsageEvent(
        input_tokens=20, output_tokens=60, cache_read_tokens=7, server_tool_uses={"web_search": 2}
    )


def test_request_shape(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="ok"))
    conversation: tuple[Message, ...] = (
        {"role": "user", "content": [{"type": "text", "text": "run it"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": ""},
                {"type": "tool_use", "id": "toolu_1", "name": "execute", "input": {"code": "1/0"}},
                {"type": "tool_use", "id": "toolu_2", "name": "todos", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "ZeroDivisionError",
                    "is_error": True,
                    "name": "execute",
                    "outcome": "error",
                },
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "[]", "is_error": False},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
    )
    schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    request = ModelRequest(
        model=HAIKU,
        system="STATIC",
        system_dynamic="It is Tuesday.",
        messages=conversation,
        tools=(ToolSpec(name="execute", description="Run Python.", input_schema=schema),),
        max_tokens=321,
        temperature=0.2,
    )
    collect_events(_model(fake_llm), request)
    body = fake_llm.requests[0].body
    assert body["model"] == HAIKU
    assert body["stream"] is True
    assert body["max_tokens"] == 321
    assert body["temperature"] == 0.2
    assert body["system"] == [
        {"type": "text", "text": "STATIC", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "It is Tuesday."},
    ]
    assert body["tools"] == [{"name": "execute", "description": "Run Python.", "input_schema": schema}]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "run it"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "execute", "input": {"code": "1/0"}},
                {"type": "tool_use", "id": "toolu_2", "name": "todos", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "ZeroDivisionError",
                    "is_error": True,
                },
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "[]"},
                {"type": "text", "text": "and now?"},
            ],
        },
    ]


def test_minimal_request_leaves_optional_fields_out(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="ok"))
    collect_events(_model(fake_llm), _request())
    body = fake_llm.requests[0].body
    assert body["system"] == [
        {"type": "text", "text": "You are a test.", "cache_control": {"type": "ephemeral"}}
    ]
    assert not {"tools", "temperature"} & body.keys()


def test_tool_use_round_trip(fake_llm: FakeLLMServer) -> None:
    """The events of one call, stored as blocks, are what the next call sends."""
    call = Call(name="execute", input={"code": "x = 1"}, id="toolu_rt")
    fake_llm.enqueue(Reply(text="Let me run that.", calls=(call,)), Reply(text="Done."))
    model = _model(fake_llm)
    first = collect_events(model, _request())
    text = "".join(e.text for e in first if isinstance(e, TextDelta))
    use = next(e for e in first if isinstance(e, ToolUseEvent))
    assistant: Message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": text},
            {"type": "tool_use", "id": use.id, "name": use.name, "input": dict(use.input)},
        ],
    }
    result: Message = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "", "is_error": False}],
    }
    collect_events(model, _request(USER_HI, assistant, result))
    sent = fake_llm.requests[1].body["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me run that."},
            {"type": "tool_use", "id": "toolu_rt", "name": "execute", "input": {"code": "x = 1"}},
        ],
    }
    assert sent[2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_rt", "content": ""}]


@pytest.mark.parametrize(
    ("reply", "reason", "raw"),
    [
        (Reply(text="cut", stop="max_tokens"), "max_tokens", "max_tokens"),
        (Reply(text="END", stop="stop_sequence"), "stop_sequence", "stop_sequence"),
        (Reply(text="no", stop="refusal"), "refusal", "refusal"),
        (Reply(text="paused", stop="other"), "other", "pause_turn"),
    ],
)
def test_stop_reasons(fake_llm: FakeLLMServer, reply: Reply, reason: str, raw: str) -> None:
    fake_llm.enqueue(reply)
    assert collect_events(_model(fake_llm), _request())[-1] == StopEvent(reason=reason, raw_reason=raw)


def test_context_window_stop_maps_to_max_tokens(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Raw(events=_message_events("model_context_window_exceeded", {"output_tokens": 5})))
    events = collect_events(_model(fake_llm), _request())
    assert events[-1] == StopEvent(reason="max_tokens", raw_reason="model_context_window_exceeded")


@pytest.mark.parametrize(
    ("status", "message"), [(429, "rate limited"), (500, "internal"), (529, "overloaded")]
)
def test_http_errors_become_model_call_failed(fake_llm: FakeLLMServer, status: int, message: str) -> None:
    fake_llm.enqueue(Fail(status, message))
    with pytest.raises(ModelCallFailed) as info:
        collect_events(_model(fake_llm), _request())
    assert info.value.status == status
    assert info.value.provider == "anthropic"
    assert str(info.value) == f"anthropic request failed ({status}): {message}"


def test_error_event_mid_stream(fake_llm: FakeLLMServer) -> None:
    start = _message_events("end_turn", {"output_tokens": 1})[0]
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    fake_llm.enqueue(Raw(events=[start, error]))
    with pytest.raises(ModelCallFailed, match="Overloaded") as info:
        collect_events(_model(fake_llm), _request())
    assert info.value.status is None


def test_truncated_stream_fails(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Raw(events=_message_events("end_turn", {"output_tokens": 1})[:1]))
    with pytest.raises(ModelCallFailed, match="ended before its stop reason"):
        collect_events(_model(fake_llm), _request())


def test_invalid_tool_json_fails_naming_the_tool(fake_llm: FakeLLMServer) -> None:
    block = {"type": "tool_use", "id": "toolu_x", "name": "execute", "input": {}}
    deltas = [{"type": "input_json_delta", "partial_json": '{"code": "pri'}]
    fake_llm.enqueue(Raw(events=_message_events("max_tokens", {"output_tokens": 9}, (block, deltas))))
    with pytest.raises(ModelCallFailed, match="'execute' are not valid JSON"):
        collect_events(_model(fake_llm), _request())


def test_connection_refused(fake_llm: FakeLLMServer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = AnthropicModel(HAIKU, api_key="k", base_url=f"http://127.0.0.1:{port}", max_retries=0)
    with pytest.raises(ModelCallFailed, match=r"could not reach http://127\.0\.0\.1"):
        collect_events(model, _request())


def test_stopping_mid_stream_closes_cleanly(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="a" * 50, chunk=1, delay=0.05), Reply(text="next"))
    model = _model(fake_llm)

    async def first_delta_then_stop() -> str:
        stream = model.stream(_request())
        usage = await anext(stream)
        event = await anext(stream)
        await stream.aclose()
        assert isinstance(usage, UsageEvent)
        assert usage.partial
        assert isinstance(event, TextDelta)
        return event.text

    assert asyncio.run(first_delta_then_stop()) == "a"
    # The server is still healthy and the next call gets the next reply.
    assert "".join(e.text for e in collect_events(model, _request()) if isinstance(e, TextDelta)) == "next"
    fake_llm.assert_complete()


def test_model_identity() -> None:
    model = AnthropicModel("claude-haiku-4-5-20251001", api_key="sk-secret", catalog_id="claude-haiku-4-5")
    assert (model.provider, model.model_id) == ("anthropic", "claude-haiku-4-5")
    assert model.api_model_id == "claude-haiku-4-5-20251001"
    assert "sk-secret" not in repr(model)


def test_merged_user_turn_puts_tool_results_first(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="ok"))
    use: Message = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "execute", "input": {}}],
    }
    note: Message = {"role": "user", "content": [{"type": "text", "text": "(a message arrived meanwhile)"}]}
    result: Message = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "done", "is_error": False}],
    }
    collect_events(_model(fake_llm), _request(USER_HI, use, note, result))
    assert fake_llm.requests[0].body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"},
            {"type": "text", "text": "(a message arrived meanwhile)"},
        ],
    }
