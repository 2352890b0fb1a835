"""Background shells: the report continues the conversation, only the starter may see or stop a shell,
a stopped turn leaves its background shell running, and the manager's close kills what is left."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuralis_jupyter.contracts import SessionContext
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import StopSignal
from neuralis_jupyter.runtime.events import BackgroundReport, RuntimeEvent, ToolCallStarted
from neuralis_jupyter.store.conversations import Conversation
from neuralis_jupyter.store.errors import NotFound
from neuralis_jupyter.tools.shells import BackgroundShells, ShellStopForbidden, resolve_data_uri

from .exec_support import ExecRig, exec_data_root, exec_session, gone, needs_bwrap, processes_with

pytestmark = needs_bwrap


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ExecRig]:
    with exec_data_root(tmp_path) as root:
        yield ExecRig.build(root)


def background(command: str, call_id: str = "b1", **extra: Any) -> Reply:
    return Reply(
        calls=(Call(name="execute", input={"command": command, "background": True, **extra}, id=call_id),)
    )


def started(rig: ExecRig, call_id: str = "b1") -> dict[str, Any]:
    block = rig.result(call_id)
    assert block["outcome"] == "ok", block["content"]
    return json.loads(block["content"])


def shells_of(rig: ExecRig) -> BackgroundShells:
    shells = rig.env.services["shells"]
    assert isinstance(shells, BackgroundShells)
    return shells


async def ended(shells: BackgroundShells, session: SessionContext, shell_id: str) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            meta = next(m for m in shells.list(session) if m["shellId"] == shell_id)
            if meta["status"] != "running":
                return dict(meta)
            await asyncio.sleep(0.05)


def reports(rig: ExecRig) -> list[dict[str, Any]]:
    rows = rig.conv.read_all()
    return [b for r in rows if r["role"] == "event" for b in r["content"] if b["type"] == "background_report"]


def test_the_report_arrives_and_continues_the_conversation(rig: ExecRig) -> None:
    model = ScriptedModel(
        [
            background("echo hi; sleep 0.3; echo bye"),
            Reply(text="Started it; I will wait for the report."),
            Reply(text="It printed hi and bye."),  # the continuation's turn
        ]
    )
    seen: dict[str, Any] = {}

    async def go() -> None:
        continued = asyncio.Event()

        async def resume(
            session: SessionContext, conversation: Conversation, report: BackgroundReport
        ) -> None:
            seen.update(session=session, conversation=conversation, report=report)
            seen["settled"] = await rig.turn(model, session=session, message=None)
            continued.set()

        rig.env.services["continue"] = resume
        try:
            first = await rig.turn(model)
            assert first.status == "completed"
            assert not continued.is_set(), "the turn returned before the shell ended"
            await asyncio.wait_for(continued.wait(), timeout=10)
        finally:
            await shells_of(rig).aclose()

    asyncio.run(go())
    handle = started(rig)
    assert handle["shellId"].startswith("nrs-sh-")
    assert handle["status"] == "running"
    prefix = (
        f"data://projects/default/agents/assistant/conversations/{rig.conv.id}/shells/{handle['shellId']}/"
    )
    assert handle["statusUri"] == prefix + "meta.json"
    assert handle["outputUri"] == prefix + "output.jsonl"

    # The continuation ran as the starter, in a new turn, and the model read the report.
    assert (seen["session"].user_id, seen["session"].agent_id, seen["session"].request_id) == (
        "alice",
        "assistant",
        None,
    )
    assert seen["conversation"].id == rig.conv.id
    assert seen["settled"].status == "completed"
    model.assert_complete()
    sent = json.dumps(model.requests[-1].messages)
    assert "<background_report>" in sent
    assert f"Background shell {handle['shellId']} exited with code 0" in sent
    assert "hi\\nbye" in sent
    [row] = reports(rig)
    assert (row["shell_id"], row["exit_code"]) == (handle["shellId"], 0)
    assert seen["report"].text == row["text"]

    lines = [json.loads(x) for x in resolve_data_uri(rig.root, handle["outputUri"]).read_text().splitlines()]
    assert "".join(x["text"] for x in lines) == "hi\nbye\n"
    assert {x["stream"] for x in lines} == {"stdout"}
    assert all(isinstance(x["t"], float) for x in lines)
    meta = json.loads(resolve_data_uri(rig.root, handle["statusUri"]).read_text())
    assert (meta["status"], meta["exitCode"], meta["command"]) == (
        "exited",
        0,
        "echo hi; sleep 0.3; echo bye",
    )
    assert meta["owner"] == {"userId": "alice", "agentId": "assistant", "projectId": "default"}
    assert meta["endedAt"] >= meta["startedAt"]


def test_only_the_starter_sees_and_stops_a_shell_and_a_stopped_turn_leaves_it_running(rig: ExecRig) -> None:
    marker = f"1000.{secrets.randbelow(10**6):06d}"
    owner = exec_session()
    other_agent = exec_session(agent_id="other")
    other_user = exec_session(user_id="bob")
    other_project = exec_session(project_id="elsewhere")
    continued: list[BackgroundReport] = []

    async def resume(session: SessionContext, conversation: Conversation, report: BackgroundReport) -> None:
        continued.append(report)

    rig.env.services["continue"] = resume
    model = ScriptedModel(
        [
            background(f"sleep {marker}"),
            Reply(calls=(Call(name="execute", input={"command": "sleep 30"}, id="fg"),)),
        ]
    )
    stop = StopSignal()

    def on_event(event: RuntimeEvent) -> None:
        if isinstance(event, ToolCallStarted) and event.tool_use_id == "fg":
            asyncio.get_running_loop().call_later(0.2, stop.set, "user pressed stop")

    async def go() -> dict[str, Any]:
        shells: BackgroundShells | None = None
        try:
            assert (await rig.turn(model, stop=stop, on_event=on_event)).status == "stopped"
            shells = shells_of(rig)
            shell_id = started(rig)["shellId"]
            [listed] = shells.list(owner)
            assert (listed["shellId"], listed["status"]) == (shell_id, "running")
            assert processes_with(marker), "the background shell outlives the stopped turn"

            with pytest.raises(ShellStopForbidden) as forbidden:
                await shells.kill(other_agent, shell_id)
            assert forbidden.value.code == "shell_stop_forbidden"
            with pytest.raises(ShellStopForbidden):
                await shells.kill(other_user, shell_id)
            with pytest.raises(NotFound):
                await shells.kill(other_project, shell_id)
            for stranger in (other_agent, other_user, other_project):
                assert shells.list(stranger) == []
                with pytest.raises(NotFound):
                    await shells.output(stranger, shell_id)
            assert processes_with(marker), "a refused kill stops nothing"

            meta = await shells.kill(owner, shell_id)
            assert (meta["status"], meta["exitCode"]) == ("killed", None)
            assert await gone(marker), processes_with(marker)
            assert (await shells.kill(owner, shell_id))["status"] == "killed"  # idempotent
            return dict(meta)
        finally:
            if shells is not None:
                await shells.aclose()

    meta = asyncio.run(go())
    [row] = reports(rig)
    assert row["shell_id"] == meta["shellId"]
    assert row["exit_code"] is None
    assert "was stopped by a kill request" in row["text"]
    assert continued == [], "a killed shell's report does not start a turn"
    assert json.loads(resolve_data_uri(rig.root, meta["statusUri"]).read_text())["status"] == "killed"


def test_output_since_and_a_background_timeout(tmp_path: Path) -> None:
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"background_timeout": 0.5})
        owner = exec_session()
        marker = f"1000.{secrets.randbelow(10**6):06d}"
        model = ScriptedModel(
            [
                background("echo one; echo two >&2; sleep 0.1; echo three", "b1"),
                background(f"echo start; sleep {marker}", "b2"),
                Reply(text="ok"),
            ]
        )

        async def go() -> tuple[list[Any], list[Any], dict[str, Any]]:
            shells: BackgroundShells | None = None
            try:
                await rig.turn(model)
                shells = shells_of(rig)
                quick, slow = started(rig, "b1")["shellId"], started(rig, "b2")["shellId"]
                assert (await ended(shells, owner, quick))["exitCode"] == 0
                everything = await shells.output(owner, quick)
                later = await shells.output(owner, quick, since=1)
                with pytest.raises(ValueError, match="since"):
                    await shells.output(owner, quick, since=-1)
                timed_out = await ended(shells, owner, slow)
                assert await gone(marker), processes_with(marker)
                return everything, later, timed_out
            finally:
                if shells is not None:
                    await shells.aclose()

        everything, later, timed_out = asyncio.run(go())
        assert [(x["stream"], x["text"]) for x in everything] == [
            ("stdout", "one\n"),
            ("stderr", "two\n"),
            ("stdout", "three\n"),
        ]
        assert later == everything[1:]
        assert (timed_out["status"], timed_out["exitCode"]) == ("timed_out", None)
        slow_report = next(r for r in reports(rig) if r["shell_id"] == timed_out["shellId"])
        assert "was killed when its 0.5 s timeout ran out" in slow_report["text"]
        assert "start" in slow_report["text"]


def test_close_kills_what_is_running_and_refuses_new_shells(rig: ExecRig) -> None:
    marker = f"1000.{secrets.randbelow(10**6):06d}"

    async def go() -> None:
        await rig.turn(ScriptedModel([background(f"sleep {marker}"), Reply(text="ok")]))
        shells = shells_of(rig)
        await shells.aclose()
        assert await gone(marker), processes_with(marker)
        assert [m["status"] for m in shells.list(exec_session())] == ["killed"]
        await rig.turn(ScriptedModel([background("echo late", "b2"), Reply(text="ok")]))

    asyncio.run(go())
    late = rig.result("b2")
    assert late["outcome"] == "error"
    assert "background shell manager is closed" in late["content"]


@pytest.mark.parametrize(
    "uri", ["data://../x", "data:///etc/passwd", "file:///etc/passwd", "data://a/../../x"]
)
def test_resolve_data_uri_stays_in_the_data_root(tmp_path: Path, uri: str) -> None:
    with pytest.raises(ValueError, match="data root"):
        resolve_data_uri(tmp_path, uri)


def test_output_is_readable_while_the_shell_still_runs(rig: ExecRig) -> None:
    owner = exec_session()
    model = ScriptedModel([background("echo early; sleep 30; echo late"), Reply(text="ok")])

    async def go() -> tuple[list[Any], str]:
        shells: BackgroundShells | None = None
        try:
            await rig.turn(model)
            shells = shells_of(rig)
            shell_id = started(rig)["shellId"]
            async with asyncio.timeout(10):
                while True:
                    if chunks := await shells.output(owner, shell_id):
                        break
                    await asyncio.sleep(0.05)
            status = next(m for m in shells.list(owner) if m["shellId"] == shell_id)["status"]
            return chunks, status
        finally:
            if shells is not None:
                await shells.aclose()

    chunks, status = asyncio.run(go())
    # The first line is there while the shell is still sleeping: output is appended as it comes.
    assert status == "running"
    assert [(c["stream"], c["text"]) for c in chunks] == [("stdout", "early\n")]
