from __future__ import annotations

import json

import pytest

from neuralis_jupyter._resources import builtin_package_dir
from neuralis_jupyter.contracts import Requires
from neuralis_jupyter.packages import AGENT_CORE_ID, HandlerBindingError, PackageLoader, UnknownPackage

from .builders import agent_md, ok_handler, session_for, tool, write_package

NATIVE = (
    "execute",
    "delegate",
    "todos",
    "compact_history",
    "ask_question",
    "web_fetch",
    "web_search",
    "read_tool_result",
    "wait",
)


def load(*roots, builtin=True):
    # The test packages ask for "trusted"; the operator grants it to each of them here.
    ids = [
        json.loads((r / "neuralis.json").read_text())["id"] for r in roots if (r / "neuralis.json").is_file()
    ]
    return PackageLoader(
        builtin_root=builtin_package_dir("agent-core") if builtin else None,
        roots=list(roots),
        entry_points=False,
        trusted=ids,
    ).load()


def bind_all(packages):
    for package in packages.packages:
        packages.bind_handlers(package.id, {t.name: ok_handler for t in package.contributions.tools})
    return packages


def gated_tools_package(tmp_path):
    # core.logs is escalation-only: admin holds it, member does not.
    return write_package(
        tmp_path / "ops",
        "ops-pkg",
        tools=[tool("read_logs", features=["core.logs"]), tool("status")],
    )


def test_a_gated_tool_is_hidden_from_a_member_and_offered_to_an_admin(tmp_path):
    packages = bind_all(load(gated_tools_package(tmp_path)))
    member, admin = session_for("member"), session_for("admin")
    assert "read_logs" not in packages.tool_registry(member)
    assert "status" in packages.tool_registry(member)
    assert "read_logs" in packages.tool_registry(admin)
    # Hidden, not marked: nothing in the member's view mentions it.
    assert "read_logs" not in repr(packages.visible(member))
    assert "read_logs" not in packages.overview(member)
    assert "read_logs" not in [t.name for t in packages.tools(member)]


def test_the_builtin_gates_execute_and_the_web_tools_by_feature():
    packages = bind_all(load())
    viewer = set(packages.tool_registry(session_for("viewer")).names)
    member = set(packages.tool_registry(session_for("member")).names)
    assert member == set(NATIVE)
    assert viewer == set(NATIVE) - {"execute", "web_fetch", "web_search"}


def test_a_fully_gated_package_is_omitted_while_an_empty_one_stays(tmp_path):
    write_package(
        tmp_path / "root" / "gated",
        "gated-pkg",
        tools=[tool("escalate", features=["exec.unconfined"])],
        files={"skills/sudo/SKILL.md": "---\ndescription: d\nrequiredFeatures: [exec.unconfined]\n---\nx\n"},
    )
    write_package(tmp_path / "root" / "empty", "empty-pkg")
    write_package(tmp_path / "root" / "broken", raw_manifest="[]")
    packages = bind_all(load(tmp_path / "root"))
    member_view = {v.id: v for v in packages.visible(session_for("member"))}
    assert "gated-pkg" not in member_view
    assert member_view["empty-pkg"].status == "ok"
    assert member_view["broken"].status == "refused"
    assert member_view["broken"].code == "load_failed"
    assert "gated-pkg" not in packages.overview(session_for("member"))
    admin_view = {v.id: v for v in packages.visible(session_for("admin"))}
    assert [t.name for t in admin_view["gated-pkg"].tools] == ["escalate"]
    assert [s.name for s in admin_view["gated-pkg"].skills] == ["sudo"]


def test_a_partly_gated_package_shows_only_what_the_caller_holds(tmp_path):
    write_package(
        tmp_path / "p",
        "mixed-pkg",
        files={
            "agents/auditor.md": agent_md("auditor", extra="requiredFeatures: [core.logs]\n"),
            "agents/helper.md": agent_md("helper"),
            "instructions/secret.md": "---\nrequiredFeatures: [core.logs]\n---\nS\n",
            "rules/open.md": "O\n",
        },
    )
    packages = load(tmp_path / "p")
    member, admin = session_for("member"), session_for("admin")
    assert "auditor" not in [a.name for a in packages.agents(member)]
    assert {"auditor", "helper"} <= {a.name for a in packages.agents(admin)}
    assert [f.name for f in packages.prompt_files(member) if f.package_id == "mixed-pkg"] == ["open.md"]
    assert [f.name for f in packages.prompt_files(admin) if f.package_id == "mixed-pkg"] == [
        "secret.md",
        "open.md",
    ]


def test_prompt_files_are_instructions_then_rules_in_package_then_name_order(tmp_path):
    write_package(
        tmp_path / "p",
        "extra-pkg",
        files={"rules/a-rule.md": "r\n", "instructions/z.md": "z\n", "instructions/b.md": "b\n"},
    )
    files = load(tmp_path / "p").prompt_files(session_for("viewer"))
    assert [(f.package_id, f.category, f.name) for f in files] == [
        (AGENT_CORE_ID, "instruction", "neuralis-kernel.md"),
        ("extra-pkg", "instruction", "b.md"),
        ("extra-pkg", "instruction", "z.md"),
        (AGENT_CORE_ID, "rule", "tool-use.md"),
        ("extra-pkg", "rule", "a-rule.md"),
    ]


def test_runtime_tools_carry_the_declared_facts():
    packages = bind_all(load())
    registry = packages.tool_registry(session_for("owner"))
    execute, fetch, ask = registry.get("execute"), registry.get("web_fetch"), registry.get("ask_question")
    assert (execute.access, execute.effects, execute.requires, execute.intrinsic) == (
        "write",
        frozenset({"exec"}),
        Requires(features=("core.execute",)),
        False,
    )
    assert (fetch.access, fetch.effects, fetch.deterministic) == (
        "read",
        frozenset({"egress:external"}),
        False,
    )
    assert ask.barred_from_subagents
    assert ask.intrinsic
    assert all(t.attested and t.package_id == AGENT_CORE_ID for t in registry)
    assert all(t.handler is ok_handler for t in registry)


def test_a_tool_without_a_handler_is_declared_but_never_offered(tmp_path):
    packages = load(write_package(tmp_path / "p", "half-pkg", tools=[tool("bound"), tool("unbound")]))
    packages.bind_handlers("half-pkg", {"bound": ok_handler})
    owner = session_for("owner")
    assert [t.name for t in packages.tools(owner) if t.package_id == "half-pkg"] == ["bound"]
    assert "unbound" not in packages.tool_registry(owner)
    assert "unbound" in [t.name for v in packages.visible(owner) if v.id == "half-pkg" for t in v.tools]
    [entry] = [e for e in packages.health() if e["id"] == "half-pkg"]
    assert entry["status"] == "ok"
    assert entry["detail"] == ["tool 'unbound' has no handler; it is declared but offered to no model"]


def test_binding_handlers_checks_names_and_binds_once():
    packages = load()
    with pytest.raises(HandlerBindingError, match="declares no tool 'shell'"):
        packages.bind_handlers(AGENT_CORE_ID, {"shell": ok_handler})
    packages.bind_handlers("agent-core", {"todos": ok_handler})  # the slug names the same package
    with pytest.raises(HandlerBindingError, match="already has a handler"):
        packages.bind_handlers(AGENT_CORE_ID, {"todos": ok_handler})
    with pytest.raises(UnknownPackage):
        packages.bind_handlers("nobody", {})
    assert packages.tool_registry(session_for("member")).names == ["todos"]


def test_trust_of_an_unknown_package_is_an_error_not_a_default():
    with pytest.raises(UnknownPackage, match="'acme'"):
        load().trust_of("acme")
