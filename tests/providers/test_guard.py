"""The loopback guard: no model request leaves the machine while NEURALIS_MODEL_REQUESTS=loopback."""

from __future__ import annotations

import asyncio
import socket

import anthropic
import httpx2
import pytest

from neuralis_jupyter.providers import (
    AnthropicModel,
    Message,
    ModelRequest,
    ModelRequestBlocked,
    OpenAIModel,
)
from neuralis_jupyter.providers.guard import (
    GUARD_ENV,
    blocked_cause,
    build_http_client,
    check_url,
    guard_active,
    is_loopback_host,
)
from neuralis_jupyter.testing import FakeLLMServer, Reply, collect_events

BLOCKED = [
    "http://example.com",
    "https://api.anthropic.com",
    "https://api.openai.com/v1",
    "http://10.0.0.1:8080/v1",
    "http://192.168.1.20",
    "http://[2001:db8::1]:80/v1",
    "http://127.0.0.1.nip.io",  # resolves to loopback, but that is not ours to trust
    "http://localhost.example.com",
    "http://0.0.0.0:8000",
    "http://[::]:8000",
]
ALLOWED = [
    "http://127.0.0.1:1234",
    "http://127.8.9.10/v1",
    "http://[::1]:8000",
    "http://localhost:11434/v1",
    "http://LOCALHOST",
    "http://[::ffff:127.0.0.1]:80",
]
USER_HI: Message = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
REQUEST = ModelRequest(model="m", system="s", messages=(USER_HI,))


def test_the_test_suite_runs_guarded() -> None:
    assert guard_active()


@pytest.mark.parametrize("url", BLOCKED)
def test_non_loopback_urls_are_blocked(url: str) -> None:
    with pytest.raises(ModelRequestBlocked) as info:
        check_url(url)
    assert info.value.url == url
    assert "NEURALIS_MODEL_REQUESTS=loopback" in str(info.value)


@pytest.mark.parametrize("url", ALLOWED)
def test_loopback_urls_are_allowed(url: str) -> None:
    check_url(url)


def test_guard_off_blocks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GUARD_ENV)
    for url in BLOCKED:
        check_url(url)


@pytest.mark.parametrize(
    ("host", "loopback"), [("127.0.0.1", True), ("::1", True), ("[::1]", True), ("10.1.1.1", False)]
)
def test_is_loopback_host(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every DNS lookup or connect the process tries from now on, refused and recorded."""
    seen: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        seen.append(args[-1] if isinstance(args[0], socket.socket) else args[0])
        raise OSError("recorded and refused")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return seen


def _post(url: str) -> None:
    async def send() -> None:
        async with build_http_client(timeout=5) as client:
            await client.post(url, json={})

    asyncio.run(send())


@pytest.mark.parametrize(
    "url", ["http://example.com/v1/messages", "http://192.0.2.55:8080/v1/chat/completions"]
)
def test_http_client_refuses_before_any_lookup_or_connect(attempts: list[object], url: str) -> None:
    with pytest.raises(ModelRequestBlocked):
        _post(url)
    assert attempts == []


def test_without_the_guard_the_same_request_would_connect(
    attempts: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(GUARD_ENV)
    with pytest.raises(httpx2.ConnectError):
        _post("http://192.0.2.55:8080/v1/chat/completions")
    assert attempts  # the recorder does see a real attempt


def test_http_client_allows_loopback(fake_llm: FakeLLMServer) -> None:
    async def send() -> int:
        async with build_http_client(timeout=5) as client:
            response = await client.get(fake_llm.url + "/health")
            return response.status_code

    assert asyncio.run(send()) == 404
    fake_llm.errors.clear()  # the GET was only a probe


@pytest.mark.parametrize("base_url", [None, "http://example.com", "https://10.0.0.1/"])
def test_anthropic_model_is_blocked(base_url: str | None) -> None:
    model = AnthropicModel("claude-haiku-4-5", api_key="k", base_url=base_url, max_retries=0)
    with pytest.raises(ModelRequestBlocked):
        collect_events(model, REQUEST)


@pytest.mark.parametrize("base_url", [None, "http://example.com/v1"])
def test_openai_model_is_blocked(base_url: str | None) -> None:
    model = OpenAIModel("gpt-4.1", api_key="k", base_url=base_url, max_retries=0)
    with pytest.raises(ModelRequestBlocked):
        collect_events(model, REQUEST)


def test_models_reach_the_fake_server(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply(text="a"), Reply(text="b"))
    collect_events(
        AnthropicModel("claude-haiku-4-5", api_key="k", base_url=fake_llm.anthropic_base_url), REQUEST
    )
    collect_events(OpenAIModel("gpt-4.1", api_key="k", base_url=fake_llm.openai_base_url), REQUEST)
    fake_llm.assert_complete()


def test_refusal_is_found_behind_the_sdk_wrapper() -> None:
    """The Anthropic SDK wraps whatever the HTTP client raises in APIConnectionError."""
    request = httpx2.Request("POST", "http://example.com/v1/messages")
    refusal = ModelRequestBlocked("http://example.com/v1/messages")
    wrapped = anthropic.APIConnectionError(request=request)
    wrapped.__cause__ = refusal  # what `raise ... from err` in the SDK leaves behind
    assert blocked_cause(wrapped) is refusal
    assert blocked_cause(ValueError("unrelated")) is None
