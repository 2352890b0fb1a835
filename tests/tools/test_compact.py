"""``compact_history``: the prompt changes (from the next step of the same turn, and in the next turn),
messages.jsonl does not; show-full restores; a missing target fails the whole call; #seq rows."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

from neuralis_jupyter._resources import builtin_package_dir
from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.packages import PackageSet
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, Tool, ToolOutput, ToolRegistry, TurnRequest
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store
from neuralis_jupyter.tools import compact
from neuralis_jupyter.tools.compact import apply_compaction, history_transform, set_compaction_mode
from neuralis_jupyter.tools.environment import ToolEnvironment

from ..runtime.helpers import session

BIG = "line of search output\n" * 200
NOTES = "alpha beta gamma delta epsilon"


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


@pytest.fixture
def conv(store):
    return store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")


def registry(store):
    env = ToolEnvironment(settings=NeuralisSettings(), store=store, packages=PackageSet([]))
    spec = json.loads((builtin_package_dir("agent-core") / "tools" / "compact_history.json").read_text())
    replies = {"f1": BIG, "f2": NOTES}

    async def fetch(args, ctx):
        return ToolOutput(content=replies[ctx.session.tool_use_id])

    obj = {"type": "object", "properties": {}, "additionalProperties": True}
    return ToolRegistry.of(
        [
            Tool(
                name="compact_history",
                description=spec["description"],
                input_schema=spec["input_schema"],
                handler=compact.handlers(env)["compact_history"],
                access=spec["x-neuralis"]["access"],
                intrinsic=True,
                package_id=AGENT_CORE_ID,
            ),
            Tool(
                name="fetch",
                description="fetch",
                input_schema=obj,
                handler=fetch,
                access="read",
                package_id=AGENT_CORE_ID,
            ),
        ]
    )


def run(store, conv, *replies, message="go"):
    model = ScriptedModel(replies)

    async def go():
        view = await history_transform(conv)
        request = TurnRequest(
            session=session(),
            conversation=conv,
            model=model,
            tools=registry(store),
            message=message,
            history=view,
        )
        return await AgentRuntime(store).run(request)

    settled = asyncio.run(go())
    assert settled.status == "completed"
    model.assert_complete()
    return model


def compact_call(*actions, id="c1"):
    return Reply(
        calls=(Call(name="compact_history", input={"actions": list(actions), "reason": "noise"}, id=id),)
    )


def results(request):
    """tool_use_id -> the content the model was shown."""
    return {
        b["tool_use_id"]: b["content"]
        for m in request.messages
        if m["role"] == "user"
        for b in m["content"]
        if b["type"] == "tool_result"
    }


def texts(request):
    return [b["text"] for m in request.messages for b in m["content"] if b["type"] == "text"]


def fetched(store, conv):
    return run(
        store,
        conv,
        Reply(text="Fetching.", calls=(Call(name="fetch", id="f1"), Call(name="fetch", id="f2"))),
        Reply(text="Got them."),
        message="Search the logs for the regression.",
    )


def test_the_prompt_changes_and_the_transcript_does_not(store, conv):
    fetched(store, conv)
    jsonl = conv.path / "messages.jsonl"
    before = jsonl.read_bytes()
    model = run(
        store,
        conv,
        compact_call(
            {"target": {"tool_use_id": "f1"}, "action": "remove"},
            {"target": {"tool_use_id": "f2"}, "action": "truncate", "max_chars": 11},
        ),
        Reply(text="Compacted."),
    )
    assert results(model.requests[0]) == {"f1": BIG, "f2": NOTES}
    shown = results(model.requests[1])  # the next step of the SAME turn
    assert shown["f1"] == f"[removed by compact_history: {len(BIG)} chars]"
    assert shown["f2"] == f"alpha beta \n[truncated by compact_history: kept 11 of {len(NOTES)} chars]"
    assert shown["c1"] == "success: compacted ⟦f1⟧ (removed), ⟦f2⟧ (truncated to 11 chars). " + (
        "The transcript keeps the originals; the user can show them."
    )
    after = jsonl.read_bytes()
    assert after.startswith(before)  # the turn only appended its own rows
    assert {
        b["tool_use_id"]: b["content"] for r in conv.read_all() if r["role"] == "tool" for b in r["content"]
    }["f1"] == BIG
    # The next turn applies it again, from meta.json.
    model = run(store, conv, Reply(text="Still compact."), message="Next?")
    assert results(model.requests[0])["f1"].startswith("[removed by compact_history")
    stored = json.loads((conv.path / "meta.json").read_text())["compaction"]["entries"]
    assert [(e["target"], e["action"], e["by"]) for e in stored] == [
        ({"tool_use_id": "f1"}, "remove", "c1"),
        ({"tool_use_id": "f2"}, "truncate", "c1"),
    ]
    # Show full restores the originals, without a byte of messages.jsonl changing.
    settled = jsonl.read_bytes()
    set_compaction_mode(conv, "show_full")
    model = run(store, conv, Reply(text="Full."), message="Show me.")
    assert results(model.requests[0])["f1"] == BIG
    set_compaction_mode(conv, "apply")
    assert jsonl.read_bytes().startswith(settled)
    assert asyncio.run(history_transform(conv)).mode == "apply"


def test_a_user_row_by_seq_is_summarized(store, conv):
    fetched(store, conv)
    assert conv.read_all()[0]["seq"] == 1
    model = run(
        store,
        conv,
        compact_call(
            {"target": {"message_seq": 1}, "action": "summarize", "summary": "user asked for a search"}
        ),
        Reply(text="ok"),
    )
    assert texts(model.requests[0])[0] == "Search the logs for the regression."
    assert texts(model.requests[1])[0] == "[summarized by compact_history] user asked for a search"
    assert conv.read_all()[0]["content"][0]["text"] == "Search the logs for the regression."


def test_a_missing_target_fails_the_whole_call(store, conv):
    fetched(store, conv)
    model = run(
        store,
        conv,
        compact_call(
            {"target": {"tool_use_id": "f1"}, "action": "remove"},
            {"target": {"tool_use_id": "toolu_gone"}, "action": "remove"},
            {"target": {"message_seq": 3}, "action": "remove"},
            {"target": {"message_seq": 99}, "action": "truncate", "max_chars": 5},
            {"target": {"message_seq": 1}, "action": "summarize"},
        ),
        Reply(text="ok"),
    )
    answer = results(model.requests[1])
    assert answer["f1"] == BIG  # nothing was applied
    assert answer["c1"] == (
        "compact_history refused, nothing was compacted: no tool output ⟦toolu_gone⟧ in this conversation; "
        "#3 holds tool outputs; target them by tool_use_id (⟦f1⟧, ⟦f2⟧); no row #99 in this conversation; "
        "summarize #1 needs a summary"
    )
    assert "compaction" not in json.loads((conv.path / "meta.json").read_text())


def test_a_later_action_on_a_target_replaces_the_earlier(store, conv):
    fetched(store, conv)
    run(store, conv, compact_call({"target": {"tool_use_id": "f1"}, "action": "remove"}), Reply(text="a"))
    model = run(
        store,
        conv,
        compact_call(
            {"target": {"tool_use_id": "f1"}, "action": "summarize", "summary": "200 log lines"}, id="c2"
        ),
        Reply(text="b"),
    )
    assert results(model.requests[1])["f1"] == "[summarized by compact_history] 200 log lines"
    assert len(json.loads((conv.path / "meta.json").read_text())["compaction"]["entries"]) == 1


def test_apply_compaction_is_pure():
    rows = [
        {"seq": 1, "role": "user", "content": [{"type": "text", "text": "hello there"}]},
        {
            "seq": 2,
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "a", "name": "fetch", "input": {}},
                {"type": "tool_use", "id": "b", "name": "fetch", "input": {}},
            ],
        },
        {
            "seq": 3,
            "role": "tool",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "A" * 50, "is_error": False},
                {"type": "tool_result", "tool_use_id": "b", "content": "short", "is_error": False},
            ],
        },
    ]
    original = copy.deepcopy(rows)
    instructions = [
        {"target": {"tool_use_id": "a"}, "action": "truncate", "max_chars": 4},
        {"target": {"tool_use_id": "b"}, "action": "truncate", "max_chars": 40},
        {"target": {"message_seq": 2}, "action": "remove"},
    ]
    shown = apply_compaction(rows, instructions)
    assert rows == original
    assert shown[0] is rows[0]
    assert shown[1]["content"] == [
        {"type": "text", "text": "[removed by compact_history: 8 chars]"},
        *rows[1]["content"][1:],  # the calls stay, so every result still has its call
    ]
    assert shown[2]["content"][0]["content"] == "AAAA\n[truncated by compact_history: kept 4 of 50 chars]"
    assert shown[2]["content"][1]["content"] == "short"
    assert apply_compaction(rows, instructions, mode="show_full") == original
    with pytest.raises(ValueError, match="compaction mode"):
        set_compaction_mode(None, "hide")
