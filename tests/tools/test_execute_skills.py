"""Skill activation through real turns: the SKILL.md rendered, and credentials staged for the rest of the
turn only. A name is staged only when its package is not untrusted and declares it in neuralis.json, it
is not the platform's, and the project's credential file holds it; the host environment is never read."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime.events import RuntimeEvent, ToolCallFinished
from neuralis_jupyter.tools.execute import reserved_credential

from .exec_support import MEMBER, ExecRig, exec_data_root, exec_session, needs_bwrap

pytestmark = needs_bwrap

#: Names a hostile skill asks for: provider keys, hub and Jupyter tokens, Neuralis's own variables
#: (in any case), and names that would steer the loader, the shell or Python.
HOSTILE = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "AZURE_OPENAI_API_KEY",
    "JUPYTERHUB_API_TOKEN",
    "JUPYTERHUB_API_URL",
    "JUPYTERHUB_USER",
    "JPY_API_TOKEN",
    "JUPYTER_TOKEN",
    "NEURALIS_SESSION_TOKEN",
    "NEURALIS_API_URL",
    "NEURALIS_USER",
    "anthropic_api_key",
    "Jupyterhub_Api_Token",
    "neuralis_session_token",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "BASH_ENV",
    "ENV",
    "PATH",
    "HOME",
    "LANG",
)
#: Hostile names that are safe to set in this test process's own environment.
IN_HOST_ENV = [
    n for n in HOSTILE if n.upper().startswith(("ANTHROPIC_", "OPENAI_", "AZURE_", "JUPYTER", "JPY_"))
]


def write_package(
    root: Path,
    package_id: str,
    *,
    trust: str,
    declared: Sequence[str],
    skill: str,
    asks: Sequence[str],
    body: str = "Skill body.\n",
) -> None:
    package = root / package_id
    (package / "skills" / skill).mkdir(parents=True)
    manifest = {
        "id": package_id,
        "version": "1.0.0",
        "trust": trust,
        "description": "Test skills.",
        "credentials": [{"id": name, "label": name} for name in declared],
    }
    (package / "neuralis.json").write_text(json.dumps(manifest))
    frontmatter = f"name: {skill}\ndescription: A test skill.\ncredentials: [{', '.join(asks)}]\n"
    (package / "skills" / skill / "SKILL.md").write_text(f"---\n{frontmatter}---\n{body}")


def write_skills(root: Path) -> Path:
    write_package(
        root,
        "acme-tools",
        trust="trusted",
        declared=["ACME_TOKEN", "ACME_TOKEN_MISSING", "ACME_TOKEN_ENV"],
        skill="fetcher",
        asks=["ACME_TOKEN", "ACME_TOKEN_MISSING", "ACME_TOKEN_ENV", "ACME_UNDECLARED"],
        body="Project {{projectId}}, agent {{agentId}}, user {{userId}}; keep {{other}} as written.\n",
    )
    (root / "acme-tools" / "skills" / "fetcher" / "notes.txt").write_text("notes beside the skill\n")
    (root / "acme-tools" / "skills" / "secret-op").mkdir()
    (root / "acme-tools" / "skills" / "secret-op" / "SKILL.md").write_text(
        "---\nname: secret-op\ndescription: Host-only work.\nrequiredFeatures: [exec.host]\n---\nHidden.\n"
    )
    # A trusted package that declares every hostile name, and a skill that asks for each of them.
    write_package(root, "grabby-tools", trust="trusted", declared=HOSTILE, skill="grabber", asks=HOSTILE)
    # An untrusted package: even its declared, harmless-looking name is not staged.
    write_package(
        root,
        "shady-tools",
        trust="untrusted",
        declared=["SHADY_TOKEN", "ANTHROPIC_API_KEY", "JUPYTERHUB_API_TOKEN"],
        skill="shady",
        asks=["SHADY_TOKEN", "ANTHROPIC_API_KEY", "JUPYTERHUB_API_TOKEN"],
    )
    return root


@pytest.fixture
def skill_rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ExecRig]:
    monkeypatch.setenv("ACME_TOKEN_ENV", "host-env-acme")
    for name in IN_HOST_ENV:
        monkeypatch.setenv(name, f"host-env-{name}")
    with exec_data_root(tmp_path) as root:
        packages = write_skills(tmp_path / "packages")
        rig = ExecRig.build(root, package_roots=[packages], trusted_packages=["acme-tools", "grabby-tools"])
        stored = {name: f"stored-{name}" for name in HOSTILE}
        stored |= {
            "ACME_TOKEN": "file-value-9a8b",
            "SHADY_TOKEN": "stored-shady",
            "ACME_UNDECLARED": "x-undecl",
        }
        creds = root / "projects" / "default" / "credentials.json"
        creds.write_text(json.dumps(stored))
        creds.chmod(0o600)
        yield rig


def activate_then_run(rig: ExecRig, skill: str, command: str) -> tuple[dict[str, Any], str, str]:
    """Activate ``skill`` and run ``command`` in one turn: (activation data, its text, the stdout)."""
    events: list[RuntimeEvent] = []
    model = ScriptedModel(
        [
            Reply(calls=(Call(name="execute", input={"action": "skill", "skill": skill}, id="s1"),)),
            Reply(calls=(Call(name="execute", input={"command": command}, id="s2"),)),
            Reply(text="done"),
        ]
    )
    assert asyncio.run(rig.turn(model, on_event=events.append)).status == "completed"
    data = next(e.data for e in events if isinstance(e, ToolCallFinished) and e.tool_use_id == "s1")
    assert data is not None
    return data, rig.result("s1")["content"], json.loads(rig.result("s2")["content"])["stdout"]


def test_a_skill_renders_and_stages_declared_credentials_from_the_project_file_for_this_turn_only(
    skill_rig: ExecRig, tmp_path: Path
) -> None:
    rig = skill_rig
    folder = tmp_path / "packages" / "acme-tools" / "skills" / "fetcher"
    names = ("ACME_TOKEN", "ACME_TOKEN_MISSING", "ACME_TOKEN_ENV", "ACME_UNDECLARED")
    probe = "echo " + " ".join(f"${{{n}-unset}}" for n in names)
    data, text, stdout = activate_then_run(rig, "fetcher", f"{probe}; cat {folder}/notes.txt")
    assert "Project default, agent assistant, user alice; keep {{other}} as written." in text
    assert "Credentials staged for shell calls in this turn: ACME_TOKEN." in text
    # The host environment is not a source: ACME_TOKEN_ENV is only in os.environ, so it is missing.
    assert "Missing credentials: ACME_TOKEN_MISSING, ACME_TOKEN_ENV." in text
    assert "ACME_UNDECLARED (not declared under credentials in acme-tools's neuralis.json)" in text
    assert (data["staged"], data["refused"]) == (["ACME_TOKEN"], ["ACME_UNDECLARED"])
    assert "file-value-9a8b" not in text
    assert stdout == "file-value-9a8b unset unset unset\nnotes beside the skill\n"

    second = ScriptedModel(
        [Reply(calls=(Call(name="execute", input={"command": probe}, id="s3"),)), Reply(text="ok")]
    )
    assert asyncio.run(rig.turn(second)).status == "completed"
    assert json.loads(rig.result("s3")["content"])["stdout"] == "unset unset unset unset\n"


def test_a_hostile_skill_gets_no_platform_secret_even_when_its_manifest_declares_them(
    skill_rig: ExecRig,
) -> None:
    data, text, stdout = activate_then_run(skill_rig, "grabber", "env")
    assert data["staged"] == []
    assert data["missing"] == []
    assert sorted(data["refused"]) == sorted(HOSTILE)
    assert all(f"{name} (reserved for the platform)" in text for name in HOSTILE)
    for name in HOSTILE:
        assert f"stored-{name}" not in stdout, name
        assert f"host-env-{name}" not in stdout, name
    assert "host-env-" not in stdout


def test_an_untrusted_package_stages_nothing(skill_rig: ExecRig) -> None:
    data, text, stdout = activate_then_run(skill_rig, "shady", "env")
    assert data["staged"] == []
    assert "SHADY_TOKEN (the skill's package is untrusted)" in text
    assert "ANTHROPIC_API_KEY (reserved for the platform)" in text
    assert "stored-" not in stdout
    assert "host-env-" not in stdout


@pytest.mark.parametrize("name", HOSTILE)
def test_every_hostile_name_is_reserved(name: str) -> None:
    assert reserved_credential(name)


@pytest.mark.parametrize(
    "name", ["ACME_TOKEN", "GITHUB_TOKEN", "HF_TOKEN", "TAVILY_API_KEY", "MY_OPENAI_KEY"]
)
def test_ordinary_names_are_not_reserved(name: str) -> None:
    assert not reserved_credential(name)


def test_an_insecure_credential_file_is_not_read(skill_rig: ExecRig) -> None:
    (skill_rig.root / "projects" / "default" / "credentials.json").chmod(0o644)
    block = skill_rig.call(action="skill", skill="fetcher")
    text = block["content"]
    assert "Missing credentials: ACME_TOKEN, ACME_TOKEN_MISSING, ACME_TOKEN_ENV." in text
    assert "The project's credential file was not read" in text
    assert "chmod 600" in text


def test_unknown_and_hidden_skills_answer_alike(skill_rig: ExecRig) -> None:
    hidden = skill_rig.call(action="skill", skill="secret-op")
    unknown = skill_rig.call(action="skill", skill="nonesuch")
    assert hidden["content"] == unknown["content"].replace("nonesuch", "secret-op")
    assert hidden["content"].startswith("Skill not found: 'secret-op'.")
    assert (
        (hidden["outcome"], hidden["is_error"])
        == (unknown["outcome"], unknown["is_error"])
        == ("error", True)
    )
    # The same skill is there for a session that holds the feature it requires.
    host = exec_session(features=(*MEMBER, "exec.host"))
    assert skill_rig.call(host, action="skill", skill="secret-op")["outcome"] == "ok"
