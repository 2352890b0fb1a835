"""The engine in real turns (AgentRuntime, ScriptedModel, a real store), passed as policy= and permission=."""

from __future__ import annotations

import asyncio
from typing import Any

from neuralis_jupyter.contracts import DEFAULT_ROLES
from neuralis_jupyter.contracts.refusals import tool_not_available
from neuralis_jupyter.policy import HeadlessApprover, LiveGuard, PolicyConfig, PolicyEngine, StoreGuard
from neuralis_jupyter.providers.scripted import Call, Reply
from neuralis_jupyter.store.interactions import GuardOverrideStore

from .helpers import RecordingApprover, make_tool, run_turn, session, tool_results, write_calls


def test_a_live_guard_flip_applies_at_the_next_call(store, conv):
    """safe asks for the first write; its handler flips the guard to auto; the second runs unasked."""
    guard = LiveGuard("safe")
    approver = RecordingApprover(approve=True)
    calls: list[Any] = []

    async def flip(_args: dict[str, Any], _ctx: Any) -> None:
        guard.set("auto")

    first = make_tool("write_note", access="write", calls=calls, on_run=flip)
    engine = PolicyEngine(store, guard=guard, approver=approver)

    settled = run_turn(store, conv, engine, [first], write_calls({"text": "one"}, {"text": "two"}))

    assert settled.status == "completed"
    assert [i.input for i in approver.asked] == [{"text": "one"}]  # exactly one request
    assert calls == [("write_note", {"text": "one"}), ("write_note", {"text": "two"})]
    assert all(not r["is_error"] for r in tool_results(conv).values())
    guard_rows = [(e.outcome, e.arm, (e.details or {}).get("profile")) for e in store.audit.list("default")]
    assert ("asked", "guard", "safe") in guard_rows
    assert ("allowed", "guard", "auto") in guard_rows


def test_a_store_override_flip_applies_at_the_next_call(store, conv):
    """A server route writes the override row between steps; the running turn reads it at its next call."""
    overrides = GuardOverrideStore(store.engine)
    overrides.set("default", conv.id, "safe", set_by="alice")
    guard = StoreGuard(overrides, project_id="default", conversation_id=conv.id, fallback="balanced")

    async def route_flips(_interaction: Any) -> None:
        await asyncio.to_thread(overrides.set, "default", conv.id, "auto", set_by="alice")

    approver = RecordingApprover(approve=True, before=route_flips)
    calls: list[Any] = []
    engine = PolicyEngine(store, guard=guard, approver=approver)
    tool = make_tool("write_note", access="write", calls=calls)

    settled = run_turn(store, conv, engine, [tool], write_calls({"n": 1}, {"n": 2}, {"n": 3}))

    assert settled.status == "completed"
    assert len(approver.asked) == 1
    assert [c[1] for c in calls] == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_auto_never_prompts_but_the_deny_arms_still_deny(store, conv):
    approver = RecordingApprover(approve=False)
    calls: list[Any] = []
    member = session(role="member", priority=30, granted_features=DEFAULT_ROLES["member"].granted_features)
    tools = [
        make_tool("run_code", access="write", effects=frozenset({"exec"}), calls=calls),
        make_tool("web_fetch", effects=frozenset({"egress:external"}), calls=calls),
        make_tool("drop_table", access="write", effects=frozenset({"destructive"}), calls=calls),
        make_tool("lab_write", access="write", package_id="lab", calls=calls),
        make_tool("rm_rf", access="write", calls=calls),
        make_tool("mcp_app", requires=("mcp.apps",), calls=calls),
        make_tool("shady_write", access="write", package_id="shady", calls=calls),
    ]
    engine = PolicyEngine(
        store,
        guard="auto",
        approver=approver,
        config=PolicyConfig(blocklist=("rm_*",)),
        trust_of={"agent-core": "first-party", "lab": "trusted", "shady": "untrusted"}.__getitem__,
    )
    names = [t.name for t in tools]
    replies = [
        Reply(calls=tuple(Call(name=n, input={"k": i}, id=f"c{i}") for i, n in enumerate(names))),
        Reply(text="done"),
    ]

    settled = run_turn(store, conv, engine, tools, replies, who=member)

    assert settled.status == "completed"
    assert approver.asked == []  # zero prompts
    assert sorted(c[0] for c in calls) == ["drop_table", "lab_write", "run_code", "web_fetch"]
    results = tool_results(conv)
    assert results["c4"]["outcome"] == "denied"  # blocklist
    assert results["c5"]["content"] == tool_not_available("mcp_app")  # feature gate, generic
    assert results["c5"]["outcome"] == "unavailable"
    assert results["c6"]["outcome"] == "denied"  # trust ceiling
    denied = {e.subject: e.arm for e in store.audit.list("default", action="tool.denied")}
    assert denied == {"rm_rf": "blocklist", "mcp_app": "feature_gate", "shady_write": "trust_ceiling"}


def test_a_headless_ask_is_refused_naming_the_profile(store, conv):
    calls: list[Any] = []
    tool = make_tool("write_note", access="write", package_id="lab", calls=calls)
    engine = PolicyEngine(store, guard="balanced", approver=HeadlessApprover(), trust_of=lambda _p: "trusted")

    settled = run_turn(store, conv, engine, [tool], write_calls({"text": "hi"}))

    assert settled.status == "completed"
    assert calls == []
    [result] = tool_results(conv).values()
    assert result["is_error"]
    assert result["outcome"] == "denied"
    assert (
        "nobody can approve write_note in a headless run: the guard profile is 'balanced'; "
        "rerun with --guard auto or allow it with a hook" in result["content"]
    )
    assert store.interactions.list_pending("default") == []  # refused, not left pending
    events = {(e.action, e.arm, e.outcome) for e in store.audit.list("default")}
    assert ("tool.asked", "guard", "asked") in events
    assert ("interaction.denied", "approval", "denied") in events


def test_a_headless_ask_from_a_hook_names_the_hook(store, conv):
    from neuralis_jupyter.policy import hooks_from_config

    tool = make_tool("write_note", access="write")
    hooks = hooks_from_config([{"source": "admin", "match": "write_*", "decision": "ask", "name": "review"}])
    engine = PolicyEngine(store, guard="auto", hooks=hooks)

    run_turn(store, conv, engine, [tool], write_calls({"text": "hi"}))

    [result] = tool_results(conv).values()
    assert "hook 'review' asks for approval" in result["content"]


def test_audit_rows_for_allowed_asked_and_denied_in_one_turn(store, conv):
    approver = RecordingApprover(approve=False)
    tools = [make_tool("lookup"), make_tool("write_note", access="write"), make_tool("rm_rf", access="write")]
    engine = PolicyEngine(store, guard="safe", approver=approver, config=PolicyConfig(blocklist=("rm_rf",)))
    replies = [
        Reply(calls=(Call(name="lookup", input={}, id="a"),)),
        Reply(calls=(Call(name="write_note", input={"t": 1}, id="b"),)),
        Reply(calls=(Call(name="rm_rf", input={}, id="c"),)),
        Reply(text="done"),
    ]

    run_turn(store, conv, engine, tools, replies, request_id="r-audit")

    rows = sorted(
        (e.subject, e.action, e.arm, e.outcome, e.request_id, e.conversation_id)
        for e in store.audit.list("default")
    )
    assert rows == sorted(
        [
            ("lookup", "tool.allowed", "policy", "allowed", "r-audit", conv.id),
            ("write_note", "tool.allowed", "policy", "allowed", "r-audit", conv.id),
            ("write_note", "tool.asked", "guard", "asked", "r-audit", conv.id),
            ("write_note", "interaction.denied", "approval", "denied", "r-audit", conv.id),
            ("rm_rf", "tool.denied", "blocklist", "denied", "r-audit", conv.id),
        ]
    )
    asked = store.audit.list("default", action="tool.asked")[0]
    assert asked.details["profile"] == "safe"
    assert asked.details["floor"] == "write"
    assert asked.details["interaction_id"].startswith("pi-")
    assert asked.reason == "the 'safe' guard asks before any write"


def test_record_shadow_is_audited(store):
    engine = PolicyEngine(store)
    tool = make_tool("write_note", access="write")
    who = session(request_id="r-s", tool_use_id="t9")
    asyncio.run(engine.record_shadow(tool=tool, input={"a": 1}, session=who, reason="shadow run"))
    [event] = store.audit.list("default")
    assert (event.action, event.arm, event.outcome, event.reason) == (
        "tool.shadowed",
        "shadow",
        "shadowed",
        "shadow run",
    )
    assert event.details["tool_use_id"] == "t9"
    assert len(event.details["input_hash"]) == 64
