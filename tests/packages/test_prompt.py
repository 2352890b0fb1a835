from __future__ import annotations

from neuralis_jupyter._resources import builtin_package_dir
from neuralis_jupyter.packages import PLACEHOLDERS, PackageLoader, render_placeholders

from .builders import agent_md, session_for, write_package


def test_the_four_flat_placeholders_are_rendered_from_the_session():
    session = session_for("member")
    text = "c={{conversationId}} a={{agentId}} p={{projectId}} u={{userId}} again={{agentId}}"
    assert render_placeholders(text, session) == "c=c-1 a=assistant p=lab u=alice again=assistant"
    assert PLACEHOLDERS == ("conversationId", "agentId", "projectId", "userId")


def test_dotted_spaced_and_other_names_are_left_alone():
    text = "{{user.id}} {{agent.id}} {{ agentId }} {{agentName}} {{role}} {agentId} {{{projectId}}}"
    assert (
        render_placeholders(text, session_for("member"))
        == "{{user.id}} {{agent.id}} {{ agentId }} {{agentName}} {{role}} {agentId} {lab}"
    )


def test_a_value_the_session_lacks_renders_empty():
    session = session_for("member").replace(conversation_id=None, agent_id=None)
    assert render_placeholders("[{{conversationId}}|{{agentId}}]", session) == "[|]"


def overview_root(tmp_path):
    long = "An extra package whose description goes on well past the eighty characters the overview keeps."
    return write_package(
        tmp_path / "extra",
        "extra-pkg",
        manifest_extra={"description": long},
        files={
            "agents/zeta.md": agent_md("zeta", "Answers zeta questions."),
            "agents/alpha.md": agent_md("alpha", "Answers alpha questions."),
            "skills/howto/SKILL.md": "---\ndescription: "
            + "A long skill description. " * 6
            + "\n---\nbody\n",
        },
    )


def load(root):
    return PackageLoader(
        builtin_root=builtin_package_dir("agent-core"), roots=[root], entry_points=False
    ).load()


def test_the_overview_is_byte_stable_across_calls_and_loads(tmp_path):
    root = overview_root(tmp_path)
    session = session_for("member")
    first = load(root)
    a, b = first.overview(session), first.overview(session)
    c = load(root).overview(session)
    assert a.encode() == b.encode() == c.encode()
    assert a.startswith("<packages>\n- @neuralis/agent-core (first-party): ")
    assert a.endswith("\n</packages>")


def test_the_overview_lists_skills_and_agents_and_cuts_only_non_skill_descriptions(tmp_path):
    text = load(overview_root(tmp_path)).overview(session_for("member"))
    lines = text.splitlines()
    [header] = [line for line in lines if line.startswith("- extra-pkg")]
    assert header.endswith("…")
    assert len(header.split(": ", 1)[1]) <= 80
    [skill] = [line for line in lines if line.startswith("  - howto: ")]
    assert skill.endswith("A long skill description.")
    extra = lines[lines.index(header) :]
    assert extra.index("  - alpha: Answers alpha questions.") < extra.index(
        "  - zeta: Answers zeta questions."
    )
    for name in ("explore", "research", "planner", "execute", "validate", "operate", "general"):
        assert any(line.startswith(f"  - {name}: ") for line in lines)
    for name in ("context-management", "plan", "execute-skill", "delegate-skill"):
        assert any(line.startswith(f"  - {name}: ") for line in lines)


def test_the_overview_is_empty_when_nothing_is_visible(tmp_path):
    write_package(
        tmp_path / "gated",
        "gated-pkg",
        manifest_extra={"features": []},
        files={"agents/root.md": agent_md("root", extra="requiredFeatures: [exec.unconfined]\n")},
    )
    packages = PackageLoader(builtin_root=None, roots=[tmp_path / "gated"], entry_points=False).load()
    assert packages.overview(session_for("member")) == ""
    assert "gated-pkg" in packages.overview(session_for("admin"))
