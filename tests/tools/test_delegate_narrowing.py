"""``delegate`` narrowing: name normalisation in blocked_tools, hidden and invented names named back in
the same words, and a persona whose ``allowed-tools: []`` hands its child nothing."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import Tool, ToolOutput
from neuralis_jupyter.runtime.events import ToolCallFinished
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store
from neuralis_jupyter.workbench import Workbench

OBJ = {"type": "object", "properties": {}, "additionalProperties": True}
MUTE_AGENT = """---
name: mute
description: Thinks without tools.
allowed-tools: []
---
You think it through and answer in words.
"""
#: A read tool of the test package that only holders of workflow.dispatch see (members do not).
GATED_TOOL = {
    "name": "gated_lookup",
    "description": "Looks up what only dispatchers may see.",
    "input_schema": OBJ,
    "x-neuralis": {"access": "read", "requires": {"features": ["workflow.dispatch"]}},
}


@pytest.fixture
def bench(tmp_path):
    pkg = tmp_path / "pkgs" / "helpers"
    (pkg / "agents").mkdir(parents=True)
    (pkg / "tools").mkdir()
    (pkg / "neuralis.json").write_text(
        json.dumps({"id": "helpers", "version": "1.0.0", "trust": "trusted", "description": "Helpers."})
    )
    (pkg / "agents" / "mute.md").write_text(MUTE_AGENT)
    (pkg / "tools" / "gated_lookup.json").write_text(json.dumps(GATED_TOOL))
    home = tmp_path / "home"
    settings = NeuralisSettings(data_root=str(home), package_roots=[str(tmp_path / "pkgs")])
    store = Store.open(home)
    project = store.data_root.project_dir("lab") / "project.json"
    project.parent.mkdir(parents=True)
    project.write_text(json.dumps({"id": "lab", "members": {"alice": "owner", "bob": "member"}}))
    bench = Workbench(settings, store=store)

    async def gated(args, ctx):
        return ToolOutput(content="the dispatch secrets")

    bench.packages.bind_handlers("helpers", {"gated_lookup": gated})
    return bench


def lookup_tools():
    async def handler(args, ctx):
        return ToolOutput(content="found")

    def make(name):
        return Tool(
            name=name,
            description=name,
            input_schema=OBJ,
            handler=handler,
            access="read",
            package_id=AGENT_CORE_ID,
        )

    return [make("lookup"), make("search")]


def run(bench, model, user="alice"):
    """One turn of ``user`` in the lab project; the delegate calls' event data by tool_use id."""
    target = bench.target(user, project_id="lab")
    finished = {}

    def on_event(event):
        if isinstance(event, ToolCallFinished):
            finished[event.tool_use_id] = event

    async def go():
        async with bench.turn(target, "do it", model=model) as request:
            request = replace(request, tools=request.tools.merge(lookup_tools()))
            return await bench.runtime.run(request, on_event=on_event)

    settled = asyncio.run(go())
    assert settled.status == "completed"
    return finished, target


def delegate(input, *, then=("child done", "parent done")):
    return ScriptedModel(
        [Reply(calls=(Call(name="delegate", id="d1", input=input),)), *(Reply(text=t) for t in then)]
    )


def test_blocked_tools_are_matched_after_the_same_normalisation(bench):
    model = delegate({"task": "t", "blocked_tools": ["functions.LOOKUP", " Tools:Search "]})
    finished, _ = run(bench, model)
    child_tools = {t.name for t in model.requests[1].tools}
    assert "lookup" not in child_tools
    assert "search" not in child_tools
    assert "read_tool_result" in child_tools  # the rest of the catalog still reaches the child
    assert finished["d1"].data["removed"] == []  # both matched: nothing to name back


def test_a_normalised_blocked_name_removes_a_requested_tool_by_name(bench):
    model = delegate({"task": "t", "tools": ["lookup", "search"], "blocked_tools": ["functions.LOOKUP"]})
    finished, _ = run(bench, model)
    assert sorted(t.name for t in model.requests[1].tools) == ["search"]
    assert finished["d1"].data["removed"] == [["lookup", "blocked"]]
    assert "lookup: removed by the call's own blocked_tools" in finished["d1"].content


def reasons(content):
    """``{name: reason}`` from a result's ``[Not given to the sub-agent: ...]`` line."""
    line = next(x for x in content.splitlines() if x.startswith("[Not given to the sub-agent: "))
    entries = line.removeprefix("[Not given to the sub-agent: ").removesuffix("]").split("; ")
    return dict(e.split(": ", 1) for e in entries)


def test_a_feature_hidden_tool_is_named_back_exactly_like_an_invented_one(bench):
    requested = {"task": "t", "tools": ["lookup", "gated_lookup", "gated_lookop"]}
    # The owner holds every feature: the gated tool is real, and it reaches her child.
    owner_model = delegate(requested)
    run(bench, owner_model, user="alice")
    assert sorted(t.name for t in owner_model.requests[1].tools) == ["gated_lookup", "lookup"]

    member_model = delegate(requested)
    finished, _ = run(bench, member_model, user="bob")
    assert "gated_lookup" not in {t.name for t in member_model.requests[0].tools}
    assert sorted(t.name for t in member_model.requests[1].tools) == ["lookup"]
    said = reasons(finished["d1"].content)
    assert said == {
        "gated_lookup": "not in the child's catalog",
        "gated_lookop": "not in the child's catalog",
    }
    removed = dict(finished["d1"].data["removed"])
    assert removed["gated_lookup"] == removed["gated_lookop"]


def test_a_hidden_tool_alone_is_refused_in_the_same_words_as_an_invented_one(bench):
    hidden, _ = run(bench, delegate({"task": "t", "tools": ["gated_lookup"]}, then=("k",)), user="bob")
    invented, _ = run(bench, delegate({"task": "t", "tools": ["gated_lookop"]}, then=("k",)), user="bob")
    assert hidden["d1"].outcome == invented["d1"].outcome == "refused"
    assert hidden["d1"].content.replace("gated_lookup", "NAME") == invented["d1"].content.replace(
        "gated_lookop", "NAME"
    )


def test_an_empty_allowed_tools_persona_runs_its_child_with_no_tools(bench):
    model = delegate({"task": "think", "agent": "mute"}, then=("thought it through", "parent done"))
    finished, target = run(bench, model)
    assert finished["d1"].outcome == "ok"
    assert finished["d1"].content.startswith("thought it through")
    child_request = model.requests[1]
    assert child_request.tools == ()
    assert child_request.system.startswith("You think it through")
    assert len(list(target.conversation.path.glob("delegates/*/messages.jsonl"))) == 1


def test_an_empty_allowed_tools_persona_refuses_a_tools_list_before_any_write(bench):
    model = delegate({"task": "think", "agent": "mute", "tools": ["lookup"]}, then=("ok then",))
    finished, target = run(bench, model)
    assert finished["d1"].outcome == "refused"
    assert "lookup: outside the persona's list" in finished["d1"].content
    assert "Nothing was started" in finished["d1"].content
    assert not (target.conversation.path / "delegates").exists()
    assert len(model.requests) == 2  # no child ever called the model
