"""What goes wrong around a turn stays the turn's business: a failed usage write is retried, a failure in
the tool path is the call's error, anything else settles the turn ``failed``, a failing stop poll keeps
polling. Real store, real turns; failures are injected below our code (SQLAlchemy, os, the filesystem)."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
from typing import Any

import pytest
import sqlalchemy as sa

from neuralis_jupyter.policy import HeadlessApprover, PolicyEngine
from neuralis_jupyter.providers.cassette import FORMAT, Cassette, CassetteModel
from neuralis_jupyter.providers.errors import CassetteMismatch
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, StopSignal, Tool, ToolOutput, ToolRegistry, TurnRequest
from neuralis_jupyter.runtime.events import TurnSettled
from neuralis_jupyter.runtime.subagents import run_child
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store

from .helpers import OBJ, Probe, session


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


@pytest.fixture
def conv(store):
    return store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")


def run(store, conv, model, tools, **kw):
    events: list[Any] = []
    req = TurnRequest(session=session(), conversation=conv, model=model, tools=tools, message="go", **kw)
    settled = asyncio.run(AgentRuntime(store).run(req, on_event=events.append))
    assert [e for e in events if isinstance(e, TurnSettled)] == [settled]  # exactly one, and last
    return settled


def one_tool(name: str, handler: Any, **kw: Any) -> ToolRegistry:
    tool = Tool(
        name=name,
        description=name,
        input_schema=OBJ,
        handler=handler,
        access="read",
        package_id=AGENT_CORE_ID,
        **kw,
    )
    return ToolRegistry.of([tool])


def results_of(conv):
    return {b["tool_use_id"]: b for r in conv.read_all() if r["role"] == "tool" for b in r["content"]}


def four_steps() -> ScriptedModel:
    steps = [
        Reply(calls=(Call(name="lookup", id=f"t{i}"),), input_tokens=100, output_tokens=10) for i in range(3)
    ]
    return ScriptedModel([*steps, Reply(text="done", input_tokens=100, output_tokens=10)])


def failing_usage_inserts(monkeypatch, times: int | None) -> list[Any]:
    """Make SQLAlchemy fail the next ``times`` inserts into usage_events (every one when None)."""
    failed: list[Any] = []
    execute = sa.engine.Connection.execute

    def flaky(self, statement, *args, **kwargs):
        if (
            isinstance(statement, sa.sql.dml.Insert)
            and statement.table.name == "usage_events"
            and (times is None or len(failed) < times)
        ):
            failed.append(statement)
            raise sa.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))
        return execute(self, statement, *args, **kwargs)

    monkeypatch.setattr(sa.engine.Connection, "execute", flaky)
    return failed


# -- finding 1: usage writes ------------------------------------------------------------------------


def test_a_failed_usage_write_is_retried_and_loses_nothing(store, conv, monkeypatch, caplog):
    failed = failing_usage_inserts(monkeypatch, times=1)
    settled = run(store, conv, four_steps(), Probe().registry())
    assert settled.status == "completed"
    assert len(failed) == 1
    [row] = store.usage.list("default")
    assert (row.steps, row.input_tokens, row.output_tokens) == (4, 400, 40)
    assert "could not write the usage" in caplog.text


def test_usage_that_cannot_be_written_is_logged_at_the_end(store, conv, monkeypatch, caplog):
    failing_usage_inserts(monkeypatch, times=None)
    settled = run(store, conv, four_steps(), Probe().registry())
    assert settled.status == "completed"
    assert settled.input_tokens == 400  # the turn still knows what it spent
    assert store.usage.list("default") == []
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert any("could not be written" in r.getMessage() for r in errors)


# -- finding 3: failures in the tool path and around it --------------------------------------------------


def test_a_nan_input_under_safe_is_the_calls_error_not_a_crash(store, conv):
    """A pending interaction cannot store NaN (canonical JSON refuses it): the call errors, the turn goes
    on."""
    probe = Probe()
    model = ScriptedModel(
        [Reply(calls=(Call(name="write_note", input={"x": float("nan")}, id="w"),)), Reply(text="ok")]
    )
    engine = PolicyEngine(store, guard="safe", approver=HeadlessApprover())
    settled = run(store, conv, model, probe.registry(), policy=engine, permission=engine)
    assert settled.status == "completed"
    block = results_of(conv)["w"]
    assert (block["outcome"], block["is_error"]) == ("error", True)
    assert "ValueError" in block["content"]
    assert probe.calls == []
    model.assert_complete()


def test_a_result_that_cannot_be_offloaded_is_the_calls_error(store, conv):
    (conv.path / "results").write_text("a file where the results directory should be")
    probe = Probe()
    tools = ToolRegistry.of([probe.tool("dump", reply="x" * 30_000)])
    model = ScriptedModel([Reply(calls=(Call(name="dump", id="d"),)), Reply(text="ok")])
    settled = run(store, conv, model, tools)
    assert settled.status == "completed"
    block = results_of(conv)["d"]
    assert block["outcome"] == "error"
    assert "FileExistsError" in block["content"]


def test_a_tool_row_that_cannot_be_written_settles_the_turn_failed(store, conv, monkeypatch):
    """The disk fills as the tool's result is written: the TaskGroup's ExceptionGroup becomes 'failed'."""
    armed = {"on": False}
    write = os.write

    def full_once(fd: int, data: Any) -> int:
        if armed["on"]:
            armed["on"] = False
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(fd, data)

    monkeypatch.setattr(os, "write", full_once)

    async def arm(args: dict[str, Any], ctx: Any) -> ToolOutput:
        armed["on"] = True
        return ToolOutput(content="done")

    model = ScriptedModel([Reply(calls=(Call(name="lookup", id="l"),))])
    settled = run(store, conv, model, one_tool("lookup", arm))
    assert settled.status == "failed"
    assert "OSError" in settled.reason
    assert "No space left on device" in settled.reason
    last = conv.read_all()[-1]
    assert (last["role"], last["content"][0]["type"]) == ("event", "failed")
    assert "l" not in results_of(conv)


def test_a_replay_mismatch_in_a_sub_agent_propagates_unwrapped(store, conv, tmp_path):
    """A CassetteMismatch raised under the step's TaskGroup is re-raised as itself (neuralis run exits 3)."""
    path = tmp_path / "child.cassette.jsonl"
    path.write_text(f'{{"type": "header", "format": "{FORMAT}", "provider": "scripted", "model": "demo"}}\n')

    async def spawn(args: dict[str, Any], ctx: Any) -> ToolOutput:
        child = CassetteModel(Cassette(path, "replay"))
        ran = await run_child(ctx, task="look", agent="general", tools=ToolRegistry(), model=child)
        return ToolOutput(content=ran.settled.text)

    tools = one_tool("spawn", spawn, intrinsic=True)
    model = ScriptedModel([Reply(calls=(Call(name="spawn", id="s"),)), Reply(text="never reached")])
    req = TurnRequest(session=session(), conversation=conv, model=model, tools=tools, message="go")
    with pytest.raises(CassetteMismatch, match="holds 0 model calls"):
        asyncio.run(AgentRuntime(store).run(req))


# -- finding 9: the stop poll ------------------------------------------------------------------------


def test_a_failing_stop_poll_keeps_polling(store, conv, caplog):
    state = {"failures": 0, "stop": False}

    def poll() -> bool:
        if state["failures"]:
            state["failures"] -= 1
            raise sqlite3.OperationalError("database is locked")
        return state["stop"]

    async def slow(args: dict[str, Any], ctx: Any) -> ToolOutput:
        state["failures"], state["stop"] = 3, True  # the store fails, then a stop is found
        await asyncio.sleep(30)
        return ToolOutput(content="never")

    tools = one_tool("slow", slow)
    stop = StopSignal(poll=poll, poll_interval=0.02)
    model = ScriptedModel([Reply(calls=(Call(name="slow", id="s"),))])
    req = TurnRequest(session=session(), conversation=conv, model=model, tools=tools, message="go", stop=stop)

    async def go() -> TurnSettled:
        return await asyncio.wait_for(AgentRuntime(store).run(req), timeout=10)

    settled = asyncio.run(go())
    assert settled.status == "stopped"
    assert results_of(conv)["s"]["outcome"] == "stopped"
    assert state["failures"] == 0
    assert caplog.text.count("could not poll for a stop request") == 3
