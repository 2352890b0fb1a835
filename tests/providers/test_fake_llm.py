"""The fake LLM server, through the real SDKs and through raw HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import anthropic
import httpx2
import openai
import pytest

from neuralis_jupyter.providers.scripted import estimate_tokens
from neuralis_jupyter.testing import Call, Fail, FakeLLMServer, RecordedRequest, Reply, load_script

HAIKU = "claude-haiku-4-5"


def _post(url: str, body: dict) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def _sse_events(data: bytes) -> list[tuple[str, dict]]:
    events = []
    for block in data.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def _anthropic(server: FakeLLMServer, max_retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="sk-test",
        base_url=server.anthropic_base_url,
        max_retries=max_retries,
        http_client=httpx2.Client(),
    )


def _openai(server: FakeLLMServer, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-test",
        base_url=server.openai_base_url,
        max_retries=max_retries,
        http_client=httpx2.Client(),
    )


def test_anthropic_stream_has_the_real_event_sequence(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(
        Reply(text="hi there", chunk=3, calls=(Call(name="execute", input={"code": "print(1 + 1)"}),))
    )
    status, data = _post(fake_llm.url + "/v1/messages", {"model": HAIKU, "stream": True, "messages": []})
    assert status == 200
    events = _sse_events(data)
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        *["content_block_delta"] * 4,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(name == doc["type"] for name, doc in events)
    fragments = [
        doc["delta"]["partial_json"] for _, doc in events if doc.get("index") == 1 and "delta" in doc
    ]
    assert fragments[0] == ""
    assert len([f for f in fragments if f]) == 3
    assert json.loads("".join(fragments)) == {"code": "print(1 + 1)"}
    assert events[0][1]["message"]["model"] == HAIKU


def test_anthropic_non_streaming_message_through_the_sdk(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(
        Reply(
            text="done",
            calls=(Call(name="todos", input={"items": []}, id="toolu_1"),),
            input_tokens=11,
            output_tokens=4,
            cache_read_tokens=5,
            cache_write_tokens=2,
        )
    )
    with _anthropic(fake_llm) as client:
        message = client.messages.create(
            model=HAIKU, max_tokens=100, messages=[{"role": "user", "content": "x"}]
        )
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"items": []}
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == 11
    assert message.usage.output_tokens == 4
    assert message.usage.cache_read_input_tokens == 5
    assert message.usage.cache_creation_input_tokens == 2
    fake_llm.assert_complete()


def test_openai_non_streaming_completion_through_the_sdk(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="ok", input_tokens=30, output_tokens=3, cache_read_tokens=10))
    with _openai(fake_llm) as client:
        completion = client.chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "x"}]
        )
    assert completion.choices[0].message.content == "ok"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 40  # OpenAI counts cached tokens as prompt tokens
    assert completion.usage.prompt_tokens_details.cached_tokens == 10
    assert completion.usage.total_tokens == 43


def test_openai_stream_sends_usage_only_when_asked(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="a"), Reply(text="b"))
    with _openai(fake_llm) as client:
        without = list(client.chat.completions.create(model="m", messages=[], stream=True))
        with_usage = list(
            client.chat.completions.create(
                model="m", messages=[], stream=True, stream_options={"include_usage": True}
            )
        )
    assert all(chunk.usage is None for chunk in without)
    assert with_usage[-1].choices == []
    assert with_usage[-1].usage is not None
    assert all(chunk.usage is None for chunk in with_usage[:-1])


def test_fail_raises_the_sdk_error_and_retries_do_not_eat_the_script(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Fail(429, "slow down"), Reply(text="after"))
    # Default retries on purpose: x-should-retry: false keeps it to one request.
    with _anthropic(fake_llm, max_retries=2) as client, pytest.raises(anthropic.RateLimitError) as info:
        client.messages.create(model=HAIKU, max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert info.value.api_message == "slow down"
    assert info.value.type == "rate_limit_error"
    assert len(fake_llm.requests) == 1
    assert fake_llm.remaining == 1
    fake_llm.enqueue(Fail(500, "boom"))
    with _openai(fake_llm, max_retries=2) as client:
        assert client.chat.completions.create(model="m", messages=[]).choices[0].message.content == "after"
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="m", messages=[])
    fake_llm.assert_complete()


def test_fail_with_retry_lets_the_sdk_retry(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Fail(529, "overloaded", retry=True), Reply(text="second time"))
    with _anthropic(fake_llm, max_retries=1) as client:
        message = client.messages.create(
            model=HAIKU, max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert message.content[0].text == "second time"
    assert [r.headers["x-stainless-retry-count"] for r in fake_llm.requests] == ["0", "1"]


def test_empty_script_answers_500_and_is_remembered() -> None:
    with FakeLLMServer() as server:
        status, data = _post(server.url + "/v1/chat/completions", {"model": "m"})
        assert status == 500
        assert "found the script empty" in json.loads(data)["error"]["message"]
        assert len(server.errors) == 1
        with pytest.raises(AssertionError, match="unexpected requests"):
            server.assert_complete()


def test_unknown_path_is_an_error() -> None:
    with FakeLLMServer() as server:
        status, _ = _post(server.url + "/v1/completions", {})
        assert status == 404
        assert "POST /v1/completions" in server.errors[0]


def test_assert_complete_reports_unused_replies() -> None:
    with (
        FakeLLMServer([Reply(text="never asked")]) as server,
        pytest.raises(AssertionError, match="1 scripted"),
    ):
        server.assert_complete()


def test_callable_entries_see_the_recorded_request(fake_llm: FakeLLMServer) -> None:
    seen: list[RecordedRequest] = []

    def answer(request: RecordedRequest) -> Reply | Fail:
        seen.append(request)
        return Reply(text=f"you said {request.body['messages'][-1]['content']}")

    fake_llm.enqueue(answer, lambda request: Fail(400, "no"))
    with _openai(fake_llm) as client:
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=[])
    assert reply.choices[0].message.content == "you said hello"
    assert seen == fake_llm.requests[:1]


def test_requests_are_recorded_with_secrets_redacted(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="a"), Reply(text="b"))
    with _anthropic(fake_llm) as client:
        client.messages.create(model=HAIKU, max_tokens=10, messages=[{"role": "user", "content": "x"}])
    with _openai(fake_llm) as client:
        client.chat.completions.create(model="m", messages=[])
    first, second = fake_llm.requests
    assert (first.provider, first.path, second.provider, second.path) == (
        "anthropic",
        "/v1/messages",
        "openai",
        "/v1/chat/completions",
    )
    assert first.body["max_tokens"] == 10
    assert not first.stream
    for request in fake_llm.requests:
        assert request.headers["authorization"] == "<redacted>"
        assert "sk-test" not in json.dumps(request.headers)


def test_unset_token_counts_are_deterministic_estimates(fake_llm: FakeLLMServer) -> None:
    reply = Reply(text="twelve chars", calls=(Call(name="t", input={"a": 1}),))
    fake_llm.enqueue(reply, reply)
    with _anthropic(fake_llm) as client:
        for _ in range(2):
            message = client.messages.create(
                model=HAIKU, max_tokens=10, messages=[{"role": "user", "content": "x"}]
            )
            assert message.usage.input_tokens == fake_llm.requests[-1].estimated_input_tokens
            assert message.usage.output_tokens == estimate_tokens('twelve chars{"a": 1}')
    assert fake_llm.requests[0].estimated_input_tokens == fake_llm.requests[1].estimated_input_tokens


def test_close_ends_a_slow_stream_at_once() -> None:
    server = FakeLLMServer([Reply(text="x" * 10, chunk=1, delay=30)]).start()
    with (
        httpx2.Client() as client,
        client.stream("POST", server.url + "/v1/messages", json={"stream": True}) as response,
    ):
        first = next(response.iter_lines())
        assert first == "event: message_start"
        started = time.monotonic()
        server.close()
        assert time.monotonic() - started < 10


def test_load_script_reads_replies_and_failures(tmp_path) -> None:
    path = tmp_path / "script.jsonl"
    path.write_text(
        "# a comment\n"
        '{"text": "hi", "input_tokens": 3, "cache_read_tokens": 1}\n'
        "\n"
        '{"calls": [{"name": "execute", "input": {"code": "1"}}], "stop": "tool_use"}\n'
        '{"status": 429, "message": "slow down"}\n'
    )
    assert load_script(path) == [
        Reply(text="hi", input_tokens=3, cache_read_tokens=1),
        Reply(calls=(Call(name="execute", input={"code": "1"}),), stop="tool_use"),
        Fail(429, "slow down"),
    ]
    path.write_text('{"text": "ok"}\n{"txet": "typo"}\n')
    with pytest.raises(ValueError, match=r"script.jsonl:2: unknown fields \['txet'\]"):
        load_script(path)


def test_command_line_serves_a_script_file(tmp_path) -> None:
    script = tmp_path / "replies.jsonl"
    script.write_text('{"text": "from the file", "input_tokens": 5, "output_tokens": 2}\n')
    command = [
        sys.executable,
        "-m",
        "neuralis_jupyter.testing.fake_llm",
        "--port",
        "0",
        "--script",
        str(script),
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line.startswith("listening on http://127.0.0.1:")
            url = line.removeprefix("listening on ")
            with openai.OpenAI(
                api_key="x", base_url=url + "/v1", max_retries=0, http_client=httpx2.Client()
            ) as client:
                completion = client.chat.completions.create(model="local", messages=[])
            assert completion.choices[0].message.content == "from the file"
            assert completion.usage is not None
            assert completion.usage.prompt_tokens == 5
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_importing_testing_does_not_import_pytest() -> None:
    code = "import sys, neuralis_jupyter.testing; assert 'pytest' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
