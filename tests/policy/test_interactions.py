"""Pending interactions: persisted input and hash, replay only what was stored, once, after a restart."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from neuralis_jupyter.contracts import DEFAULT_ROLES, Role, create_system_session
from neuralis_jupyter.policy import (
    DeferApprover,
    InteractionAlreadyResolved,
    InteractionForbidden,
    InteractionNotFound,
    PolicyEngine,
    ReplayRefused,
    project_session_source,
)
from neuralis_jupyter.runtime.tools import ToolRegistry
from neuralis_jupyter.store import NotFound, Store
from neuralis_jupyter.store.interactions import InteractionConflict, canonical_json, input_hash
from neuralis_jupyter.store.migrations import pending_interactions
from neuralis_jupyter.store.projects import Project
from neuralis_jupyter.store.sql import dispose_engines

from .helpers import (
    RecordingApprover,
    context_factory,
    make_tool,
    run_turn,
    session,
    tool_results,
    write_calls,
)

MEMBER = DEFAULT_ROLES["member"].granted_features


def tamper(store: Store, interaction_id: str, *, text: str, rehash: bool = False) -> None:
    values: dict[str, Any] = {"input_json": text}
    if rehash:
        values["input_hash"] = input_hash(text)
    with store.engine.begin() as c:
        c.execute(
            pending_interactions.update().where(pending_interactions.c.id == interaction_id).values(**values)
        )


def lab_project(store: Store, *features: str) -> None:
    """alice holds the custom 'lab' role with exactly ``features``; bob is a member."""
    role = Role(name="lab", priority=30, granted_features=features, agent_access="own")
    store.projects.save(
        Project(
            id="default",
            name="Default",
            members={"alice": "lab", "bob": "member", "olga": "owner"},
            roles={"lab": role},
        )
    )


# -- the store ----------------------------------------------------------------------------------------


def test_interaction_store_lifecycle_and_restart(tmp_path):
    store = Store.open(tmp_path / "home")
    who = session(request_id="r-1", tool_use_id="t1", conversation_id="c-1")
    created = store.interactions.create(
        session=who, tool_name="write_note", package_id="agent-core", input={"b": [1, 2], "a": "é"},
        asked_by="guard:safe", guard_profile="safe",
    )  # fmt: skip
    assert created.id.startswith("pi-")
    assert created.input_json == '{"a":"é","b":[1,2]}'
    assert created.input_hash == input_hash(canonical_json({"a": "é", "b": [1, 2]}))
    assert (created.status, created.tool_use_id, created.conversation_id) == ("pending", "t1", "c-1")

    dispose_engines()  # the process "restarts": a fresh store on the same file
    fresh = Store.open(tmp_path / "home")
    assert [p.id for p in fresh.interactions.list_pending("default")] == [created.id]
    assert [p.id for p in fresh.interactions.list_pending("default", "c-1")] == [created.id]
    assert fresh.interactions.list_pending("default", "other") == []
    assert fresh.interactions.list_pending("elsewhere") == []

    approved = fresh.interactions.resolve(created.id, approve=True, decided_by="alice", answer={"ok": True})
    assert (approved.status, approved.decided_by, approved.answer_json) == (
        "approved",
        "alice",
        '{"ok":true}',
    )
    with pytest.raises(InteractionConflict, match="approved, not pending"):
        fresh.interactions.resolve(created.id, approve=False, decided_by="mallory")
    assert fresh.interactions.mark_executed(created.id).status == "executed"
    with pytest.raises(InteractionConflict):
        fresh.interactions.mark_executed(created.id)
    with pytest.raises(NotFound):
        fresh.interactions.get("pi-nope")


def test_sentinel_sessions_are_never_persisted_and_old_asks_expire(store):
    from neuralis_jupyter.contracts import SentinelIdentityError

    with pytest.raises(SentinelIdentityError):
        store.interactions.create(
            session=session(user_id="__system__"),
            tool_name="w",
            package_id="p",
            input={},
            asked_by="guard:safe",
        )
    pending = store.interactions.create(
        session=session(), tool_name="w", package_id="p", input={}, asked_by="x"
    )
    assert store.interactions.expire(older_than=datetime.now(UTC) - timedelta(hours=1)) == 0
    assert store.interactions.expire(older_than=datetime.now(UTC) + timedelta(seconds=1)) == 1
    assert store.interactions.get(pending.id).status == "expired"


# -- in-turn approvals go through the replay path ------------------------------------------------------


def test_an_approval_of_tampered_input_is_refused_and_the_tool_not_run(store, conv):
    async def edit_row(interaction: Any) -> None:
        await asyncio.to_thread(tamper, store, interaction.id, text='{"text":"rm -rf /"}')

    calls: list[Any] = []
    approver = RecordingApprover(approve=True, before=edit_row)
    engine = PolicyEngine(store, guard="safe", approver=approver)

    run_turn(
        store,
        conv,
        engine,
        [make_tool("write_note", access="write", calls=calls)],
        write_calls({"text": "hi"}),
    )

    assert calls == []
    [result] = tool_results(conv).values()
    assert result["outcome"] == "denied"
    assert "does not match its hash" in result["content"]
    [denied] = store.audit.list("default", action="tool.denied")
    assert (denied.arm, denied.details["check"]) == ("replay", "input_hash")
    assert store.interactions.get(approver.asked[0].id).status == "approved"  # approved, never executed


def test_a_consistent_rewrite_of_input_and_hash_is_refused_in_turn(store, conv):
    """Even with a matching hash, the in-turn replay only runs the input the runtime validated."""

    async def rewrite(interaction: Any) -> None:
        await asyncio.to_thread(tamper, store, interaction.id, text='{"text":"evil"}', rehash=True)

    calls: list[Any] = []
    engine = PolicyEngine(store, guard="safe", approver=RecordingApprover(before=rewrite))
    run_turn(
        store,
        conv,
        engine,
        [make_tool("write_note", access="write", calls=calls)],
        write_calls({"text": "hi"}),
    )
    assert calls == []
    assert tool_results(conv)["t1"]["outcome"] == "denied"


def test_the_feature_gate_is_rechecked_on_replay(store, conv):
    """The feature is revoked in project.json while the call waits; the approval cannot run it."""
    features = ("core.execute", "mcp.apps")
    lab_project(store, *features)

    async def revoke(_interaction: Any) -> None:
        await asyncio.to_thread(lab_project, store, "core.execute")

    calls: list[Any] = []
    approver = RecordingApprover(approve=True, before=revoke)
    engine = PolicyEngine(
        store, guard="safe", approver=approver, session_source=project_session_source(store.projects)
    )
    who = store.projects.session_for("alice", "default", agent_id="assistant")
    tool = make_tool("write_app", access="write", requires=("mcp.apps",), calls=calls)

    run_turn(store, conv, engine, [tool], write_calls({"x": 1}, name="write_app"), who=who)

    assert len(approver.asked) == 1
    assert calls == []
    assert tool_results(conv)["t1"]["outcome"] == "denied"
    [denied] = store.audit.list("default", action="tool.denied")
    assert (denied.arm, denied.details["check"]) == ("feature_gate", "policy")


# -- out of band: left pending, approved later, maybe by another process --------------------------------


class SlowApprover:
    async def ask(self, interaction: Any) -> None:
        await asyncio.sleep(30)


@pytest.mark.parametrize("kind", ["defer", "timeout"])
def test_a_pending_interaction_is_approved_after_a_restart_and_runs_once(tmp_path, kind):
    home = tmp_path / "home"
    store = Store.open(home)
    conv = store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
    first_calls: list[Any] = []
    engine = PolicyEngine(
        store,
        guard="safe",
        approver=DeferApprover() if kind == "defer" else SlowApprover(),
        approval_timeout=0.05,
    )
    run_turn(
        store,
        conv,
        engine,
        [make_tool("write_note", access="write", calls=first_calls)],
        write_calls({"text": "keep me"}),
    )
    assert first_calls == []
    [result] = tool_results(conv).values()
    assert "stays pending as interaction pi-" in result["content"]

    dispose_engines()  # the kernel exits; the server opens the store
    fresh = Store.open(home)
    [pending] = fresh.interactions.list_pending("default", conv.id)
    calls: list[Any] = []
    tools = ToolRegistry.of([make_tool("write_note", access="write", calls=calls)])
    later = PolicyEngine(fresh)
    runner = context_factory(fresh, conv)

    with pytest.raises(ReplayRefused, match="pending, not approved"):
        asyncio.run(later.replay(pending.id, tools=tools, runner=runner))
    resolution = asyncio.run(later.resolve(pending.id, approve=True, by=session(), reason="fine"))
    assert (resolution.status, resolution.decided_by) == ("approved", "alice")

    out = asyncio.run(later.replay(pending.id, tools=tools, runner=runner))
    assert out.content == "write_note ran with [('text', 'keep me')]"
    assert calls == [("write_note", {"text": "keep me"})]
    with pytest.raises(ReplayRefused, match="executed, not approved") as info:
        asyncio.run(later.replay(pending.id, tools=tools, runner=runner))
    assert info.value.check == "status"
    assert len(calls) == 1
    actions = [e.action for e in fresh.audit.list("default")]
    assert "interaction.approved" in actions
    assert "interaction.replayed" in actions


def defer_one(store: Store, conv: Any, who: Any = None, **tool_kw: Any) -> Any:
    engine = PolicyEngine(store, guard="safe", approver=DeferApprover())
    tool = make_tool("write_note", access="write", **tool_kw)
    run_turn(store, conv, engine, [tool], write_calls({"text": "hi"}), who=who)
    [pending] = store.interactions.list_pending("default")
    return pending


def test_an_out_of_band_replay_of_tampered_input_is_refused(store, conv):
    pending = defer_one(store, conv)
    tamper(store, pending.id, text='{"text":"evil"}')
    engine = PolicyEngine(store)
    asyncio.run(engine.resolve(pending.id, approve=True, by=session()))
    calls: list[Any] = []
    tools = ToolRegistry.of([make_tool("write_note", access="write", calls=calls)])
    with pytest.raises(ReplayRefused) as info:
        asyncio.run(engine.replay(pending.id, tools=tools, runner=context_factory(store, conv)))
    assert info.value.check == "input_hash"
    assert calls == []


def test_an_out_of_band_replay_rechecks_the_feature_gate(store, conv):
    lab_project(store, "core.execute", "mcp.apps")
    who = store.projects.session_for("alice", "default", agent_id="assistant")
    pending = defer_one(store, conv, who=who, requires=("mcp.apps",))
    lab_project(store, "core.execute")  # revoked while it waited
    engine = PolicyEngine(store, session_source=project_session_source(store.projects))
    asyncio.run(engine.resolve(pending.id, approve=True, by=who))
    calls: list[Any] = []
    tools = ToolRegistry.of([make_tool("write_note", access="write", requires=("mcp.apps",), calls=calls)])
    with pytest.raises(ReplayRefused) as info:
        asyncio.run(engine.replay(pending.id, tools=tools, runner=context_factory(store, conv)))
    assert (info.value.check, info.value.arm) == ("policy", "feature_gate")
    assert calls == []
    # the tool itself gone from the catalog is refused too
    with pytest.raises(ReplayRefused) as gone:
        asyncio.run(engine.replay(pending.id, tools=ToolRegistry(), runner=context_factory(store, conv)))
    assert gone.value.check == "tool"


def test_concurrent_replays_run_the_call_once(store, conv):
    pending = defer_one(store, conv)
    engine = PolicyEngine(store)
    asyncio.run(engine.resolve(pending.id, approve=True, by=session()))
    calls: list[Any] = []
    tools = ToolRegistry.of([make_tool("write_note", access="write", calls=calls)])
    runner = context_factory(store, conv)

    async def both() -> list[Any]:
        return await asyncio.gather(
            *(engine.replay(pending.id, tools=tools, runner=runner) for _ in range(4)), return_exceptions=True
        )

    outcomes = asyncio.run(both())
    assert len(calls) == 1
    assert sum(isinstance(o, ReplayRefused) for o in outcomes) == 3


def test_who_may_resolve(store, conv):
    lab_project(store, *MEMBER)
    alice = store.projects.session_for("alice", "default")
    bob = store.projects.session_for("bob", "default")  # same priority as alice's role, not stronger
    olga = store.projects.session_for("olga", "default")  # the owner
    engine = PolicyEngine(store)

    first = defer_one(store, conv, who=alice.replace(agent_id="assistant"))
    with pytest.raises(InteractionForbidden):
        asyncio.run(engine.resolve(first.id, approve=True, by=bob))
    with pytest.raises(InteractionNotFound):
        asyncio.run(engine.resolve(first.id, approve=True, by=olga.replace(project_id="other")))
    with pytest.raises(InteractionNotFound):
        asyncio.run(engine.resolve("pi-missing", approve=True, by=olga))
    with pytest.raises(InteractionForbidden):
        asyncio.run(
            engine.resolve(first.id, approve=True, by=create_system_session("bootstrap", "agent-core", alice))
        )
    assert (
        asyncio.run(engine.resolve(first.id, approve=False, by=olga, reason="not today")).status == "denied"
    )
    with pytest.raises(InteractionAlreadyResolved):
        asyncio.run(engine.resolve(first.id, approve=True, by=alice))
    with pytest.raises(ReplayRefused, match="denied, not approved"):
        asyncio.run(engine.replay(first.id, tools=ToolRegistry(), runner=context_factory(store, conv)))


EVIL = '{"text":"evil"}'


@pytest.mark.parametrize(
    ("text", "digest", "refused"),
    [
        (None, None, None),  # untouched: exactly the stored input runs
        (EVIL, None, "input_hash"),  # the input edited, not its hash
        (None, input_hash(EVIL), "input_hash"),  # the hash edited, not the input
        (EVIL, input_hash(EVIL), None),  # the row rewritten consistently: still only the row can run
    ],
)
def test_nobody_can_supply_arguments(store, conv, text, digest, refused):
    """What runs is the row's input, verified against its hash, or nothing: no caller hands in another."""
    pending = defer_one(store, conv)
    engine = PolicyEngine(store)
    with pytest.raises(TypeError):
        engine.resolve(pending.id, approve=True, by=session(), input={"text": "evil"})  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        engine.replay(pending.id, tools=ToolRegistry(), runner=None, arguments={})  # type: ignore[call-arg]
    values = {k: v for k, v in (("input_json", text), ("input_hash", digest)) if v is not None}
    if values:
        with store.engine.begin() as c:
            t = pending_interactions
            c.execute(t.update().where(t.c.id == pending.id).values(**values))
    asyncio.run(engine.resolve(pending.id, approve=True, by=session()))
    calls: list[Any] = []
    tools = ToolRegistry.of([make_tool("write_note", access="write", calls=calls)])
    replay = engine.replay(pending.id, tools=tools, runner=context_factory(store, conv))
    if refused is not None:
        with pytest.raises(ReplayRefused) as info:
            asyncio.run(replay)
        assert (info.value.check, calls) == (refused, [])
        return
    asyncio.run(replay)
    stored = store.interactions.get(pending.id)
    assert calls == [("write_note", json.loads(stored.input_json))]
    assert stored.status == "executed"


def test_the_stored_row_keeps_the_validated_input_and_session(store, conv):
    pending = defer_one(store, conv)
    with store.engine.connect() as c:
        row = c.execute(sa.select(pending_interactions)).one()
    assert row.input_json == '{"text":"hi"}'
    assert row.input_hash == input_hash('{"text":"hi"}')
    assert (row.kind, row.asked_by, row.guard_profile) == ("tool_approval", "guard:safe", "safe")
    assert '"user_id":"alice"' in row.session_json
    assert pending.request_id is not None


def test_a_replay_revalidates_the_stored_input(store, conv):
    pending = defer_one(store, conv)
    engine = PolicyEngine(store)
    asyncio.run(engine.resolve(pending.id, approve=True, by=session()))
    calls: list[Any] = []
    strict = {"type": "object", "properties": {"text": {"type": "integer"}}}
    tools = ToolRegistry.of([make_tool("write_note", access="write", calls=calls, schema=strict)])
    with pytest.raises(ReplayRefused, match="no longer fits write_note's schema") as info:
        asyncio.run(engine.replay(pending.id, tools=tools, runner=context_factory(store, conv)))
    assert info.value.check == "input"
    tamper(store, pending.id, text="{not json", rehash=True)
    with pytest.raises(ReplayRefused, match="is not JSON"):
        asyncio.run(engine.replay(pending.id, tools=tools, runner=context_factory(store, conv)))
    assert calls == []
