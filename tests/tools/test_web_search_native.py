"""Native web search: the conversation's own Anthropic model with Anthropic's server-side search tool,
through the fake LLM server; what it costs is charged to the turn.

The last test runs a real turn: the search is charged through the runtime's usage hook,
``ToolContext.record_usage(provider, model, usage)``, to the turn's own usage row.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from neuralis_jupyter.providers.anthropic import AnthropicModel
from neuralis_jupyter.providers.scripted import Call, Reply
from neuralis_jupyter.runtime import AgentRuntime, Tool, ToolRegistry
from neuralis_jupyter.runtime.context import TurnRequest
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.testing import Fail, Raw
from neuralis_jupyter.tools import web_search
from tests.runtime.helpers import RecordingHook

from .test_web_search import no_search_keys, searcher  # noqa: F401
from .webfixtures import bench_fixture, call  # noqa: F401


def native_events(model: str = "claude-haiku-4-5") -> Raw:
    result = [
        {
            "type": "web_search_result",
            "url": "https://n.example/a",
            "title": "Alpha",
            "encrypted_content": "e1",
            "page_age": "April 30, 2025",
        },
        {
            "type": "web_search_result",
            "url": "https://n.example/b",
            "title": "Beta",
            "encrypted_content": "e2",
            "page_age": None,
        },
    ]
    citation = {
        "type": "web_search_result_location",
        "url": "https://n.example/a",
        "title": "Alpha",
        "cited_text": "Alpha pins the address.",
        "encrypted_index": "i1",
    }
    start_usage = {
        "input_tokens": 900,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    end_usage = {"output_tokens": 60, "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}}
    message = {
        "id": "msg_n",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    return Raw(
        events=[
            {"type": "message_start", "message": message},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {
                    "type": "server_tool_use",
                    "id": "srvtoolu_1",
                    "name": "web_search",
                    "input": {},
                },
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"query": "pinning"}'},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_1",
                    "content": result,
                },
            },
            {"type": "content_block_stop", "index": 1},
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "text", "text": "", "citations": []},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "citations_delta", "citation": citation},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "text_delta", "text": "Alpha says so."},
            },
            {"type": "content_block_stop", "index": 2},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": end_usage,
            },
            {"type": "message_stop"},
        ]
    )


def anthropic(fake_llm) -> AnthropicModel:
    return AnthropicModel(
        "claude-haiku-4-5", api_key="sk-test", base_url=fake_llm.anthropic_base_url, max_retries=0
    )


def test_native_search_runs_on_the_conversation_model_and_charges_the_turn(bench, fake_llm):
    fake_llm.enqueue(native_events())
    ctx = bench.context(model=anthropic(fake_llm))
    out = call(searcher(bench), ctx, query="pinning", mode="research", max_results=5)
    assert out.outcome == "ok", out.content
    assert out.data["provider"] == "native"
    assert out.data["results"] == [
        {
            "title": "Alpha",
            "url": "https://n.example/a",
            "snippet": "Alpha pins the address.",
            "publishedAt": "2025-04-30",
        },
        {"title": "Beta", "url": "https://n.example/b", "snippet": ""},
    ]
    body = fake_llm.requests[0].body
    assert body["tools"] == [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]
    assert body["model"] == "claude-haiku-4-5"
    assert "pinning" in body["messages"][0]["content"]
    ((provider, model, usage),) = ctx.charged
    assert (provider, model) == ("anthropic", "claude-haiku-4-5")
    assert (usage.input_tokens, usage.output_tokens) == (900, 60)
    assert dict(usage.server_tool_uses) == {"web_search": 1}
    (part,) = ctx.meter.partitions
    assert (part.input_tokens, part.output_tokens) == (900, 60)
    assert part.cost_usd > 0
    fake_llm.assert_complete()


def test_a_quick_native_search_runs_one_search(bench, fake_llm):
    fake_llm.enqueue(native_events())
    call(searcher(bench), bench.context(model=anthropic(fake_llm)), query="pinning", provider="native")
    assert fake_llm.requests[0].body["tools"][0]["max_uses"] == 1


def test_a_failed_native_search_is_still_charged_and_reported(bench, fake_llm):
    raw = native_events()
    error = {"type": "web_search_tool_result_error", "error_code": "too_many_requests"}
    events = [dict(e) for e in raw.events]
    events[4] = {**events[4], "content_block": {**events[4]["content_block"], "content": error}}
    events = [e for e in events if e.get("delta", {}).get("type") != "citations_delta"]
    fake_llm.enqueue(Raw(events=events), Fail(529, "overloaded"))
    ctx = bench.context(model=anthropic(fake_llm))
    handler = searcher(bench)
    out = call(handler, ctx, query="pinning", provider="native")
    assert out.is_error
    assert "native: native search failed: too_many_requests" in out.content
    ((_, _, usage),) = ctx.charged
    assert dict(usage.server_tool_uses) == {"web_search": 1}
    again = call(handler, ctx, query="pinning", provider="native")
    assert "overloaded" in again.content
    assert len(ctx.charged) == 1, "a call that failed outright reported no usage"


SCHEMA = Path(__file__).parents[2] / "packages" / "agent-core" / "tools" / "web_search.json"


def test_native_search_usage_lands_in_the_turns_usage(bench, fake_llm):
    decl = json.loads(SCHEMA.read_text())
    handler = web_search.handlers(bench.env())["web_search"]
    tool = Tool(
        name=decl["name"],
        description=decl["description"],
        input_schema=decl["input_schema"],
        handler=handler,
        access="read",
        effects=frozenset(decl["x-neuralis"]["effects"]),
        deterministic=False,
        package_id=AGENT_CORE_ID,
    )
    fake_llm.enqueue(
        Reply(
            calls=(Call(name="web_search", input={"query": "pinning"}),), input_tokens=100, output_tokens=20
        ),
        native_events(),
        Reply(text="Done.", input_tokens=200, output_tokens=10),
    )
    conversation = bench.store.conversations.create(
        project_id="default", agent_id="assistant", user_id="alice"
    )
    request = TurnRequest(
        session=bench.session,
        conversation=conversation,
        model=anthropic(fake_llm),
        tools=ToolRegistry.of([tool]),
        message="search it",
        permission=RecordingHook(allow=True),
    )
    settled = asyncio.run(AgentRuntime(bench.store).run(request))
    fake_llm.assert_complete()
    assert settled.status == "completed"
    (usage,) = settled.usage
    assert (usage.input_tokens, usage.output_tokens) == (100 + 900 + 200, 20 + 60 + 10)
    assert usage.steps == 2, "the search is charged to the turn, not counted as a step"
    (row,) = bench.store.usage.list("default", conversation_id=conversation.id)
    assert (row.input_tokens, row.steps) == (1200, 2)
