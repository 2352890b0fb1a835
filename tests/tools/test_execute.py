"""The execute tool through real turns: result shape, gates, the session ticket, the API URL, a stop
during a long command, and cassette replay (skills: test_execute_skills.py)."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuralis_jupyter.providers.cassette import Cassette, CassetteModel
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import StopSignal
from neuralis_jupyter.runtime.events import RuntimeEvent, ToolCallFinished, ToolCallStarted, TurnStarted
from neuralis_jupyter.store.tickets import TicketError

from .exec_support import ExecRig, exec_data_root, exec_session, gone, needs_bwrap, processes_with

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


def test_a_replayed_execute_call_returns_the_recorded_result_without_running(
    rig: ExecRig, tmp_path: Path
) -> None:
    """execute is not deterministic: a cassette replay hands back the recorded result, and the shell
    command does not run again."""
    path = tmp_path / "run.cassette.jsonl"
    command = "echo ran >> runs.txt; cat /proc/sys/kernel/random/uuid"
    script = [Reply(calls=(Call(name="execute", input={"command": command}, id="c0"),)), Reply(text="done")]
    record = Cassette(path, "record")
    record.volatile_value(rig.conv.id, "conversation_id")
    assert (
        asyncio.run(rig.turn(CassetteModel(record, ScriptedModel(script)), tape=record)).status == "completed"
    )
    recorded = rig.result("c0")
    assert (rig.workspace / "runs.txt").read_text() == "ran\n"

    rig.conv = rig.store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
    replay = Cassette(path, "replay")
    replay.volatile_value(rig.conv.id, "conversation_id")
    settled = asyncio.run(rig.turn(CassetteModel(replay), tape=replay))
    assert (settled.status, settled.text) == ("completed", "done")
    replay.assert_complete()
    assert rig.result("c0")["content"] == recorded["content"]
    assert (rig.workspace / "runs.txt").read_text() == "ran\n"
