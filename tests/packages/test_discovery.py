from __future__ import annotations

import json
import re

import pytest

from neuralis_jupyter.packages import PackageContentError, PackageLoader, discover

from .builders import OBJ, agent_md, tool, write_package


def discover_in(folder, *, first_party=False):
    return discover(folder, package_id="acme-tools", first_party=first_party)


def refusal_of(root) -> dict:
    """Load ``root`` alone and return its single health entry."""
    [entry] = PackageLoader(builtin_root=None, roots=[root], entry_points=False).load().health()
    return entry


# -- agents -------------------------------------------------------------------------------------------


def test_allowed_tools_absent_empty_and_listed_are_three_different_answers(tmp_path):
    pkg = write_package(
        tmp_path / "p",
        files={
            "agents/inherits.md": agent_md("inherits"),
            "agents/none.md": agent_md("none", extra="allowed-tools: []\n"),
            "agents/ceiling.md": agent_md("ceiling", extra="allowed-tools: [web_search, todos]\n"),
            "agents/block.md": agent_md("block", extra="allowed-tools:\n  - web_fetch\n"),
        },
    )
    agents = {a.name: a for a in discover_in(pkg).agents}
    assert agents["inherits"].allowed_tools is None
    assert agents["none"].allowed_tools == ()
    assert agents["ceiling"].allowed_tools == ("web_search", "todos")
    assert agents["block"].allowed_tools == ("web_fetch",)
    # None and () must never compare equal or be treated alike by truthiness-blind callers.
    assert agents["none"].allowed_tools is not None


def test_allowed_tools_with_no_value_is_refused_rather_than_guessed(tmp_path):
    pkg = write_package(
        tmp_path / "p", files={"agents/vague.md": agent_md("vague", extra="allowed-tools:\n")}
    )
    with pytest.raises(
        PackageContentError, match=re.escape("agents/vague.md: 'allowed-tools:' has no value")
    ):
        discover_in(pkg)


def test_an_agent_description_over_80_characters_refuses_the_package(tmp_path):
    fits = "x" * 80
    write_package(tmp_path / "ok", "ok-pkg", files={"agents/fits.md": agent_md("fits", fits)})
    assert refusal_of(tmp_path / "ok")["status"] == "ok"
    write_package(tmp_path / "long", "long-pkg", files={"agents/wordy.md": agent_md("wordy", fits + "y")})
    entry = refusal_of(tmp_path / "long")
    assert (entry["status"], entry["code"]) == ("refused", "load_failed")
    assert "agents/wordy.md: description is 81 characters" in entry["reason"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\nname: other\ndescription: d\n---\n", "name 'other' differs"),
        ("---\nname: a\n---\nbody\n", "needs a non-empty 'description: ...'"),
        ("no frontmatter at all\n", "needs a non-empty 'description: ...'"),
    ],
)
def test_agent_frontmatter_problems_name_the_file(tmp_path, text, message):
    pkg = write_package(tmp_path / "p", files={"agents/a.md": text})
    with pytest.raises(PackageContentError, match=re.escape("agents/a.md")) as info:
        discover_in(pkg)
    assert message in str(info.value)


def test_agent_name_defaults_to_the_file_name_and_body_is_kept(tmp_path):
    pkg = write_package(
        tmp_path / "p", files={"agents/scout.md": "---\ndescription: Looks.\n---\nYou look.\n"}
    )
    [agent] = discover_in(pkg).agents
    assert (agent.name, agent.body, agent.required_features) == ("scout", "You look.\n", ())


# -- tools --------------------------------------------------------------------------------------------


def test_a_session_field_at_the_schema_root_refuses_the_package_naming_the_tool(tmp_path):
    bad = {"type": "object", "properties": {"user_id": {"type": "string"}, "q": {"type": "string"}}}
    write_package(tmp_path / "p", tools=[tool("lookup", schema=bad)])
    entry = refusal_of(tmp_path / "p")
    assert (entry["status"], entry["code"]) == ("refused", "load_failed")
    assert "tool 'lookup'" in entry["reason"]
    assert "'user_id'" in entry["reason"]


def test_a_session_field_in_a_root_combinator_is_also_refused(tmp_path):
    bad = {"type": "object", "anyOf": [{"properties": {"projectId": {"type": "string"}}}]}
    write_package(tmp_path / "p", tools=[tool("lookup", schema=bad)])
    assert "'projectId'" in refusal_of(tmp_path / "p")["reason"]


def test_a_nested_session_named_field_is_a_domain_field(tmp_path):
    nested = {
        "type": "object",
        "properties": {"filter": {"type": "object", "properties": {"user_id": {"type": "string"}}}},
    }
    pkg = write_package(tmp_path / "p", tools=[tool("lookup", schema=nested)])
    [decl] = discover_in(pkg).tools
    assert decl.input_schema == nested


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (tool("lookup", schema={"type": "object", "properties": 3}), "not a valid JSON schema"),
        (tool("lookup", schema={"type": "string"}), "must have type 'object'"),
        ({**tool("lookup"), "name": "other"}, "declares name 'other'"),
        (
            {k: v for k, v in tool("lookup").items() if k != "x-neuralis"},
            "'x-neuralis' is a required property",
        ),
        ({**tool("lookup"), "x-neuralis": {"effects": []}}, "'access' is a required property"),
        (tool("lookup", access="delete"), "x-neuralis/access"),
        (tool("lookup", intrinsic=True), "only a first-party package may do"),
    ],
)
def test_invalid_tool_files_are_refused_with_the_file_named(tmp_path, doc, message):
    folder = write_package(tmp_path / "p")
    (folder / "tools").mkdir()
    (folder / "tools" / "lookup.json").write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(PackageContentError, match=re.escape("tools/lookup.json")) as info:
        discover_in(folder)
    assert message in str(info.value)


def test_tool_declarations_carry_their_x_neuralis_facts(tmp_path):
    pkg = write_package(
        tmp_path / "p",
        tools=[
            tool("fetch", effects=["egress:external"], features=["core.web"], deterministic=False),
            tool("note", access="write", barredFromSubagents=True),
            tool("think", intrinsic=True),
        ],
    )
    decls = {t.name: t for t in discover_in(pkg, first_party=True).tools}
    fetch, note, think = decls["fetch"], decls["note"], decls["think"]
    assert (fetch.access, fetch.effects, fetch.requires.features, fetch.deterministic) == (
        "read",
        frozenset({"egress:external"}),
        ("core.web",),
        False,
    )
    assert (note.access, note.barred_from_subagents, note.requires, note.deterministic) == (
        "write",
        True,
        None,
        True,
    )
    assert think.intrinsic
    assert fetch.input_schema == OBJ


def test_a_requirement_nobody_declares_is_a_warning(tmp_path):
    pkg = write_package(tmp_path / "p", tools=[tool("lookup", features=["core.exeute"])])
    found = discover_in(pkg)
    assert any("'core.exeute'" in w for w in found.warnings)
    own = discover(
        pkg, package_id="acme-tools", first_party=False, declared_features=frozenset({"core.exeute"})
    )
    assert own.warnings == ()


# -- skills and prompt files --------------------------------------------------------------------------


def test_skills_prompt_files_and_their_requirements(tmp_path):
    pkg = write_package(
        tmp_path / "p",
        files={
            "skills/probe/SKILL.md": (
                "---\nname: probe\ndescription: Probe things.\nrequiredFeatures: [core.web]\n"
                "credentials: [TAVILY_API_KEY]\n---\nHow to probe.\n"
            ),
            "skills/probe/scripts/run.sh": "echo hi\n",
            "skills/loose/README.md": "no SKILL.md here\n",
            "instructions/b.md": "B {{projectId}}\n",
            "instructions/a.md": "---\nrequiredFeatures: [core.execute]\ncategory: rule\n---\nA\n",
            "rules/z.md": "Z\n",
        },
    )
    found = discover_in(pkg)
    [skill] = found.skills
    assert (skill.name, skill.required_features, skill.credentials, skill.body) == (
        "probe",
        ("core.web",),
        ("TAVILY_API_KEY",),
        "How to probe.\n",
    )
    assert skill.path == pkg / "skills" / "probe"
    assert [(f.category, f.name, f.body, f.required_features) for f in found.prompt_files] == [
        ("instruction", "a.md", "A\n", ("core.execute",)),
        ("instruction", "b.md", "B {{projectId}}\n", ()),
        ("rule", "z.md", "Z\n", ()),
    ]
    assert any("skills/loose: no SKILL.md" in w for w in found.warnings)
    assert any("instructions/a.md: 'category' comes from the folder" in w for w in found.warnings)


def test_a_nested_requires_in_a_skill_warns_and_is_ignored(tmp_path):
    pkg = write_package(
        tmp_path / "p",
        files={
            "skills/s/SKILL.md": "---\nname: s\ndescription: d\nrequires:\n  features: [core.web]\n---\nx\n"
        },
    )
    found = discover_in(pkg)
    assert found.skills[0].required_features == ()
    assert any("'requires'" in w and "skills/s/SKILL.md" in w for w in found.warnings)


def test_an_empty_package_discovers_nothing(tmp_path):
    found = discover_in(write_package(tmp_path / "p"))
    assert found.items() == ()
    assert found.warnings == ()
