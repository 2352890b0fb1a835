from __future__ import annotations

import json
import sys

import pytest

from neuralis_jupyter._resources import builtin_package_dir
from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.packages import AGENT_CORE_ID, REFUSAL_CODES, PackageLoader
from neuralis_jupyter.packages.loader import ENTRY_POINT_GROUP

from .builders import (
    cross_session,
    install_distribution,
    ok_handler,
    session_for,
    tool,
    write_package,
)


def load(*roots, builtin=False, entry_points=False, trusted=("demo-pkg",)):
    return PackageLoader(
        builtin_root=builtin_package_dir("agent-core") if builtin else None,
        roots=list(roots),
        entry_points=entry_points,
        trusted=trusted,
    ).load()


def by_id(health):
    return {(e["id"], e["status"]): e for e in health}


def assert_one_line(reason: str) -> None:
    assert reason
    assert "\n" not in reason
    assert len(reason) <= 300


# -- refused alone, with a closed code ----------------------------------------------------------------


def test_a_package_failing_validation_is_refused_next_to_a_healthy_one(tmp_path):
    write_package(tmp_path / "root" / "a-broken", raw_manifest='{"id": "broken-pkg", "version": "1"}')
    write_package(tmp_path / "root" / "b-healthy", "healthy-pkg", tools=[tool("lookup")])
    packages = load(tmp_path / "root", builtin=True)
    health = by_id(packages.health())
    refused = health[("broken-pkg", "refused")]
    assert refused["code"] == "load_failed"
    assert refused["source"] == f"root:{tmp_path / 'root' / 'a-broken'}"
    assert_one_line(refused["reason"])
    assert health[("healthy-pkg", "ok")]["code"] is None
    assert health[(AGENT_CORE_ID, "ok")]["status"] == "ok"
    assert [p.id for p in packages.packages] == [AGENT_CORE_ID, "healthy-pkg"]
    packages.bind_handlers("healthy-pkg", {"lookup": ok_handler})
    assert "lookup" in packages.tool_registry(session_for("member"))


def test_unreadable_manifests_are_named_by_folder(tmp_path):
    write_package(tmp_path / "root" / "garbled", raw_manifest="{nope")
    write_package(tmp_path / "root" / "fine", "fine-pkg")
    health = load(tmp_path / "root").health()
    assert [(e["id"], e["status"], e["code"]) for e in health] == [
        ("fine-pkg", "ok", None),
        ("garbled", "refused", "load_failed"),
    ]


def test_a_second_package_with_a_loaded_id_is_a_conflict(tmp_path):
    write_package(tmp_path / "one", "dup-pkg", tools=[tool("first")])
    write_package(tmp_path / "two", "dup-pkg", tools=[tool("second")])
    packages = load(tmp_path / "one", tmp_path / "two")
    [ok, refused] = packages.health()
    assert (ok["status"], refused["status"], refused["code"]) == ("ok", "refused", "conflict")
    assert "package id 'dup-pkg' is already taken" in refused["reason"]
    assert [t.name for t in packages.get("dup-pkg").contributions.tools] == ["first"]


def test_a_tool_name_taken_by_an_earlier_package_is_a_conflict(tmp_path):
    write_package(tmp_path / "p1", "first-pkg", tools=[tool("lookup")])
    write_package(tmp_path / "p2", "second-pkg", tools=[tool("lookup"), tool("other")])
    write_package(tmp_path / "p3", "third-pkg", tools=[tool("third")])
    health = load(tmp_path / "p1", tmp_path / "p2", tmp_path / "p3").health()
    assert [(e["id"], e["code"]) for e in health] == [
        ("first-pkg", None),
        ("second-pkg", "conflict"),
        ("third-pkg", None),
    ]
    assert "tool 'lookup' is already taken by package 'first-pkg'" in health[1]["reason"]


def test_a_builtin_agent_name_cannot_be_shadowed(tmp_path):
    write_package(
        tmp_path / "p", "shadow-pkg", files={"agents/general.md": "---\ndescription: mine\n---\nx\n"}
    )
    entry = by_id(load(tmp_path / "p", builtin=True).health())[("shadow-pkg", "refused")]
    assert entry["code"] == "conflict"
    assert "agent 'general'" in entry["reason"]


def test_a_reserved_id_in_a_third_party_manifest_is_refused(tmp_path):
    write_package(tmp_path / "p", "@neuralis/agent-core", trust="first-party")
    write_package(tmp_path / "q", "@neuralis/brain-core", trust="trusted")
    health = load(tmp_path / "p", tmp_path / "q", builtin=True).health()
    refused = [e for e in health if e["status"] == "refused"]
    assert [(e["id"], e["code"]) for e in refused] == [
        ("@neuralis/agent-core", "load_failed"),
        ("@neuralis/brain-core", "load_failed"),
    ]
    assert "package id '@neuralis/agent-core' is reserved" in refused[0]["reason"]
    assert "package id '@neuralis/brain-core' is reserved" in refused[1]["reason"]


def test_first_party_is_clamped_outside_the_builtin(tmp_path):
    write_package(tmp_path / "p", "claims-pkg", trust="first-party", tools=[tool("lookup")])
    packages = load(tmp_path / "p", builtin=True, trusted=("claims-pkg",))
    assert packages.trust_of("claims-pkg") == "trusted"
    assert packages.trust_of(AGENT_CORE_ID) == "first-party"
    [_, entry] = packages.health()
    assert entry["status"] == "ok"
    assert any("clamped to trusted" in d for d in entry["detail"])
    packages.bind_handlers("claims-pkg", {"lookup": ok_handler})
    assert packages.tool_registry(session_for("owner")).get("lookup").attested is False


def test_a_missing_root_is_reported_and_loading_goes_on(tmp_path):
    write_package(tmp_path / "real", "real-pkg")
    health = load(tmp_path / "nowhere", tmp_path / "real").health()
    assert [(e["id"], e["code"]) for e in health] == [
        (str(tmp_path / "nowhere"), "load_failed"),
        ("real-pkg", None),
    ]


def test_a_root_is_a_package_or_a_folder_of_packages_in_name_order(tmp_path):
    write_package(tmp_path / "single", "single-pkg")
    write_package(tmp_path / "many" / "zeta", "zeta-pkg")
    write_package(tmp_path / "many" / "alpha", "alpha-pkg")
    (tmp_path / "many" / "not-a-package").mkdir()
    packages = load(tmp_path / "many", tmp_path / "single", builtin=True)
    assert [p.id for p in packages.packages] == [AGENT_CORE_ID, "alpha-pkg", "zeta-pkg", "single-pkg"]


def test_from_settings_reads_package_roots(tmp_path):
    write_package(tmp_path / "extra", "extra-pkg")
    settings = NeuralisSettings(package_roots=[str(tmp_path / "extra")])
    packages = PackageLoader.from_settings(settings, entry_points=False).load()
    assert [p.id for p in packages.packages] == [AGENT_CORE_ID, "extra-pkg"]


def test_every_refusal_code_is_closed():
    assert REFUSAL_CODES == ("load_failed", "start_failed", "conflict")


# -- entry points -------------------------------------------------------------------------------------

PLUGIN = """
from pathlib import Path

PACKAGE_ROOT = Path(__file__).parent / "pkg"
STARTED = []


async def lookup(args, ctx):
    return "looked up " + args.get("q", "")


TOOL_HANDLERS = {"demo_lookup": lookup}


class _Api:
    def ping(self, session, text):
        return ("pong", session.caller_package_id, text)


API = _Api()


def start():
    STARTED.append("started")
"""


def write_plugin_package(dist, **kwargs):
    return write_package(dist.package_root, "demo-pkg", tools=[tool("demo_lookup")], **kwargs)


def test_an_installed_distribution_is_discovered_through_its_entry_point(
    tmp_path, monkeypatch, forget_modules
):
    dist = install_distribution(tmp_path / "site", monkeypatch, module_body=PLUGIN)
    forget_modules.append(dist.module)
    write_plugin_package(dist)
    packages = load(builtin=True, entry_points=True)
    entry = by_id(packages.health())[("demo-pkg", "ok")]
    assert entry["source"] == f"entry-point:{dist.dist_name}:demo"
    assert entry["detail"] == []
    assert sys.modules[dist.module].STARTED == ["started"]
    registry = packages.tool_registry(session_for("member"))
    assert registry.get("demo_lookup").package_id == "demo-pkg"
    api = packages.get_package_api("demo-pkg", cross_session())
    assert api.ping(cross_session("acme-tools"), "hi") == ("pong", "acme-tools", "hi")


def test_an_entry_point_claiming_first_party_is_clamped(tmp_path, monkeypatch, forget_modules):
    dist = install_distribution(tmp_path / "site", monkeypatch, module_body=PLUGIN)
    forget_modules.append(dist.module)
    write_plugin_package(dist, trust="first-party")
    packages = load(entry_points=True)
    assert packages.trust_of("demo-pkg") == "trusted"


@pytest.mark.parametrize(
    ("declared", "listed", "effective"),
    [
        ("trusted", False, "untrusted"),  # a package cannot grant itself authority
        ("trusted", True, "trusted"),
        ("first-party", False, "untrusted"),
        ("first-party", True, "trusted"),
        ("untrusted", True, "untrusted"),  # listing never raises a package above what it asks for
    ],
)
def test_trust_is_the_operators_grant(tmp_path, declared, listed, effective):
    root = write_package(
        tmp_path / "p", "acme-tools", trust=declared, tools=[tool("acme_write", access="write")]
    )
    packages = load(root, trusted=("acme-tools",) if listed else ())
    assert packages.trust_of("acme-tools") == effective
    [entry] = [e for e in packages.health() if e["id"] == "acme-tools"]
    if effective != declared:
        assert entry["detail"][0].startswith(f"claims {declared} trust; clamped to {effective}")


def test_a_start_hook_that_raises_is_start_failed_next_to_a_healthy_package(
    tmp_path, monkeypatch, forget_modules
):
    body = PLUGIN.replace('STARTED.append("started")', 'raise RuntimeError("database unreachable")')
    dist = install_distribution(tmp_path / "site", monkeypatch, module_body=body)
    forget_modules.append(dist.module)
    write_plugin_package(dist)
    write_package(tmp_path / "healthy", "healthy-pkg")
    packages = load(tmp_path / "healthy", entry_points=True)
    health = by_id(packages.health())
    refused = health[("demo-pkg", "refused")]
    assert refused["code"] == "start_failed"
    assert refused["reason"] == "start(): RuntimeError: database unreachable"
    assert health[("healthy-pkg", "ok")]
    assert "demo_lookup" not in packages.tool_registry(session_for("owner"))


def test_an_async_start_hook_is_start_failed(tmp_path, monkeypatch, forget_modules):
    body = PLUGIN.replace("def start():", "async def start():")
    dist = install_distribution(tmp_path / "site", monkeypatch, module_body=body)
    forget_modules.append(dist.module)
    write_plugin_package(dist)
    [entry] = load(entry_points=True).health()
    assert entry["code"] == "start_failed"
    assert "must run synchronously" in entry["reason"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("raise ImportError('no such thing')", "ImportError: no such thing"),
        ("PACKAGE_ROOT = '/does/not/exist'", "PACKAGE_ROOT must name the package folder"),
    ],
)
def test_an_entry_point_that_cannot_load_is_load_failed(tmp_path, monkeypatch, forget_modules, body, message):
    dist = install_distribution(tmp_path / "site", monkeypatch, module_body=body, entry="broken")
    forget_modules.append(dist.module)
    [entry] = load(entry_points=True).health()
    assert (entry["id"], entry["code"]) == ("broken", "load_failed")
    assert message in entry["reason"]


def test_handlers_for_undeclared_tools_refuse_the_package(tmp_path, monkeypatch, forget_modules):
    dist = install_distribution(tmp_path / "site", monkeypatch, module_body=PLUGIN)
    forget_modules.append(dist.module)
    write_package(dist.package_root, "demo-pkg")
    [entry] = load(entry_points=True).health()
    assert entry["code"] == "load_failed"
    assert "TOOL_HANDLERS names undeclared tool(s) ['demo_lookup']" in entry["reason"]
    assert sys.modules[dist.module].STARTED == []


def test_the_entry_point_group_name():
    assert ENTRY_POINT_GROUP == "neuralis.packages"


def test_a_load_is_repeatable(tmp_path):
    root = write_package(tmp_path / "p", "again-pkg", manifest_extra={"features": []})
    first, second = load(root, builtin=True), load(root, builtin=True)
    assert first.health() == second.health()
    assert json.dumps(first.health())
