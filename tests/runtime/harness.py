"""One scenario, three ways to answer it: the scripted model, and the real anthropic and openai SDKs
talking to the loopback fake server. Tests take the ``harness`` fixture and run on all three."""

from __future__ import annotations

from typing import Any

from neuralis_jupyter.providers.anthropic import AnthropicModel
from neuralis_jupyter.providers.catalog import load_catalog
from neuralis_jupyter.providers.openai import OpenAIModel
from neuralis_jupyter.providers.scripted import Reply, ScriptedModel
from neuralis_jupyter.testing import FakeLLMServer

#: The model each provider runs as, and therefore the catalog prices its usage is charged at.
MODELS = {"scripted": "demo", "anthropic": "claude-haiku-4-5", "openai": "gpt-5.4-mini"}


class Harness:
    def __init__(self, provider: str, server: FakeLLMServer | None) -> None:
        self.provider = provider
        self.server = server
        self._scripted = ScriptedModel() if server is None else None
        model_id = MODELS[provider]
        if provider == "anthropic":
            assert server is not None
            self.model: Any = AnthropicModel(
                model_id, api_key="sk-test", base_url=server.anthropic_base_url, max_retries=0
            )
        elif provider == "openai":
            assert server is not None
            self.model = OpenAIModel(
                model_id, api_key="sk-test", base_url=server.openai_base_url, max_retries=0
            )
        else:
            self.model = self._scripted
        self.prices = load_catalog().get(provider, model_id).prices

    def enqueue(self, *replies: Reply) -> Harness:
        if self._scripted is not None:
            self._scripted.enqueue(*replies)
        else:
            assert self.server is not None
            self.server.enqueue(*replies)
        return self

    @property
    def request_count(self) -> int:
        if self._scripted is not None:
            return len(self._scripted.requests)
        assert self.server is not None
        return len(self.server.requests)

    def tool_result_ids(self, index: int) -> list[str]:
        """The tool results the ``index``-th model request carried, in order, as the wire had them."""
        if self._scripted is not None:
            last = self._scripted.requests[index].messages[-1]
            return [b["tool_use_id"] for b in last["content"] if b["type"] == "tool_result"]
        assert self.server is not None
        body = self.server.requests[index].body
        if self.provider == "anthropic":
            last = body["messages"][-1]
            return [b["tool_use_id"] for b in last["content"] if b["type"] == "tool_result"]
        ids: list[str] = []
        for message in reversed(body["messages"]):
            if message["role"] != "tool":
                break
            ids.insert(0, message["tool_call_id"])
        return ids

    def assert_complete(self) -> None:
        if self._scripted is not None:
            self._scripted.assert_complete()
        else:
            assert self.server is not None
            self.server.assert_complete()
