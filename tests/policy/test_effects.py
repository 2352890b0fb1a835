"""Every egress spelling trips the guard's egress floor and the deny arms, and asks in a real turn."""

from __future__ import annotations

from typing import Any

import pytest

from neuralis_jupyter.contracts import DEFAULT_ROLES
from neuralis_jupyter.policy import PolicyEngine, evaluate_arms, guard_floor
from neuralis_jupyter.policy.arms import PolicyConfig
from neuralis_jupyter.providers.scripted import Call, Reply
from neuralis_jupyter.runtime.permission import PermissionRequest
from tests.contracts.test_envelope import EGRESS_SPELLINGS, NOT_CONSENT

from .helpers import RecordingApprover, make_tool, run_turn, session, tool_results


def read_request(effect: str) -> PermissionRequest:
    return PermissionRequest(
        session=session(), tool_use_id="t1", name="probe", input={}, access="read",
        effects=frozenset({effect}), package_id="acme/fetcher", step=1,
    )  # fmt: skip


@pytest.mark.parametrize("effect", EGRESS_SPELLINGS)
def test_every_egress_spelling_hits_the_egress_floor(effect):
    for profile in ("safe", "balanced"):
        assert guard_floor(profile, read_request(effect), trust="trusted") == "egress"
    assert guard_floor("auto", read_request(effect), trust="trusted") is None


@pytest.mark.parametrize("effect", NOT_CONSENT)
def test_other_effects_on_a_read_hit_no_floor(effect):
    assert guard_floor("safe", read_request(effect), trust="trusted") is None


@pytest.mark.parametrize("effect", EGRESS_SPELLINGS)
def test_every_egress_spelling_meets_the_deny_arms(effect):
    tool = make_tool("fetcher", effects=frozenset({effect}), package_id="acme/fetcher")
    no_web = session(role="viewer", granted_features=DEFAULT_ROLES["viewer"].granted_features)
    capability = evaluate_arms(tool, no_web, config=PolicyConfig(), trust="trusted")
    assert (capability.allowed, capability.arm) == (False, "capability")
    ceiling = evaluate_arms(tool, session(), config=PolicyConfig(), trust="untrusted")
    assert (ceiling.allowed, ceiling.arm) == (False, "trust_ceiling")


@pytest.mark.parametrize("effect", ["egress", "egress:internet"])
def test_a_trusted_read_declaring_egress_asks_under_safe(store, conv, effect):
    calls: list[Any] = []
    tool = make_tool("fetcher", effects=frozenset({effect}), package_id="acme/fetcher", calls=calls)
    approver = RecordingApprover(approve=False)
    engine = PolicyEngine(store, guard="safe", approver=approver, trust_of=lambda _p: "trusted")
    replies = [Reply(calls=(Call(name="fetcher", input={"url": "x"}, id="t1"),)), Reply(text="done")]
    run_turn(store, conv, engine, [tool], replies)
    assert [i.tool_name for i in approver.asked] == ["fetcher"]
    assert calls == []
    assert tool_results(conv)["t1"]["outcome"] == "denied"
