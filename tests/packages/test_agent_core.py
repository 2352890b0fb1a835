"""Facts about the shipped agent-core package, derived from its files."""

from __future__ import annotations

import json
import re

import pytest
from jsonschema import Draft202012Validator

from neuralis_jupyter._resources import builtin_package_dir
from neuralis_jupyter.packages import PLACEHOLDERS, PackageLoader, parse_frontmatter
from neuralis_jupyter.packages._schemas import validator
from neuralis_jupyter.runtime.results import read_tool_result_tool

from .builders import session_for

ROOT = builtin_package_dir("agent-core")
BASE_AGENTS = {"explore", "research", "planner", "execute", "validate", "operate", "general"}
# The model-facing names of seed 003 (plus read_tool_result and wait, seed 001's cognition tools).
SEED_TOOL_NAMES = {
    "execute",
    "delegate",
    "todos",
    "compact_history",
    "ask_question",
    "web_fetch",
    "web_search",
    "read_tool_result",
    "wait",
}


def tool_files():
    return sorted((ROOT / "tools").glob("*.json"))


def schema_of(name: str) -> dict:
    return json.loads((ROOT / "tools" / f"{name}.json").read_text(encoding="utf-8"))["input_schema"]


@pytest.fixture(scope="module")
def packages():
    return PackageLoader(builtin_root=ROOT, entry_points=False).load()


def test_the_builtin_loads_healthy(packages):
    [entry] = packages.health()
    assert (entry["id"], entry["status"], entry["source"]) == ("@neuralis/agent-core", "ok", "builtin")
    assert not [d for d in entry["detail"] if "no handler" not in d]


# -- the seven base agents, derived from the shipped files --------------------------------------------


def test_exactly_the_seven_base_agents_ship():
    assert {p.stem for p in (ROOT / "agents").glob("*.md")} == BASE_AGENTS


@pytest.mark.parametrize("name", sorted(BASE_AGENTS))
def test_a_base_agent_declares_no_allowed_tools_and_no_required_features(name):
    text = (ROOT / "agents" / f"{name}.md").read_text(encoding="utf-8")
    fm = parse_frontmatter(text, source=f"agents/{name}.md")
    assert fm.present
    assert not fm.warnings
    assert "allowed-tools" not in fm.fields
    assert "requiredFeatures" not in fm.fields
    # And no spelling of either key hides anywhere in the frontmatter block.
    block = text.split("---", 2)[1]
    assert not re.search(r"(?im)^\s*(allowed[-_]?tools|required[-_]?features|requires)\s*:", block)
    assert 0 < len(fm.fields["description"]) <= 80
    assert fm.fields["name"] == name


def test_base_agents_inherit_tools_and_are_visible_to_every_role(packages):
    for role in ("owner", "admin", "manager", "member", "viewer"):
        agents = {a.name: a for a in packages.agents(session_for(role))}
        assert set(agents) == BASE_AGENTS
        assert all(a.allowed_tools is None and a.requires is None for a in agents.values())


# -- tools --------------------------------------------------------------------------------------------


def test_every_shipped_tool_name_is_a_reference_name():
    assert {p.stem for p in tool_files()} == SEED_TOOL_NAMES


@pytest.mark.parametrize("path", tool_files(), ids=lambda p: p.stem)
def test_a_shipped_tool_file_and_its_input_schema_validate(path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert not list(validator("tool").iter_errors(doc))
    Draft202012Validator.check_schema(doc["input_schema"])
    assert doc["name"] == path.stem


EXPECTED_FACTS = {
    # name: (access, effects, features, intrinsic, barred, deterministic)
    "execute": ("write", {"exec"}, ("core.execute",), False, False, False),
    "delegate": ("write", set(), None, True, False, True),
    "todos": ("write", set(), None, True, False, True),
    "compact_history": ("write", set(), None, True, False, True),
    "ask_question": ("read", set(), None, True, True, True),
    "web_fetch": ("read", {"egress:external"}, ("core.web",), False, False, False),
    "web_search": ("read", {"egress:external"}, ("core.web",), False, False, False),
    "read_tool_result": ("read", set(), None, True, False, True),
    "wait": ("read", set(), None, True, False, False),
}


def test_the_x_neuralis_facts_of_each_native_tool(packages):
    decls = {t.name: t for t in packages.get("agent-core").contributions.tools}
    for name, (access, effects, features, intrinsic, barred, deterministic) in EXPECTED_FACTS.items():
        d = decls[name]
        got = (
            d.access,
            set(d.effects),
            d.requires.features if d.requires else None,
            d.intrinsic,
            d.barred_from_subagents,
            d.deterministic,
        )
        assert got == (access, effects, features, intrinsic, barred, deterministic), name


def test_read_tool_result_matches_the_runtime_schema():
    assert schema_of("read_tool_result") == read_tool_result_tool().input_schema


# The reference call shapes (seed 003), each of which must validate against the shipped schema.
REFERENCE_CALLS = [
    ("execute", {"action": "shell", "command": "ls data://notes", "reason": "list the notes folder"}),
    ("execute", {"command": "pnpm build 2>&1", "background": True}),
    ("execute", {"action": "skill", "skill": "plan"}),
    ("delegate", {"task": "Audit the auth routes for missing feature gates", "max_steps": 20}),
    (
        "delegate",
        {
            "task": "t",
            "agent": "validate",
            "tools": ["web_search"],
            "blocked_tools": ["execute"],
            "background": True,
        },
    ),
    (
        "todos",
        {
            "plan": {
                "name": "Refactor",
                "todos": [{"id": "schema", "content": "Tighten", "status": "in_progress"}],
            }
        },
    ),
    (
        "todos",
        {
            "plan": {
                "goal": "g",
                "done": ["all tools validate", "docs updated"],
                "loop": {"until": "goal", "maxSteps": 40},
            }
        },
    ),
    ("todos", {"mark": {"met": [1]}}),
    ("todos", {"mark": {"todos": [{"id": "schema", "status": "completed"}], "met": [2, "docs updated"]}}),
    (
        "todos",
        {
            "close": "cleared",
            "plan": {"goal": "Tighten the audited schemas", "done": ["audit list validates"]},
        },
    ),
    (
        "compact_history",
        {
            "actions": [{"target": {"tool_use_id": "toolu_abc"}, "action": "remove"}],
            "reason": "context filling",
        },
    ),
    (
        "compact_history",
        {"actions": [{"target": {"message_seq": 7}, "action": "truncate", "max_chars": 200}]},
    ),
    (
        "ask_question",
        {
            "question": "Which environment?",
            "options": [{"id": "stg", "label": "Staging"}, {"id": "prod", "label": "Production"}],
        },
    ),
    ("web_fetch", {"url": "https://example.com/article", "max_chars": 20000, "format": "markdown"}),
    ("web_search", {"query": "MCP stateless transport RC", "mode": "research", "max_results": 8}),
    ("web_search", {"query": "q", "provider": "searxng", "include_content": True}),
    ("read_tool_result", {"id": "toolu_1", "offset": 100, "limit": 50}),
    ("wait", {"for": "nrs-sh-0123", "seconds": 120}),
    ("wait", {}),
]


@pytest.mark.parametrize(
    ("name", "call"), REFERENCE_CALLS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(REFERENCE_CALLS)]
)
def test_reference_calls_validate(name, call):
    errors = list(Draft202012Validator(schema_of(name)).iter_errors(call))
    assert not errors, errors[0].message


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("execute", {"action": "run", "command": "ls"}),
        ("delegate", {"agent": "general"}),
        ("todos", {"close": "abandoned"}),
        ("todos", {"mark": {"met": [0]}}),
        (
            "compact_history",
            {"actions": [{"target": {"tool_use_id": "x", "message_seq": 1}, "action": "remove"}]},
        ),
        ("web_fetch", {"url": "https://x", "format": "html"}),
        ("web_search", {"query": "q", "provider": "google"}),
        ("ask_question", {"question": "q", "user_id": "bob"}),
        ("wait", {"seconds": 301}),
        ("wait", {"seconds": 0}),
    ],
)
def test_off_schema_calls_are_invalid(name, call):
    assert list(Draft202012Validator(schema_of(name)).iter_errors(call))


# -- prompt files and skills --------------------------------------------------------------------------


def test_the_prompt_floor_is_one_instruction_and_one_rule(packages):
    files = packages.prompt_files(session_for("viewer"))
    assert [(f.category, f.name) for f in files] == [
        ("instruction", "neuralis-kernel.md"),
        ("rule", "tool-use.md"),
    ]


def test_prompt_files_use_agent_and_project_placeholders_once_and_nothing_else(packages):
    text = "".join(f.body for f in packages.prompt_files(session_for("viewer")))
    assert text.count("{{agentId}}") == 1
    assert text.count("{{projectId}}") == 1
    assert set(re.findall(r"\{\{([^}]*)\}\}", text)) <= set(PLACEHOLDERS)


def test_the_four_skills_ship_and_delegate_skill_carries_the_role_table(packages):
    skills = {s.name: s for s in packages.skills(session_for("viewer"))}
    assert set(skills) == {"context-management", "plan", "execute-skill", "delegate-skill"}
    table = [line for line in skills["delegate-skill"].body.splitlines() if line.startswith("| `")]
    assert {re.match(r"\| `([a-z]+)`", line).group(1) for line in table} == BASE_AGENTS
