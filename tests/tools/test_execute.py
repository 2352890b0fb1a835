"""The execute tool through real turns: result shape, gates, the session ticket, the API URL, a stop
during a long command, and skill activation with credentials staged for the rest of the turn only."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import StopSignal
from neuralis_jupyter.runtime.events import RuntimeEvent, ToolCallFinished, ToolCallStarted, TurnStarted
from neuralis_jupyter.store.tickets import TicketError

from .exec_support import MEMBER, ExecRig, exec_data_root, exec_session, gone, needs_bwrap, processes_with

pytestmark = needs_bwrap


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ExecRig]:
    with exec_data_root(tmp_path) as root:
        yield ExecRig.build(root)


def shell_calls(*commands: str) -> ScriptedModel:
    """A model that runs each command in its own step, then says done."""
    replies = [
        Reply(calls=(Call(name="execute", input={"command": c}, id=f"c{i}"),)) for i, c in enumerate(commands)
    ]
    return ScriptedModel([*replies, Reply(text="done")])


def test_result_shape_and_a_nonzero_exit_is_information(rig: ExecRig) -> None:
    events: list[RuntimeEvent] = []
    settled = asyncio.run(rig.turn(shell_calls("echo out; echo err >&2; exit 3"), on_event=events.append))
    assert settled.status == "completed"
    block = rig.result("c0")
    expected = {"stdout": "out\n", "stderr": "err\n", "exitCode": 3, "cwd": str(rig.workspace)}
    assert json.loads(block["content"]) == expected
    assert (block["outcome"], block["is_error"]) == ("ok", False)
    finished = next(e for e in events if isinstance(e, ToolCallFinished))
    assert finished.data == expected
    assert rig.workspace.is_dir()


def test_the_ticket_is_fresh_per_call_verifies_to_the_caller_and_dies_with_the_stream(rig: ExecRig) -> None:
    events: list[RuntimeEvent] = []
    model = shell_calls("echo $NEURALIS_SESSION_TOKEN", "echo $NEURALIS_SESSION_TOKEN")
    asyncio.run(rig.turn(model, on_event=events.append))
    first, second = (json.loads(rig.result(c)["content"])["stdout"].strip() for c in ("c0", "c1"))
    assert first.startswith("nrs1.")
    assert first != second
    request_id = next(e for e in events if isinstance(e, TurnStarted)).request_id
    for ticket in (first, second):
        session = rig.store.tickets.verify(ticket)
        assert (session.user_id, session.project_id, session.agent_id) == ("alice", "default", "assistant")
        assert session.request_id == request_id
    rig.store.tickets.end_stream(request_id)
    with pytest.raises(TicketError):
        rig.store.tickets.verify(first)


def test_the_api_url_is_there_only_when_a_server_runs(tmp_path: Path) -> None:
    with exec_data_root(tmp_path) as root:
        served = ExecRig.build(root, api_url="http://127.0.0.1:8888/neuralis/api")
        assert (
            served.shell("echo ${NEURALIS_API_URL-unset}")["stdout"] == "http://127.0.0.1:8888/neuralis/api\n"
        )
    with exec_data_root(tmp_path) as root:
        headless = ExecRig.build(root)
        assert headless.shell("echo ${NEURALIS_API_URL-unset}")["stdout"] == "unset\n"


def test_the_shell_needs_exec_container(rig: ExecRig) -> None:
    no_door = exec_session(features=("core.execute",))
    block = rig.call(no_door, command="echo never")
    assert block["outcome"] == "refused"
    assert "exec.container" in block["content"]


def test_without_core_execute_the_tool_is_not_offered(rig: ExecRig) -> None:
    viewer = exec_session(features=("core.agents", "core.observe"))
    block = rig.call(viewer, command="echo never")
    assert (block["outcome"], block["content"]) == ("unavailable", "Tool not available: execute")


def test_a_stop_during_a_long_command_ends_the_turn_and_kills_it(rig: ExecRig) -> None:
    marker = f"1000.{secrets.randbelow(10**6):06d}"
    stop = StopSignal()

    def on_event(event: RuntimeEvent) -> None:
        if isinstance(event, ToolCallStarted):
            asyncio.get_running_loop().call_later(0.3, stop.set, "user pressed stop")

    async def go() -> tuple[str, float, bool]:
        started = time.monotonic()
        settled = await rig.turn(
            shell_calls(f"sleep {marker} & sleep {marker}"), stop=stop, on_event=on_event
        )
        return settled.status, time.monotonic() - started, await gone(marker)

    status, seconds, killed = asyncio.run(go())
    assert status == "stopped"
    assert seconds < 3
    assert killed, processes_with(marker)
    assert rig.result("c0")["outcome"] == "stopped"


# -- skills ---------------------------------------------------------------------------------------


def write_skills(root: Path) -> Path:
    package = root / "acme-tools"
    (package / "skills" / "fetcher").mkdir(parents=True)
    (package / "skills" / "secret-op").mkdir(parents=True)
    manifest = {"id": "acme-tools", "version": "1.0.0", "trust": "trusted", "description": "Test skills."}
    (package / "neuralis.json").write_text(json.dumps(manifest))
    (package / "skills" / "fetcher" / "SKILL.md").write_text(
        "---\nname: fetcher\ndescription: Fetch things with keys.\n"
        "credentials: [NEURALIS_TEST_CRED_ENV, NEURALIS_TEST_CRED_FILE, NEURALIS_TEST_CRED_MISSING]\n---\n"
        "Project {{projectId}}, agent {{agentId}}, user {{userId}}; keep {{other}} as written.\n"
    )
    (package / "skills" / "fetcher" / "notes.txt").write_text("notes beside the skill\n")
    (package / "skills" / "secret-op" / "SKILL.md").write_text(
        "---\nname: secret-op\ndescription: Host-only work.\nrequiredFeatures: [exec.host]\n---\nHidden.\n"
    )
    return root


@pytest.fixture
def skill_rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ExecRig]:
    monkeypatch.setenv("NEURALIS_TEST_CRED_ENV", "env-value-1f2e")
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, package_roots=[write_skills(tmp_path / "packages")])
        creds = root / "projects" / "default" / "credentials.json"
        creds.write_text(json.dumps({"NEURALIS_TEST_CRED_FILE": "file-value-9a8b"}))
        creds.chmod(0o600)
        yield rig


def test_a_skill_renders_and_stages_credentials_for_this_turn_only(
    skill_rig: ExecRig, tmp_path: Path
) -> None:
    rig = skill_rig
    folder = tmp_path / "packages" / "acme-tools" / "skills" / "fetcher"
    probe = "echo " + " ".join(f"${{NEURALIS_TEST_CRED_{n}-unset}}" for n in ("ENV", "FILE", "MISSING"))
    first = ScriptedModel(
        [
            Reply(calls=(Call(name="execute", input={"action": "skill", "skill": "fetcher"}, id="s1"),)),
            Reply(
                calls=(Call(name="execute", input={"command": f"{probe}; cat {folder}/notes.txt"}, id="s2"),)
            ),
            Reply(text="done"),
        ]
    )
    assert asyncio.run(rig.turn(first)).status == "completed"
    activation = rig.result("s1")
    text = activation["content"]
    assert activation["outcome"] == "ok"
    assert "Project default, agent assistant, user alice; keep {{other}} as written." in text
    assert (
        "Credentials staged for shell calls in this turn: NEURALIS_TEST_CRED_ENV, NEURALIS_TEST_CRED_FILE."
        in text
    )
    assert "Missing credentials: NEURALIS_TEST_CRED_MISSING." in text
    assert "env-value-1f2e" not in text
    assert "file-value-9a8b" not in text
    used = json.loads(rig.result("s2")["content"])
    assert used["stdout"] == "env-value-1f2e file-value-9a8b unset\nnotes beside the skill\n"

    second = ScriptedModel(
        [Reply(calls=(Call(name="execute", input={"command": probe}, id="s3"),)), Reply(text="ok")]
    )
    assert asyncio.run(rig.turn(second)).status == "completed"
    assert json.loads(rig.result("s3")["content"])["stdout"] == "unset unset unset\n"


def test_an_insecure_credential_file_is_not_read(skill_rig: ExecRig) -> None:
    (skill_rig.root / "projects" / "default" / "credentials.json").chmod(0o644)
    block = skill_rig.call(action="skill", skill="fetcher")
    assert "Missing credentials: NEURALIS_TEST_CRED_FILE, NEURALIS_TEST_CRED_MISSING." in block["content"]
    assert "The project's credential file was not read" in block["content"]
    assert "chmod 600" in block["content"]


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
