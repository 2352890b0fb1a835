"""PreToolUse hooks: priority order, no opinion, fail closed, declarative config, and the engine's use."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from neuralis_jupyter.policy import (
    HOOK_SOURCE_PRIORITY,
    HookConfigError,
    HookRegistration,
    HookVerdict,
    PolicyEngine,
    PreToolUseHooks,
    hooks_from_config,
)
from neuralis_jupyter.runtime.permission import PermissionRequest

from .helpers import RecordingApprover, make_tool, session


def request(name: str = "write_note") -> PermissionRequest:
    return PermissionRequest(
        session=session(request_id="r-1"),
        tool_use_id="t1",
        name=name,
        input={"text": "hi"},
        access="write",
        effects=frozenset(),
        package_id="agent-core",
        step=1,
    )


def hook(
    source: str, name: str, answer: Any, matcher: str = "*", seen: list[str] | None = None
) -> HookRegistration:
    def call(_req: PermissionRequest) -> Any:
        if seen is not None:
            seen.append(name)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return HookRegistration(source=source, name=name, matcher=matcher, callable=call)  # type: ignore[arg-type]


def evaluate(*registrations: HookRegistration, name: str = "write_note"):
    return asyncio.run(PreToolUseHooks(registrations).evaluate(request(name)))


def test_priority_constant():
    order = sorted(HOOK_SOURCE_PRIORITY, key=HOOK_SOURCE_PRIORITY.__getitem__)
    assert order == ["admin", "managed", "project", "host", "user", "skill", "package"]
    assert HOOK_SOURCE_PRIORITY["admin"] == HOOK_SOURCE_PRIORITY["managed"]
    assert HOOK_SOURCE_PRIORITY["project"] == HOOK_SOURCE_PRIORITY["host"]
    assert HOOK_SOURCE_PRIORITY["user"] == HOOK_SOURCE_PRIORITY["skill"]


def test_an_admin_allow_beats_a_package_deny_registered_first():
    out = evaluate(hook("package", "pkg-no", "deny"), hook("admin", "admin-yes", "allow"))
    assert (out.decision, out.hook, out.source) == ("allow", "admin-yes", "admin")


def test_a_user_deny_beats_a_package_allow():
    out = evaluate(
        hook("package", "pkg-yes", "allow"),
        hook("user", "user-no", HookVerdict(decision="deny", reason="mine")),
    )
    assert (out.decision, out.reason, out.hook) == ("deny", "mine", "user-no")


def test_no_opinion_falls_through_and_order_is_stable_within_a_tier():
    seen: list[str] = []
    out = evaluate(
        hook("package", "pkg", "ask", seen=seen),
        hook("project", "proj-1", None, seen=seen),
        hook("host", "host-1", None, seen=seen),
        hook("project", "proj-2", None, seen=seen),
        hook("admin", "other-tool", "deny", matcher="web_*", seen=seen),
    )
    assert seen == ["proj-1", "host-1", "proj-2", "pkg"]  # the non-matching admin hook is never called
    assert (out.decision, out.hook) == ("ask", "pkg")
    assert evaluate(hook("user", "quiet", None)) is None


def test_a_raising_hook_denies_and_names_itself(caplog):
    out = evaluate(hook("project", "flaky", RuntimeError("boom")), hook("package", "pkg", "allow"))
    assert out.decision == "deny"
    assert "'flaky'" in out.reason
    assert "RuntimeError" in out.reason
    assert "PreToolUse hook 'flaky'" in caplog.text


def test_a_hook_returning_nonsense_denies():
    out = evaluate(hook("user", "confused", "maybe"))
    assert (out.decision, out.hook) == ("deny", "confused")


def test_a_slow_async_hook_times_out_and_denies():
    async def slow(_req: PermissionRequest) -> str:
        await asyncio.sleep(5)
        return "allow"

    hooks = PreToolUseHooks(
        [HookRegistration(source="project", name="slow", matcher="*", callable=slow)], timeout=0.05
    )
    out = asyncio.run(hooks.evaluate(request()))
    assert (out.decision, out.hook) == ("deny", "slow")
    assert "TimeoutError" in out.reason


def test_async_hooks_are_awaited():
    async def deny_web(req: PermissionRequest) -> HookVerdict | None:
        return HookVerdict(decision="deny", reason="no web") if req.name.startswith("web_") else None

    registration = HookRegistration(source="admin", name="no-web", matcher="*", callable=deny_web)
    assert evaluate(registration, name="write_note") is None
    assert evaluate(registration, name="web_fetch").reason == "no web"


def test_hooks_from_config():
    hooks = hooks_from_config(
        [
            {"source": "package", "match": "write_*", "decision": "deny", "reason": "package says no"},
            {"source": "project", "match": "write_note", "decision": "allow", "name": "notes-ok"},
            {"source": "admin", "decision": "ask"},
        ]
    )
    assert [(h.source, h.name, h.matcher) for h in hooks] == [
        ("package", "package:deny:write_*", "write_*"),
        ("project", "notes-ok", "write_note"),
        ("admin", "admin:ask:*", "*"),
    ]
    out = evaluate(*hooks[:2])
    assert (out.decision, out.hook) == ("allow", "notes-ok")
    out = evaluate(*hooks)
    assert (out.decision, out.source) == ("ask", "admin")


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("deny", "expected an object"),
        ({"source": "root", "decision": "deny"}, "source must be one of"),
        ({"source": "user", "decision": "maybe"}, "decision must be allow, deny or ask"),
        ({"source": "user", "decision": "deny", "match": ""}, "match must be a tool-name glob"),
        ({"source": "user", "decision": "deny", "reason": 3}, "reason must be text"),
        ({"source": "user", "decision": "deny", "matcher": "*"}, "unknown key"),
    ],
)
def test_hooks_from_config_refuses_malformed_entries(entry, problem):
    with pytest.raises(HookConfigError, match=problem) as info:
        hooks_from_config([{"source": "user", "decision": "allow"}, entry])
    assert info.value.index == 1


def test_engine_hook_decisions_and_an_ask_under_auto(store):
    """A hook's allow/deny decide outright; a hook's ask asks even when the guard is auto."""
    calls: list[Any] = []
    approver = RecordingApprover(approve=True)
    engine = PolicyEngine(
        store,
        guard="auto",
        approver=approver,
        hooks=hooks_from_config(
            [
                {"source": "project", "match": "write_secret", "decision": "deny", "reason": "not here"},
                {
                    "source": "project",
                    "match": "write_note",
                    "decision": "ask",
                    "reason": "notes are reviewed",
                },
                {"source": "package", "match": "*", "decision": "allow"},
            ]
        ),
    )

    async def decide(name: str):
        tool = make_tool(name, access="write", calls=calls)
        who = session(request_id="r-1", tool_use_id=f"id-{name}")
        await engine.check(tool=tool, input={"text": "x"}, session=who)
        req = PermissionRequest(
            session=who, tool_use_id=f"id-{name}", name=name, input={"text": "x"}, access="write",
            effects=frozenset(), package_id="agent-core", step=1, tool=tool,
        )  # fmt: skip
        return await engine(req)

    denied = asyncio.run(decide("write_secret"))
    assert (denied.allowed, denied.reason, denied.decided_by) == (
        False,
        "not here",
        "hook:project:deny:write_secret",
    )
    allowed = asyncio.run(decide("write_other"))
    assert (allowed.allowed, allowed.decided_by) == (True, "hook:package:allow:*")
    assert approver.asked == []
    asked = asyncio.run(decide("write_note"))
    assert asked.allowed
    assert asked.interaction_id is not None
    assert [i.asked_by for i in approver.asked] == ["hook:project:ask:write_note"]
    rows = {(e.subject, e.action, e.arm) for e in store.audit.list("default")}
    assert ("write_secret", "tool.denied", "hook") in rows
    assert ("write_other", "tool.allowed", "hook") in rows
    assert ("write_note", "tool.asked", "hook") in rows
    assert ("write_note", "tool.allowed", "approval") in rows
