"""Guard profiles: the prompt floors per profile, and the live sources a profile is read from."""

from __future__ import annotations

import asyncio

import pytest

from neuralis_jupyter.policy import DEFAULT_GUARD, LiveGuard, StoreGuard, evaluate_guard, guard_floor
from neuralis_jupyter.runtime.permission import PermissionRequest
from neuralis_jupyter.store.interactions import GuardOverrideStore

from .helpers import session


def request(access: str = "write", *effects: str, package_id: str = "agent-core") -> PermissionRequest:
    return PermissionRequest(
        session=session(),
        tool_use_id="t1",
        name="probe",
        input={},
        access=access,  # type: ignore[arg-type]
        effects=frozenset(effects),
        package_id=package_id,
        step=1,
    )


# request, trust, expected floor under safe, under balanced (auto never asks)
FLOORS = [
    (request("read", "egress:external"), "first-party", "egress", "egress"),
    (request("write", "exec"), "first-party", "exec", "exec"),
    (request("write", "destructive"), "first-party", "destructive", "destructive"),
    (request("write"), "trusted", "package_write", "package_write"),
    (request("write"), "untrusted", "package_write", "package_write"),
    (request("write"), "first-party", "write", None),
    (request("read"), "first-party", None, None),
    (request("read"), "untrusted", None, None),
]


@pytest.mark.parametrize(("req", "trust", "safe", "balanced"), FLOORS)
def test_prompt_floors(req, trust, safe, balanced):
    assert guard_floor("safe", req, trust=trust) == safe
    assert guard_floor("balanced", req, trust=trust) == balanced
    assert guard_floor("auto", req, trust=trust) is None
    assert evaluate_guard("safe", req, trust=trust) == ("ask" if safe else "allow")
    assert evaluate_guard("balanced", req, trust=trust) == ("ask" if balanced else "allow")
    assert evaluate_guard("auto", req, trust=trust) == "allow"


def test_an_unknown_profile_is_refused():
    assert DEFAULT_GUARD == "balanced"
    with pytest.raises(ValueError, match="guard profile"):
        evaluate_guard("yolo", request(), trust="first-party")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="guard profile"):
        LiveGuard().set("yolo")  # type: ignore[arg-type]


def test_live_guard_answers_the_latest_set():
    guard = LiveGuard("safe")
    assert asyncio.run(guard.current()) == "safe"
    guard.set("auto")
    assert asyncio.run(guard.current()) == "auto"


def test_store_guard_reads_the_override_row_each_time(store, conv):
    overrides = GuardOverrideStore(store.engine)
    fallback = LiveGuard("safe")
    guard = StoreGuard(overrides, project_id="default", conversation_id=conv.id, fallback=fallback)
    assert asyncio.run(guard.current()) == "safe"  # no row: the fallback
    overrides.set("default", conv.id, "auto", set_by="alice")
    assert asyncio.run(guard.current()) == "auto"
    overrides.set("default", conv.id, "balanced", set_by="bob")  # an update, not a second row
    assert asyncio.run(guard.current()) == "balanced"
    assert overrides.get("default", "another-conversation") is None
    overrides.clear("default", conv.id)
    fallback.set("auto")
    assert asyncio.run(guard.current()) == "auto"
    with pytest.raises(ValueError, match="guard profile"):
        overrides.set("default", conv.id, "yolo", set_by="alice")  # type: ignore[arg-type]


def test_store_guard_falls_back_to_safe_when_the_row_cannot_be_read(store, conv, caplog):
    overrides = GuardOverrideStore(store.engine)
    guard = StoreGuard(overrides, project_id="default", conversation_id=conv.id, fallback="auto")
    with store.engine.begin() as c:
        c.exec_driver_sql("DROP TABLE guard_overrides")
    assert asyncio.run(guard.current()) == "safe"
    assert "could not read the guard override" in caplog.text
