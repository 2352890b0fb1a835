"""``delegate``: named-back reasons, the all-refused case, depth, transcripts, never wider than the parent."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import Tool, ToolOutput
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store
from neuralis_jupyter.workbench import Workbench

OBJ = {"type": "object", "properties": {}, "additionalProperties": True}
NARROW_AGENT = """---
name: narrow
description: Looks things up and nothing else.
allowed-tools: [lookup, read_tool_result, delegate]
---
You are {{agentId}}'s narrow helper. Look things up.
"""


@pytest.fixture
def bench(tmp_path):
    pkg = tmp_path / "pkgs" / "helpers"
    (pkg / "agents").mkdir(parents=True)
    (pkg / "neuralis.json").write_text(
        json.dumps({"id": "helpers", "version": "1.0.0", "trust": "trusted", "description": "Helpers."})
    )
    (pkg / "agents" / "narrow.md").write_text(NARROW_AGENT)
    home = tmp_path / "home"
    settings = NeuralisSettings(data_root=str(home), package_roots=[str(tmp_path / "pkgs")])
    bench = Workbench(settings, store=Store.open(home))
    bench.test_env = bench.tool_env  # the environment the native handlers are built with
    return bench


def extra_tools(calls):
    def make(name, access):
        async def handler(args, ctx):
            calls.append((name, ctx.session.delegate_run_id))
            return ToolOutput(content=f"{name} done")

        return Tool(
            name=name,
            description=name,
            input_schema=OBJ,
            handler=handler,
            access=access,
            package_id=AGENT_CORE_ID,
        )

    return [make("lookup", "read"), make("search", "read"), make("write_note", "write")]


def run(bench, model, calls, *, max_depth=None, depth=0):
    """One top-level turn of alice's; ``depth`` starts it as if it were already a sub-agent's."""
    if max_depth is not None:
        # Read when the native handlers are built, on the first turn: set it before that.
        bench.settings.config.DelegateSettings.max_depth = max_depth
    target = bench.target("alice")

    async def go():
        async with bench.turn(target, "do it", model=model) as request:
            tools = request.tools.merge(extra_tools(calls))
            request = replace(request, tools=tools, depth=depth)
            return await bench.runtime.run(request), request

    return asyncio.run(go()), target


def results(conversation):
    return {b["tool_use_id"]: b for r in conversation.read_all() if r["role"] == "tool" for b in r["content"]}


def test_every_reason_is_named_back_and_the_child_never_gets_more(bench):
    calls = []
    model = ScriptedModel(
        [
            Reply(
                calls=(
                    Call(
                        name="delegate",
                        id="d1",
                        input={
                            "task": "look it up",
                            "agent": "narrow",
                            "tools": [
                                "lookup",
                                "functions.LOOKUP",
                                "search",
                                "write_note",
                                "ask_question",
                                "made_up_tool",
                                "read_tool_result",
                            ],
                            "blocked_tools": ["read_tool_result", "no_such_tool"],
                        },
                    ),
                )
            ),
            Reply(calls=(Call(name="lookup", id="c1"), Call(name="write_note", id="c2"))),  # the child
            Reply(text="child summary: found it"),
            Reply(text="parent done"),
        ]
    )
    (settled, _), target = run(bench, model, calls)
    assert settled.status == "completed"
    block = results(target.conversation)["d1"]
    text = block["content"]
    assert text.startswith("child summary: found it")
    assert "search: outside the persona's list" in text
    assert "write_note: not in the child's catalog" in text  # a write never reaches a child
    assert "made_up_tool: not in the child's catalog" in text  # invented: the same words
    assert "ask_question: barred from every subagent" in text
    assert "read_tool_result: removed by the call's own blocked_tools" in text
    assert "no_such_tool: not in the child's catalog" in text
    child_request = model.requests[1]
    assert sorted(t.name for t in child_request.tools) == ["lookup"]
    assert child_request.system.startswith("You are assistant's narrow helper.")
    child_results = {
        b["tool_use_id"]: b
        for r in json_rows(text)
        for b in r.get("content", [])
        if b.get("type") == "tool_result"
    }
    assert child_results["c1"]["outcome"] == "ok"
    assert child_results["c2"]["content"] == "Tool not available: write_note"
    assert [c for c in calls] == [("lookup", child_request_run_id(text))]


def json_rows(summary_text):
    path = summary_text.split("[Transcript: ")[1].split(" · ")[0]
    with open(path) as fh:
        return [json.loads(line) for line in fh]


def child_request_run_id(summary_text):
    return summary_text.split(" · run ")[1].split(" · ")[0]


def test_a_list_of_which_nothing_survives_is_refused_before_any_write(bench):
    calls = []
    model = ScriptedModel(
        [
            Reply(
                calls=(
                    Call(
                        name="delegate",
                        id="d1",
                        input={"task": "t", "tools": ["write_note", "made_up", "ask_question"]},
                    ),
                )
            ),
            Reply(text="ok then"),
        ]
    )
    (_settled, _), target = run(bench, model, calls)
    block = results(target.conversation)["d1"]
    assert block["outcome"] == "refused"
    assert "Nothing was started" in block["content"]
    assert "write_note: not in the child's catalog" in block["content"]
    assert not (target.conversation.path / "delegates").exists()
    assert len(model.requests) == 2  # no child ever called the model


def test_depth_limit(bench):
    calls = []
    model = ScriptedModel(
        [
            Reply(calls=(Call(name="delegate", id="d1", input={"task": "go deeper"}),)),
            # The child (depth 1) tries to delegate again; with max_depth 2 that works once...
            Reply(calls=(Call(name="delegate", id="d2", input={"task": "deeper still"}),)),
            # ...and the grandchild (depth 2) finds delegate missing from its catalog.
            Reply(calls=(Call(name="delegate", id="d3", input={"task": "too deep"}),)),
            Reply(text="grandchild done"),
            Reply(text="child done"),
            Reply(text="parent done"),
        ]
    )
    (settled, _), target = run(bench, model, calls)
    assert settled.status == "completed"
    grandchild_tools = {t.name for t in model.requests[2].tools}
    assert "delegate" not in grandchild_tools
    assert "delegate" in {t.name for t in model.requests[1].tools}
    nested = list(target.conversation.path.glob("delegates/*/delegates/*/messages.jsonl"))
    assert len(nested) == 1
    rows = [json.loads(line) for line in nested[0].read_text().splitlines()]
    d3 = next(b for r in rows if r["role"] == "tool" for b in r["content"])
    assert d3["content"] == "Tool not available: delegate"


def test_delegate_at_the_depth_limit_is_named_back(bench):
    model = ScriptedModel(
        [
            Reply(calls=(Call(name="delegate", id="d1", input={"task": "go deeper"}),)),
            # The child (depth 1) may delegate, but its child would sit at max_depth 2: no delegate there.
            Reply(
                calls=(
                    Call(
                        name="delegate",
                        id="d2",
                        input={"task": "deeper still", "tools": ["delegate", "lookup"]},
                    ),
                )
            ),
            Reply(text="grandchild done"),
            Reply(text="child done"),
            Reply(text="parent done"),
        ]
    )
    (settled, _), target = run(bench, model, [])
    assert settled.status == "completed"
    assert sorted(t.name for t in model.requests[2].tools) == ["lookup"]
    child_rows = json_rows(results(target.conversation)["d1"]["content"])
    d2 = next(b for r in child_rows if r["role"] == "tool" for b in r["content"])
    assert d2["outcome"] == "ok"
    assert "[Not given to the sub-agent: delegate: delegate at the depth limit]" in d2["content"]


def test_max_depth_one_names_delegate_back_to_a_top_level_call(bench):
    model = ScriptedModel(
        [
            Reply(
                calls=(Call(name="delegate", id="d1", input={"task": "t", "tools": ["delegate", "lookup"]}),)
            ),
            Reply(text="child done"),
            Reply(text="parent done"),
        ]
    )
    (settled, _), target = run(bench, model, [], max_depth=1)
    assert settled.status == "completed"
    text = results(target.conversation)["d1"]["content"]
    assert text.endswith("[Not given to the sub-agent: delegate: delegate at the depth limit]")
    assert sorted(t.name for t in model.requests[1].tools) == ["lookup"]


def test_delegate_handed_past_the_depth_limit_is_refused_before_any_write(bench):
    # Another spawner may hand delegate to a turn already at the limit; delegate itself still refuses.
    model = ScriptedModel(
        [
            Reply(calls=(Call(name="delegate", id="d1", input={"task": "one too deep"}),)),
            Reply(text="understood"),
        ]
    )
    (settled, _), target = run(bench, model, [], max_depth=1, depth=1)
    assert settled.status == "completed"
    block = results(target.conversation)["d1"]
    assert block["outcome"] == "refused"
    assert block["is_error"] is True
    assert "delegate was not run because sub-agents may nest only 1 deep" in block["content"]
    assert not (target.conversation.path / "delegates").exists()
    assert len(model.requests) == 2  # no child ever called the model


def test_child_transcript_is_persisted_under_the_parent(bench):
    model = ScriptedModel(
        [
            Reply(calls=(Call(name="delegate", id="d1", input={"task": "summarise"}),)),
            Reply(text="the child's summary"),
            Reply(text="parent done"),
        ]
    )
    (_settled, _), target = run(bench, model, [])
    block = results(target.conversation)["d1"]
    assert block["content"].startswith("the child's summary")
    transcript = block["content"].split("[Transcript: ")[1].split(" · ")[0]
    with open(transcript) as fh:
        rows = [json.loads(line) for line in fh]
    assert [r["role"] for r in rows] == ["user", "assistant"]
    assert rows[0]["content"][0]["text"] == "summarise"
    meta = json.loads((target.conversation.path / "delegates").glob("*/meta.json").__next__().read_text())
    assert meta["parent_id"] == target.conversation.id
    assert meta["delegate_agent"] == "general"


def test_unknown_agent_is_named_among_the_visible_ones(bench):
    model = ScriptedModel(
        [
            Reply(calls=(Call(name="delegate", id="d1", input={"task": "x", "agent": "wizard"}),)),
            Reply(text="k"),
        ]
    )
    (_, _), target = run(bench, model, [])
    text = results(target.conversation)["d1"]["content"]
    assert "No agent named 'wizard'" in text
    assert "general" in text
    assert "narrow" in text


def by_conversation(parent, children):
    """One model for a parent and its background children, each answered from its own script (by the
    first user message of the conversation asking), so the order their turns interleave in changes
    nothing. An empty script answers like an exhausted one."""
    from neuralis_jupyter.providers.scripted import ScriptExhausted

    queues = {task: list(replies) for task, replies in children.items()}

    def answer(request):
        first = request.messages[0]["content"][0]["text"]
        queue = queues.get(first, parent)
        if not queue:
            raise ScriptExhausted(f"no reply scripted for {first!r}")
        return queue.pop(0)

    return ScriptedModel([answer] * (len(parent) + sum(len(r) for r in children.values()) + 1))


def test_background_child_reports_back(bench):
    continued = []

    async def cont(session, conversation, report, owed=None):
        continued.append(report)

    model = by_conversation(
        [
            Reply(calls=(Call(name="delegate", id="d1", input={"task": "slow job", "background": True}),)),
            Reply(text="parent carries on"),
        ],
        {"slow job": [Reply(text="background child finished")]},
    )
    target = bench.target("alice")

    async def go():
        async with bench.turn(target, "start it", model=model) as request:
            settled = await bench.runtime.run(request)
        return settled

    # The host supplies the continuation through the environment the handlers are built with.
    env = bench.test_env
    env.services["continue"] = cont

    async def go_and_wait():
        settled = await go()
        assert await bench.drain_background(10)  # the run, and the follow-up its report starts
        return settled

    settled = asyncio.run(go_and_wait())
    assert settled.status == "completed"
    first = results(target.conversation)["d1"]
    assert "in the background as run" in first["content"]
    assert len(continued) == 1
    report = continued[0]
    assert report.type == "background_report"
    assert report.text.startswith("background child finished")
    rows = target.conversation.read_all()
    assert rows[-1]["content"][0]["type"] == "delegate_report"


def test_a_background_child_that_fails_still_reports(bench):
    from neuralis_jupyter.providers.scripted import ScriptExhausted

    continued = []

    async def cont(session, conversation, report, owed=None):
        continued.append(report)

    bench.test_env.services["continue"] = cont
    # The child's script is empty: its first model call finds it exhausted.
    model = by_conversation(
        [
            Reply(calls=(Call(name="delegate", id="d1", input={"task": "doomed", "background": True}),)),
            Reply(text="parent carries on"),
        ],
        {"doomed": []},
    )
    target = bench.target("alice")

    async def go():
        async with bench.turn(target, "start it", model=model) as request:
            await bench.runtime.run(request)
        assert await bench.drain_background(10)

    asyncio.run(go())
    assert len(continued) == 1
    assert "failed" in continued[0].text
    assert ScriptExhausted.__name__ in continued[0].text
    assert target.conversation.read_all()[-1]["content"][0]["type"] == "delegate_report"
