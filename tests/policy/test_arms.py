"""The deny arms in order, as a table: each row names the arm that must deny (or None for allowed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from neuralis_jupyter.contracts import DEFAULT_ROLES
from neuralis_jupyter.policy import ARMS, PolicyConfig, PolicyEngine

from .helpers import make_tool, session

OWNER = ("*",)
MEMBER = DEFAULT_ROLES["member"].granted_features
VIEWER = DEFAULT_ROLES["viewer"].granted_features
TIERS = {"agent-core": "first-party", "lab": "trusted", "shady": "untrusted"}
EGRESS = frozenset({"egress:external"})
EXEC = frozenset({"exec"})

# id, tool, granted features, config, the arm expected to deny (None: allowed)
ROWS: list[tuple[str, dict[str, Any], tuple[str, ...], PolicyConfig, str | None]] = [
    ("plain read", {}, MEMBER, PolicyConfig(), None),
    ("first-party write", {"access": "write"}, MEMBER, PolicyConfig(), None),
    ("blocklisted", {"name": "rm_rf"}, OWNER, PolicyConfig(blocklist=("rm_*",)), "blocklist"),
    (
        "blocklist before feature gate",
        {"name": "rm_rf", "requires": ("mcp.apps",)},
        MEMBER,
        PolicyConfig(blocklist=("rm_*",)),
        "blocklist",
    ),
    (
        "blocklist binds intrinsic",
        {"name": "todos", "intrinsic": True},
        OWNER,
        PolicyConfig(blocklist=("todos",)),
        "blocklist",
    ),
    ("untrusted write", {"package_id": "shady", "access": "write"}, OWNER, PolicyConfig(), "trust_ceiling"),
    (
        "untrusted egress read",
        {"package_id": "shady", "effects": EGRESS},
        OWNER,
        PolicyConfig(),
        "trust_ceiling",
    ),
    ("untrusted exec read", {"package_id": "shady", "effects": EXEC}, OWNER, PolicyConfig(), "trust_ceiling"),
    ("untrusted plain read", {"package_id": "shady"}, MEMBER, PolicyConfig(), None),
    ("trusted write", {"package_id": "lab", "access": "write"}, MEMBER, PolicyConfig(), None),
    (
        "trusted exec",
        {"package_id": "lab", "access": "write", "effects": EXEC},
        OWNER,
        PolicyConfig(),
        "trust_ceiling",
    ),
    (
        "trusted exec allowlisted",
        {"name": "run_cell", "package_id": "lab", "access": "write", "effects": EXEC},
        MEMBER,
        PolicyConfig(ceiling_allowlist=("lab/run_*",)),
        None,
    ),
    (
        "untrusted exec never allowlisted",
        {"name": "run_cell", "package_id": "shady", "effects": EXEC},
        OWNER,
        PolicyConfig(ceiling_allowlist=("shady/*",)),
        "trust_ceiling",
    ),
    (
        "trust ceiling before capability",
        {"package_id": "shady", "access": "write"},
        VIEWER,
        PolicyConfig(),
        "trust_ceiling",
    ),
    ("viewer write", {"access": "write"}, VIEWER, PolicyConfig(), "capability"),
    (
        "exec without exec.container",
        {"access": "write", "effects": EXEC},
        ("core.execute",),
        PolicyConfig(),
        "capability",
    ),
    (
        "exec with exec.unconfined",
        {"access": "write", "effects": EXEC},
        ("core.execute", "exec.unconfined"),
        PolicyConfig(),
        None,
    ),
    ("egress without core.web", {"effects": EGRESS}, ("core.execute",), PolicyConfig(), "capability"),
    ("egress with core.web", {"effects": EGRESS}, ("core.web",), PolicyConfig(), None),
    (
        "capability before allowlist",
        {"name": "other", "access": "write"},
        VIEWER,
        PolicyConfig(allowlist=("lookup",)),
        "capability",
    ),
    ("allowlist miss", {"name": "other"}, OWNER, PolicyConfig(allowlist=("lookup",)), "allowlist"),
    ("allowlist hit", {"name": "lookup"}, OWNER, PolicyConfig(allowlist=("look*",)), None),
    (
        "allowlist spares intrinsic",
        {"name": "todos", "intrinsic": True},
        OWNER,
        PolicyConfig(allowlist=()),
        None,
    ),
    (
        "allowlist before feature gate",
        {"name": "other", "requires": ("mcp.apps",)},
        MEMBER,
        PolicyConfig(allowlist=("lookup",)),
        "allowlist",
    ),
    ("feature gate", {"requires": ("mcp.apps",)}, MEMBER, PolicyConfig(), "feature_gate"),
    ("feature gate met", {"requires": ("mcp.apps",)}, OWNER, PolicyConfig(), None),
]


def test_the_arms_are_in_the_documented_order():
    assert [name for name, _ in ARMS] == [
        "blocklist",
        "trust_ceiling",
        "capability",
        "allowlist",
        "feature_gate",
    ]


@pytest.mark.parametrize(("row", "tool_kw", "granted", "config", "arm"), ROWS, ids=[r[0] for r in ROWS])
def test_arm_table(store, row, tool_kw, granted, config, arm):
    kw = {"name": "probe", **tool_kw}
    tool = make_tool(kw.pop("name"), **kw)
    engine = PolicyEngine(store, config=config, trust_of=TIERS.__getitem__)
    who = session(granted_features=granted, request_id="r-1", tool_use_id="t1")

    decision = asyncio.run(engine.check(tool=tool, input={}, session=who))

    assert decision.allowed is (arm is None), decision
    assert decision.arm == arm
    assert decision.generic is (arm == "feature_gate")
    if arm == "feature_gate":
        assert decision.reason == f"Tool not available: {tool.name}"
    [event] = store.audit.list("default")
    assert (event.action, event.subject, event.arm) == (
        "tool.allowed" if arm is None else "tool.denied",
        tool.name,
        arm or "policy",
    )
    assert (event.user_id, event.request_id) == ("alice", "r-1")
    assert event.details == {"package_id": tool.package_id, "tool_use_id": "t1"}


def test_an_unknown_or_failing_trust_answer_counts_as_untrusted(store):
    def trust_of(package_id: str) -> Any:
        if package_id == "boom":
            raise KeyError(package_id)
        return "very-trusted"

    engine = PolicyEngine(store, trust_of=trust_of)
    assert engine.trust("boom") == "untrusted"
    assert engine.trust("odd") == "untrusted"
    decision = asyncio.run(
        engine.check(tool=make_tool("w", access="write", package_id="boom"), input={}, session=session())
    )
    assert decision.arm == "trust_ceiling"


def test_the_builtin_package_is_the_only_default_first_party(store):
    engine = PolicyEngine(store)
    assert engine.trust("agent-core") == "first-party"
    assert engine.trust("anything-else") == "untrusted"


def test_policy_config_from_json():
    config = PolicyConfig.from_json(
        {"blocklist": ["rm_*"], "allowlist": ["lookup"], "ceiling_allowlist": ["lab/run_*"]}
    )
    assert config == PolicyConfig(
        blocklist=("rm_*",), allowlist=("lookup",), ceiling_allowlist=("lab/run_*",)
    )
    assert PolicyConfig.from_json(None) == PolicyConfig()
    assert PolicyConfig.from_json({"allowlist": None}).allowlist is None
    with pytest.raises(ValueError, match="unknown key"):
        PolicyConfig.from_json({"blocklst": []})
    with pytest.raises(ValueError, match="list of tool-name globs"):
        PolicyConfig.from_json({"blocklist": "rm_*"})
