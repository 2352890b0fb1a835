"""Record a run against the fake server, then replay it with the server gone."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from neuralis_jupyter.providers.anthropic import AnthropicModel
from neuralis_jupyter.providers.cassette import Cassette, CassetteModel, cassette_path_for
from neuralis_jupyter.providers.errors import CassetteMismatch
from neuralis_jupyter.providers.scripted import Call, Reply
from neuralis_jupyter.runtime import AgentRuntime, Tool, ToolOutput, ToolRegistry, TurnRequest
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store
from neuralis_jupyter.testing import FakeLLMServer

from .helpers import OBJ, session

SCRIPT = [
    Reply(
        text="Let me check.",
        calls=(Call(name="clock", id="c1"), Call(name="double", input={"n": 21}, id="d1")),
    ),
    Reply(text="It is tick 1 and 21 doubled is 42."),
]


def tools(ticks):
    async def clock(args, ctx):
        return ToolOutput(content=f"tick {next(ticks)}")

    async def double(args, ctx):
        return ToolOutput(content=str(args["n"] * 2))

    return ToolRegistry.of(
        [
            # A clock is not deterministic: replay must return what it said when recorded.
            Tool(
                name="clock",
                description="now",
                input_schema=OBJ,
                handler=clock,
                access="read",
                package_id=AGENT_CORE_ID,
                deterministic=False,
            ),
            Tool(
                name="double",
                description="x2",
                input_schema=OBJ,
                handler=double,
                access="read",
                package_id=AGENT_CORE_ID,
            ),
        ]
    )


def turn(store, model, cassette, registry, message="What time is it, and what is 21 doubled?"):
    conv = store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
    cassette.volatile_value(conv.id, "conversation_id")
    request = TurnRequest(
        session=session(), conversation=conv, model=model, tools=registry, message=message, tape=cassette
    )
    settled = asyncio.run(AgentRuntime(store).run(request))
    return settled, conv


def strip(rows):
    return [{k: v for k, v in r.items() if k not in ("ts", "request_id")} for r in rows]


@pytest.fixture
def recorded(tmp_path):
    store = Store.open(tmp_path / "home")
    path = cassette_path_for(tmp_path / "analysis.ipynb")
    with FakeLLMServer(SCRIPT) as server:
        live = AnthropicModel(
            "claude-haiku-4-5", api_key="sk-test", base_url=server.anthropic_base_url, max_retries=0
        )
        cassette = Cassette(path, "record")
        settled, conv = turn(store, CassetteModel(cassette, live), cassette, tools(itertools.count(1)))
        server.assert_complete()
    assert settled.status == "completed"
    return store, path, conv


def test_replay_gives_the_identical_transcript(recorded):
    store, path, original = recorded
    assert path.name == "analysis.ipynb.cassette.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["header", "step", "tool_result", "tool_result", "step"]
    assert "sk-test" not in path.read_text()

    cassette = Cassette(path, "replay")
    model = CassetteModel(cassette)
    assert (model.provider, model.model_id) == ("anthropic", "claude-haiku-4-5")
    # The clock now says something else; replay must not ask it.
    settled, replayed = turn(store, model, cassette, tools(itertools.count(1000)))
    assert settled.status == "completed"
    assert settled.text == "It is tick 1 and 21 doubled is 42."
    cassette.assert_complete()
    assert replayed.id != original.id
    assert strip(replayed.read_all()) == strip(original.read_all())
    results = {
        b["tool_use_id"]: b["content"]
        for r in replayed.read_all()
        if r["role"] == "tool"
        for b in r["content"]
    }
    assert results == {"c1": "tick 1", "d1": "42"}
    # Usage is recorded for the replayed run too, under the recorded model.
    assert [u.model for u in store.usage.list("default")] == ["claude-haiku-4-5", "claude-haiku-4-5"]


def test_a_changed_prompt_fails_with_a_diff(recorded):
    store, path, _ = recorded
    cassette = Cassette(path, "replay")
    with pytest.raises(CassetteMismatch) as info:
        turn(store, CassetteModel(cassette), cassette, tools(itertools.count(1)), message="What is 2 + 2?")
    err = info.value
    assert err.step == 1
    assert "-" in err.diff
    assert "+" in err.diff
    assert any(line.startswith("-") and "21 doubled" in line for line in err.diff.splitlines())
    assert any(line.startswith("+") and "2 + 2" in line for line in err.diff.splitlines())
    assert str(path) in str(err)
    assert "--record" in str(err)


def test_a_run_longer_than_the_recording_fails(recorded):
    store, path, _ = recorded
    cassette = Cassette(path, "replay")
    turn(store, CassetteModel(cassette), cassette, tools(itertools.count(1)))
    with pytest.raises(CassetteMismatch, match="holds 2 model calls and the run asked for call 3"):
        turn(store, CassetteModel(cassette), cassette, tools(itertools.count(1)))


def test_a_run_shorter_than_the_recording_is_reported(recorded):
    _, path, _ = recorded
    cassette = Cassette(path, "replay")
    with pytest.raises(CassetteMismatch, match="ended after 0 model calls but 2 were recorded"):
        cassette.assert_complete()


def test_missing_and_foreign_cassettes(tmp_path):
    with pytest.raises(FileNotFoundError, match="--record"):
        Cassette(tmp_path / "nope.jsonl", "replay")
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"type": "header", "format": "vcr"}\n')
    with pytest.raises(ValueError, match="re-record"):
        Cassette(foreign, "replay")
