"""A hook's deny is heard on every call; its allow and ask only where the runtime asks (writes, consent)."""

from __future__ import annotations

from typing import Any

from neuralis_jupyter.policy import HookRegistration, PolicyEngine, hooks_from_config
from neuralis_jupyter.providers.scripted import Call, Reply

from .helpers import RecordingApprover, make_tool, run_turn, tool_results, write_calls


def deny(match: str) -> list[HookRegistration]:
    return hooks_from_config([{"source": "admin", "match": match, "decision": "deny", "reason": "not here"}])


def one_call(name: str) -> list[Reply]:
    return [Reply(calls=(Call(name=name, input={"q": "x"}, id="t1"),)), Reply(text="done")]


def test_a_deny_hook_stops_a_plain_read(store, conv):
    calls: list[Any] = []
    engine = PolicyEngine(store, guard="auto", hooks=deny("lookup"))
    run_turn(store, conv, engine, [make_tool("lookup", calls=calls)], one_call("lookup"))
    assert calls == []
    result = tool_results(conv)["t1"]
    assert (result["outcome"], result["is_error"]) == ("denied", True)
    assert "not here" in result["content"]
    [denied] = store.audit.list("default", action="tool.denied")
    assert (denied.subject, denied.arm, denied.details["hook"]) == ("lookup", "hook", "admin:deny:lookup")


def test_a_deny_hook_stops_an_intrinsic_tool(store, conv):
    calls: list[Any] = []
    engine = PolicyEngine(store, guard="auto", hooks=deny("todos"))
    run_turn(store, conv, engine, [make_tool("todos", intrinsic=True, calls=calls)], one_call("todos"))
    assert calls == []
    assert tool_results(conv)["t1"]["outcome"] == "denied"


def test_an_ask_hook_on_a_plain_read_does_not_prompt(store, conv):
    calls: list[Any] = []
    approver = RecordingApprover(approve=False)
    hooks = hooks_from_config([{"source": "project", "match": "lookup", "decision": "ask"}])
    engine = PolicyEngine(store, guard="safe", approver=approver, hooks=hooks)
    run_turn(store, conv, engine, [make_tool("lookup", calls=calls)], one_call("lookup"))
    assert approver.asked == []
    assert calls == [("lookup", {"q": "x"})]
    assert tool_results(conv)["t1"]["outcome"] == "ok"


def test_a_write_is_put_to_its_hooks_once(store, conv):
    """The check's hook verdict is the permission stage's: a hook is not called twice for one call."""
    seen: list[str] = []

    def allow_notes(request: Any) -> str:
        seen.append(request.tool_use_id)
        return "allow"

    hooks = [HookRegistration(source="project", name="notes", matcher="write_note", callable=allow_notes)]
    calls: list[Any] = []
    engine = PolicyEngine(store, guard="safe", hooks=hooks)
    tool = make_tool("write_note", access="write", calls=calls)
    run_turn(store, conv, engine, [tool], write_calls({"text": "a"}, {"text": "b"}))
    assert seen == ["t1", "t2"]
    assert [c[1] for c in calls] == [{"text": "a"}, {"text": "b"}]
