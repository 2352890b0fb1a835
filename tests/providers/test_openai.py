"""OpenAIModel through the real openai SDK against the loopback fake server."""

from __future__ import annotations

import logging

import pytest

from neuralis_jupyter.providers import (
    Message,
    ModelCallFailed,
    ModelRequest,
    OpenAIModel,
    StopEvent,
    TextDelta,
    ToolSpec,
    ToolUseEvent,
    UsageEvent,
)
from neuralis_jupyter.providers.openai import to_wire
from neuralis_jupyter.testing import Call, Fail, FakeLLMServer, Raw, Reply, collect_events

USER_HI: Message = {"role": "user", "content": [{"type": "text", "text": "hi"}]}


def _model(server: FakeLLMServer) -> OpenAIModel:
    return OpenAIModel("gpt-4.1", api_key="sk-test", base_url=server.openai_base_url, max_retries=0)


def _request(*messages: Message, **kwargs) -> ModelRequest:
    return ModelRequest(model="gpt-4.1", system="You are a test.", messages=messages or (USER_HI,), **kwargs)


def _chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
        "usage": usage,
    }


def test_text_stream(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="Hello from the fake model", chunk=5))
    events = collect_events(_model(fake_llm), _request())
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 5
    assert "".join(d.text for d in deltas) == "Hello from the fake model"
    assert [type(e) for e in events[-2:]] == [UsageEvent, StopEvent]
    assert sum(isinstance(e, UsageEvent) for e in events) == 1
    assert sum(isinstance(e, StopEvent) for e in events) == 1
    assert events[-1] == StopEvent(reason="end_turn", raw_reason="stop")
    fake_llm.assert_complete()


def test_parallel_tool_calls_from_fragments(fake_llm: FakeLLMServer) -> None:
    calls = (
        Call(name="execute", input={"code": "import pandas as pd\nprint(pd.__version__)"}, id="call_a"),
        Call(name="todos", input={"items": [{"text": "write tests", "done": False}]}, id="call_b"),
    )
    fake_llm.enqueue(Reply(text="Running two things.", calls=calls))
    events = collect_events(_model(fake_llm), _request())
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Running two things."
    assert [e for e in events if isinstance(e, ToolUseEvent)] == [
        ToolUseEvent(
            id="call_a", name="execute", input={"code": "import pandas as pd\nprint(pd.__version__)"}
        ),
        ToolUseEvent(id="call_b", name="todos", input={"items": [{"text": "write tests", "done": False}]}),
    ]
    assert events[-1] == StopEvent(reason="tool_use", raw_reason="tool_calls")


def test_interleaved_tool_call_fragments_are_joined_by_index(fake_llm: FakeLLMServer) -> None:
    def call(index: int, **function) -> dict:
        return {"tool_calls": [{"index": index, "function": function}]}

    head_1 = {"tool_calls": [{"index": 1, "id": "call_1", "type": "function", "function": {"name": "b"}}]}
    head_0 = {"tool_calls": [{"index": 0, "id": "call_0", "type": "function", "function": {"name": "a"}}]}
    chunks = [
        _chunk({"role": "assistant"}),
        _chunk(head_1),
        _chunk(head_0),
        _chunk(call(1, arguments='{"y":')),
        _chunk(call(0, arguments='{"x": ')),
        _chunk(call(0, arguments="1}")),
        _chunk(call(1, arguments=" 2}")),
        _chunk({}, finish="tool_calls"),
    ]
    fake_llm.enqueue(Raw(events=chunks))
    events = collect_events(_model(fake_llm), _request())
    assert events[:2] == [
        ToolUseEvent(id="call_0", name="a", input={"x": 1}),
        ToolUseEvent(id="call_1", name="b", input={"y": 2}),
    ]


def test_exact_token_counts_with_cached_tokens(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="ok", input_tokens=1200, output_tokens=37, cache_read_tokens=9000))
    usage = [e for e in collect_events(_model(fake_llm), _request()) if isinstance(e, UsageEvent)]
    # The wire said prompt_tokens=10200 with cached_tokens=9000.
    assert usage == [UsageEvent(input_tokens=1200, output_tokens=37, cache_read_tokens=9000)]


def test_request_shape(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="ok"))
    conversation: tuple[Message, ...] = (
        {"role": "user", "content": [{"type": "text", "text": "run both"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running."},
                {"type": "tool_use", "id": "call_1", "name": "execute", "input": {"code": "1/0"}},
                {"type": "tool_use", "id": "call_2", "name": "todos", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "(both finished)"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": "ZeroDivisionError: division by zero",
                    "is_error": True,
                    "name": "execute",
                    "outcome": "error",
                },
                {"type": "tool_result", "tool_use_id": "call_2", "content": "[]", "is_error": False},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "call_3", "name": "todos", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_3", "content": "ok", "is_error": False}],
        },
    )
    schema = {"type": "object", "properties": {"code": {"type": "string"}}}
    request = ModelRequest(
        model="gpt-4.1",
        system="STATIC",
        system_dynamic="It is Tuesday.",
        messages=conversation,
        tools=(ToolSpec(name="execute", description="Run Python.", input_schema=schema),),
        max_tokens=321,
        temperature=0.5,
    )
    collect_events(_model(fake_llm), request)
    body = fake_llm.requests[0].body
    assert body["model"] == "gpt-4.1"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 321  # a compatible server, not api.openai.com
    assert body["temperature"] == 0.5
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "execute", "description": "Run Python.", "parameters": schema},
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "STATIC\n\nIt is Tuesday."},
        {"role": "user", "content": "run both"},
        {
            "role": "assistant",
            "content": "Running.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "execute", "arguments": '{"code": "1/0"}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "todos", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "ZeroDivisionError: division by zero"},
        {"role": "tool", "tool_call_id": "call_2", "content": "[]"},
        {"role": "user", "content": "(both finished)"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_3", "type": "function", "function": {"name": "todos", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_3", "content": "ok"},
    ]


def test_openai_itself_gets_max_completion_tokens() -> None:
    params = to_wire(_request(), "gpt-4.1")
    assert params["max_completion_tokens"] == 4096
    assert "max_tokens" not in params
    assert params["messages"][0] == {"role": "system", "content": "You are a test."}


def test_tool_use_round_trip(fake_llm: FakeLLMServer) -> None:
    call = Call(name="execute", input={"code": "x = 1"}, id="call_rt")
    fake_llm.enqueue(Reply(calls=(call,)), Reply(text="Done."))
    model = _model(fake_llm)
    use = next(e for e in collect_events(model, _request()) if isinstance(e, ToolUseEvent))
    assistant: Message = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": dict(use.input)}],
    }
    result: Message = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "1", "is_error": False}],
    }
    events = collect_events(model, _request(USER_HI, assistant, result))
    assert events[-1] == StopEvent(reason="end_turn", raw_reason="stop")
    sent = fake_llm.requests[1].body["messages"]
    assert sent[2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_rt",
                    "type": "function",
                    "function": {"name": "execute", "arguments": '{"code": "x = 1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_rt", "content": "1"},
    ]


@pytest.mark.parametrize(
    ("reply", "reason", "raw"),
    [
        (Reply(text="cut", stop="max_tokens"), "max_tokens", "length"),
        (Reply(text="no", stop="refusal"), "refusal", "content_filter"),
        (Reply(text="odd", stop="other"), "other", "function_call"),
    ],
)
def test_finish_reasons(fake_llm: FakeLLMServer, reply: Reply, reason: str, raw: str) -> None:
    fake_llm.enqueue(reply)
    assert collect_events(_model(fake_llm), _request())[-1] == StopEvent(reason=reason, raw_reason=raw)


def test_tool_call_finished_with_stop_is_tool_use(fake_llm: FakeLLMServer) -> None:
    head = {"tool_calls": [{"index": 0, "type": "function", "function": {"name": "todos", "arguments": ""}}]}
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    fake_llm.enqueue(Raw(events=[_chunk(head), _chunk({}, finish="stop"), _chunk(usage=usage)]))
    events = collect_events(_model(fake_llm), _request())
    use = events[0]
    assert isinstance(use, ToolUseEvent)
    assert use.name == "todos"
    assert use.input == {}
    assert use.id.startswith("call_")  # the server sent none; one is made up so the result can refer to it
    assert events[1] == UsageEvent(input_tokens=10, output_tokens=2)
    assert events[2] == StopEvent(reason="tool_use", raw_reason="stop")


def test_missing_usage_is_zero_and_logged(fake_llm: FakeLLMServer, caplog: pytest.LogCaptureFixture) -> None:
    fake_llm.enqueue(Raw(events=[_chunk({"content": "hi"}), _chunk({}, finish="stop")]))
    with caplog.at_level(logging.WARNING, logger="neuralis_jupyter.providers.openai"):
        events = collect_events(_model(fake_llm), _request())
    assert events[-2] == UsageEvent()
    assert "sent no usage" in caplog.text


def test_truncated_stream_fails(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Raw(events=[_chunk({"content": "hi"})]))
    with pytest.raises(ModelCallFailed, match="without a finish_reason"):
        collect_events(_model(fake_llm), _request())


@pytest.mark.parametrize(
    ("status", "message"), [(429, "Rate limit reached"), (500, "The server had an error")]
)
def test_http_errors_become_model_call_failed(fake_llm: FakeLLMServer, status: int, message: str) -> None:
    fake_llm.enqueue(Fail(status, message))
    with pytest.raises(ModelCallFailed) as info:
        collect_events(_model(fake_llm), _request())
    assert info.value.status == status
    assert info.value.provider == "openai"
    assert str(info.value) == f"openai request failed ({status}): {message}"


def test_error_chunk_mid_stream(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(
        Raw(events=[_chunk({"content": "par"}), {"error": {"message": "stream broke", "type": "x"}}])
    )
    with pytest.raises(ModelCallFailed, match="stream broke"):
        collect_events(_model(fake_llm), _request())


def test_model_identity() -> None:
    model = OpenAIModel("llama3.2", api_key="sk-secret", base_url="http://127.0.0.1:11434/v1")
    assert (model.provider, model.model_id, model.api_model_id) == ("openai", "llama3.2", "llama3.2")
    assert "sk-secret" not in repr(model)
