"""``todos`` (seed 003): locking, maxSteps only lowered, met by number and text, all-or-nothing, key order,
close semantics, versioned bounded archive, the user's locked goal, and the prompt's lines. Every call goes
through a real turn (ScriptedModel, the shipped schema) on a real conversation."""

from __future__ import annotations

import asyncio
import json

import pytest
from traitlets.config import Config

from neuralis_jupyter._resources import builtin_package_dir
from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.packages import PackageSet
from neuralis_jupyter.prompt import AssembledPrompt
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, Tool, ToolRegistry, TurnRequest
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store
from neuralis_jupyter.tools import todos
from neuralis_jupyter.tools.environment import ToolEnvironment
from neuralis_jupyter.tools.ledger import render_session

from ..runtime.helpers import session

GOAL = {"goal": "Tighten every tool schema", "done": ["all tools validate", "docs updated"]}


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


@pytest.fixture
def conv(store):
    return store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")


def todos_tool(store, **settings):
    env = ToolEnvironment(
        settings=NeuralisSettings(),
        store=store,
        packages=PackageSet([]),
        config=Config({"TodosSettings": settings}),
    )
    spec = json.loads((builtin_package_dir("agent-core") / "tools" / "todos.json").read_text())
    return Tool(
        name="todos",
        description=spec["description"],
        input_schema=spec["input_schema"],
        handler=todos.handlers(env)["todos"],
        access=spec["x-neuralis"]["access"],
        intrinsic=True,
        package_id=AGENT_CORE_ID,
    )


def turn(store, conv, *calls, prompt=True, **settings):
    """One turn, one todos call per step; returns the results (text, is_error) and the model."""
    model = ScriptedModel(
        [Reply(calls=(Call(name="todos", input=c, id=f"t{i}"),)) for i, c in enumerate(calls)]
    )
    model.enqueue(Reply(text="ok"))
    request = TurnRequest(
        session=session(),
        conversation=conv,
        model=model,
        tools=ToolRegistry.of([todos_tool(store, **settings)]),
        message="go",
        prompt=AssembledPrompt(
            identity_files=[],
            packages=PackageSet([]),
            sections=[todos.session_section(conv)] if prompt else [],
        ),
    )
    settled = asyncio.run(AgentRuntime(store).run(request))
    assert settled.status == "completed"
    rows = [r for r in conv.read_all() if r["role"] == "tool"][-len(calls) :]
    return [(r["content"][0]["content"], r["content"][0]["is_error"]) for r in rows], model


def call(store, conv, args, **settings):
    return turn(store, conv, args, prompt=False, **settings)[0][0]


def ledger(conv):
    return todos.read_ledger(conv)


def meta_bytes(conv):
    return (conv.path / "meta.json").read_bytes()


def test_a_goal_is_set_once_per_cycle_then_locked(store, conv):
    text, error = call(store, conv, {"plan": {**GOAL, "loop": {"until": "goal", "maxSteps": 40}}})
    assert not error
    assert text == (
        "Goal: Tighten every tool schema\n"
        "- [ ] 1. all tools validate\n"
        "- [ ] 2. docs updated\n"
        "Loop: until goal · maxSteps 40"
    )
    before = meta_bytes(conv)
    text, error = call(
        store,
        conv,
        {"plan": {"goal": "Something else", "todos": [{"id": "a", "content": "A", "status": "pending"}]}},
    )
    assert error
    assert 'plan refused: the goal "Tighten every tool schema" is locked for this cycle' in text
    assert "Nothing was written." in text
    assert meta_bytes(conv) == before  # refused before anything was written, todos included
    # Changing the conditions or the until is the same lock; resending the same goal is no change.
    assert call(store, conv, {"plan": {"done": ["all tools validate"]}})[1]
    assert (
        "plan refused: until is locked once set"
        in call(store, conv, {"plan": {"loop": {"until": "forever"}}})[0]
    )
    text, error = call(store, conv, {"plan": {"goal": GOAL["goal"], "name": "Schemas"}})
    assert not error
    assert ledger(conv)["name"] == "Schemas"


def test_max_steps_only_lowered_and_folded_into_the_ceiling(store, conv):
    call(store, conv, {"plan": {**GOAL, "loop": {"maxSteps": 30}}})
    ceiling = todos.step_ceiling(conv)
    assert asyncio.run(ceiling()) == 30
    text, error = call(store, conv, {"plan": {"loop": {"maxSteps": 45}}})
    assert error
    assert "maxSteps can only be lowered (it is 30, 45 was asked)" in text
    assert asyncio.run(ceiling()) == 30
    text, error = call(store, conv, {"plan": {"loop": {"maxSteps": 12}}})
    assert not error
    assert "Loop: maxSteps 12" in text
    assert asyncio.run(ceiling()) == 12
    call(store, conv, {"close": "cleared"})
    assert asyncio.run(ceiling()) is None  # the bound belongs to its cycle


def test_a_lowered_max_steps_binds_the_running_turn(store, conv):
    model = ScriptedModel(
        [
            Reply(calls=(Call(name="todos", input={"plan": {**GOAL, "loop": {"maxSteps": 2}}}, id="t1"),)),
            Reply(calls=(Call(name="todos", input={"mark": {"met": [1]}}, id="t2"),)),
            Reply(text="never asked"),
        ]
    )
    request = TurnRequest(
        session=session(),
        conversation=conv,
        model=model,
        tools=ToolRegistry.of([todos_tool(store)]),
        message="go",
        step_ceiling=todos.step_ceiling(conv),  # type: ignore[call-arg]
    )
    settled = asyncio.run(AgentRuntime(store, max_steps=50).run(request))
    assert (settled.status, settled.steps, settled.budget) == ("suspended", 2, "max_steps")
    assert model.requests[1].system_dynamic.endswith("Steps: 2/2\n</session>")


def test_met_by_number_and_by_exact_text(store, conv):
    call(store, conv, {"plan": {**GOAL, "done": [*GOAL["done"], "changelog"]}})
    text, error = call(store, conv, {"mark": {"met": [2]}})
    assert not error
    assert "- [x] 2. docs updated" in text
    text, error = call(store, conv, {"mark": {"met": ["all tools validate"]}})
    assert "- [x] 1. all tools validate" in text
    assert "- [ ] 3. changelog" in text
    assert [c["met"] for c in ledger(conv)["goal"]["done"]] == [True, True, False]


def test_mark_is_all_or_nothing_and_names_what_landed(store, conv):
    call(store, conv, {"plan": GOAL})
    text, error = call(
        store,
        conv,
        {
            "plan": {"todos": [{"id": "schema", "content": "Tighten", "status": "in_progress"}]},
            "mark": {"met": [1, "docs updated!"], "todos": [{"id": "schema", "status": "completed"}]},
        },
    )
    assert error
    assert "mark refused: no condition 'docs updated!'" in text
    assert "nothing of it was applied" in text
    assert "conditions: 1. all tools validate · 2. docs updated" in text
    assert "Already landed: plan (1 todo(s))" in text
    state = ledger(conv)
    assert [c["met"] for c in state["goal"]["done"]] == [False, False]  # condition 1 did not land
    assert state["todos"] == [{"id": "schema", "content": "Tighten", "status": "in_progress"}]
    text, _ = call(store, conv, {"mark": {"met": [3]}})
    assert "no condition 3" in text
    assert "Nothing was written." in text


def test_plan_applies_before_mark_whatever_the_order(store, conv):
    args = {
        "mark": {"todos": [{"id": "a", "status": "completed"}]},
        "plan": {
            "todos": [
                {"id": "a", "content": "A", "status": "pending"},
                {"id": "b", "content": "B", "status": "pending"},
            ]
        },
    }
    assert next(iter(args)) == "mark"
    text, error = call(store, conv, args)
    assert not error
    assert text == "Todos:\n- [x] a: A\n- [ ] b: B"


def test_close_with_mark_and_plan_ends_the_cycle_and_opens_the_next(store, conv):
    call(
        store, conv, {"plan": {**GOAL, "todos": [{"id": "s", "content": "Schemas", "status": "in_progress"}]}}
    )
    text, error = call(
        store,
        conv,
        {
            "plan": {"goal": "Tighten the tool schemas the audit named", "done": ["audit list validates"]},
            "close": "cleared",
            "mark": {"met": [1], "todos": [{"id": "s", "status": "completed"}]},
        },
    )
    assert not error, text
    assert text.splitlines()[0] == "archived as v1"
    state = ledger(conv)
    assert state["goal"]["text"] == "Tighten the tool schemas the audit named"
    assert state["todos"] == []
    old = state["history"][0]
    assert (old["version"], old["outcome"], old["goal"]["text"]) == (1, "cleared", GOAL["goal"])
    assert old["counts"] == {"met": 1, "conditions": 2, "completed": 1, "todos": 1}
    assert text.endswith('Archived: v1 "Tighten every tool schema" cleared (1/2 · 1/1 todos)')
    # With nothing open the close is skipped and named; the plan still opens the cycle.
    call(store, conv, {"close": "cleared"})
    text, error = call(store, conv, {"close": "achieved", "plan": {"name": "Next"}})
    assert not error
    assert text.startswith("close skipped: nothing was open\n")
    assert ledger(conv)["name"] == "Next"


def test_the_tick_that_meets_the_last_condition_archives(store, conv):
    call(store, conv, {"plan": {**GOAL, "todos": [{"id": "s", "content": "Schemas", "status": "completed"}]}})
    call(store, conv, {"mark": {"met": [1]}})
    results, model = turn(store, conv, {"mark": {"met": ["docs updated"]}})
    text, error = results[0]
    assert not error
    assert text == 'archived as v1\n\nArchived: v1 "Tighten every tool schema" achieved (2/2 · 1/1 todos)'
    state = ledger(conv)
    assert (state["goal"], state["todos"]) == (None, [])
    # The next request's session block carries the archived line.
    assert model.requests[-1].system_dynamic == (
        "<session>\n"
        'Archived: v1 "Tighten every tool schema" achieved (2/2 · 1/1 todos)\n'
        "Steps: 2/50\n"
        "</session>"
    )


def test_a_todo_list_alone_closes_when_every_step_is_completed(store, conv):
    steps = [
        {"id": "a", "content": "A", "status": "completed"},
        {"id": "b", "content": "B", "status": "in_progress"},
    ]
    call(store, conv, {"plan": {"name": "Refactor", "todos": steps}})
    text, _ = call(store, conv, {"mark": {"todos": [{"id": "b", "status": "completed"}]}})
    assert text == 'archived as v1\n\nArchived: v1 "Refactor" achieved (2/2 todos)'
    # A goal without conditions closes the same way.
    call(store, conv, {"plan": {"goal": "Ship it", "todos": steps}})
    text, _ = call(store, conv, {"mark": {"todos": [{"id": "b", "status": "completed"}]}})
    assert text.startswith("archived as v2\n")
    # ... or by an explicit achieved; an unmet condition refuses it.
    call(store, conv, {"plan": {"goal": "Condition-less"}})
    assert call(store, conv, {"close": "achieved"})[0].startswith("archived as v3")
    call(store, conv, {"plan": GOAL})
    text, error = call(store, conv, {"close": "achieved"})
    assert error
    assert 'close achieved refused: 2 condition(s) of "Tighten every tool schema"' in text
    assert "unmet (1. all tools validate · 2. docs updated)" in text


def test_archive_versions_are_bounded(store, conv):
    for n in range(1, 5):
        call(store, conv, {"plan": {"goal": f"goal {n}"}}, archive_max_entries=2)
        call(store, conv, {"close": "achieved"}, archive_max_entries=2)
    history = ledger(conv)["history"]
    assert [e["version"] for e in history] == [3, 4]
    assert [e["goal"]["text"] for e in history] == ["goal 3", "goal 4"]
    assert history[-1]["closed_at"]


def test_a_user_goal_is_locked_for_the_agent(store, conv):
    todos.set_goal_by_user(conv, text="Reproduce figure 3", done=["plot matches"], loop={"maxSteps": 20})
    results, model = turn(
        store,
        conv,
        {"plan": {"goal": "Something easier"}},
        {"close": "cleared"},
        {"plan": {"loop": {"maxSteps": 10}}},
    )
    (text1, err1), (text2, err2), (_, err3) = results
    assert err1
    assert 'plan refused: the goal "Reproduce figure 3" was set by the user and is locked' in text1
    assert err2
    assert "close cleared refused" in text2
    assert "you can achieve it, never clear it" in text2
    assert not err3  # tightening the bound is still the agent's to do
    assert model.requests[1].system_dynamic == (
        "<session>\n"
        "Goal: Reproduce figure 3 [set by user — locked]\n"
        "- [ ] 1. plot matches\n"
        "Loop: maxSteps 20\n"
        "Steps: 2/50\n"
        "</session>"
    )
    assert "Loop: maxSteps 10" in model.requests[3].system_dynamic
    # The agent can achieve it; the user may clear whatever is open.
    assert call(store, conv, {"mark": {"met": [1]}})[0].startswith("archived as v1")
    todos.set_goal_by_user(conv, text="Another", set_by="workflow")
    assert todos.clear(conv)["outcome"] == "cleared"
    assert todos.clear(conv) is None


def test_cleared_is_allowed_for_the_agents_own_goal_and_in_an_evolve_run(store, conv):
    call(store, conv, {"plan": GOAL})
    assert call(store, conv, {"close": "cleared"})[0].startswith("archived as v1")
    todos.set_goal_by_user(conv, text="Explore", done=["a finding"], evolve="agent", loop={"maxSteps": 9})
    assert render_session(ledger(conv)).startswith("Goal: Explore [set by user]\n")
    text, error = call(store, conv, {"plan": {"goal": "Explore the tails", "done": ["a finding", "a plot"]}})
    assert not error
    assert text.startswith("Goal: Explore the tails [set by user]\n")
    assert call(store, conv, {"plan": {"loop": {"maxSteps": 10}}})[1]  # still cannot loosen the bound
    text, error = call(store, conv, {"close": "cleared"})
    assert not error
    assert ledger(conv)["history"][-1]["outcome"] == "cleared"


def test_user_achieve_and_a_re_asserted_workflow_goal(store, conv):
    todos.set_goal_by_user(conv, text="Nightly check", done=["report written"], set_by="workflow")
    call(store, conv, {"plan": {"todos": [{"id": "r", "content": "Write", "status": "pending"}]}})
    entry = todos.achieve(conv)
    assert (entry["version"], entry["outcome"], entry["counts"]["met"]) == (1, "achieved", 0)
    todos.set_goal_by_user(conv, text="Nightly check", done=["report written"], set_by="workflow")
    assert render_session(ledger(conv)).startswith("Goal: Nightly check [set by workflow — locked]")
    with pytest.raises(ValueError, match="set_by"):
        todos.set_goal_by_user(conv, text="x", set_by="agent")


def test_the_ledger_is_durable_and_shared(store, conv, tmp_path):
    call(store, conv, {"plan": {**GOAL, "name": "Schemas"}})
    again = Store.open(tmp_path / "home").conversations.open(
        project_id="default", agent_id="assistant", conversation_id=conv.id
    )
    assert ledger(again)["goal"]["text"] == GOAL["goal"]
    assert json.loads(meta_bytes(conv))["session_ledger"]["goal"]["set_by"] == "agent"


def test_render_session_lines():
    state = {
        "goal": {
            "text": "Tighten every tool schema",
            "done": [{"text": "all tools validate", "met": True}, {"text": "docs updated", "met": False}],
            "loop": {"until": "goal", "maxSteps": 40},
            "set_by": "user",
            "locked": True,
        },
        "name": "Refactor",
        "todos": [
            {"id": "schema", "content": "Tighten the tool schema", "status": "in_progress"},
            {"id": "docs", "content": "Update the docs", "status": "pending"},
            {"id": "old", "content": "Old approach", "status": "cancelled"},
            {"id": "audit", "content": "Audit", "status": "completed"},
        ],
        "history": [
            {
                "version": 3,
                "name": None,
                "goal": {"text": "Earlier", "done": [], "loop": {}, "set_by": "agent", "locked": True},
                "todos": [],
                "outcome": "achieved",
                "closed_at": "2026-01-01T00:00:00+00:00",
                "counts": {"met": 3, "conditions": 3, "completed": 5, "todos": 5},
            }
        ],
    }
    assert render_session(state).splitlines() == [
        "Goal: Tighten every tool schema [set by user — locked]",
        "- [x] 1. all tools validate",
        "- [ ] 2. docs updated",
        "Loop: until goal · maxSteps 40",
        "Plan: Refactor",
        "- [~] schema: Tighten the tool schema",
        "- [ ] docs: Update the docs",
        "- [-] old: Old approach",
        "- [x] audit: Audit",
        'Archived: v3 "Earlier" achieved (3/3 · 5/5 todos)',
    ]
