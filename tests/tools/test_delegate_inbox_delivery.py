"""A background sub-agent run's reports and inbox under strain: a report's follow-up turn holds no slot,
a failed delivery is tried again and never dropped, accepted messages are never stranded, a restart
lists what never arrived, a store stop ends the run's turns, and a sender is rate-limited."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from dataclasses import replace
from pathlib import Path

import pytest

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.contracts.identity import SessionContext
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import Tool, ToolOutput
from neuralis_jupyter.runtime.inbox import (
    BackgroundDelegates,
    DetachedRun,
    InboxRateLimited,
    InboxRunNotResumable,
    RunReport,
    read_undelivered,
)
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import NotFound, Store
from neuralis_jupyter.store.conversations import Conversation
from neuralis_jupyter.workbench import Workbench

OBJ = {"type": "object", "properties": {}, "additionalProperties": True}
PARENT = "start it"
ALICE = SessionContext(user_id="alice", project_id="p")


def workbench(home: Path) -> Workbench:
    store = Store.open(home)
    path = store.data_root.project_dir("lab") / "project.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"id": "lab", "members": {"alice": "owner", "dave": "admin"}}))
    return Workbench(NeuralisSettings(data_root=str(home)), store=store)


@pytest.fixture
def bench(tmp_path):
    return workbench(tmp_path / "home")


def gate_tool(entered: asyncio.Event, release: asyncio.Event) -> Tool:
    async def handler(args, ctx):
        entered.set()
        await release.wait()
        return ToolOutput(content="looked")

    return Tool(
        name="lookup", description="look", input_schema=OBJ, handler=handler, access="read",
        package_id=AGENT_CORE_ID,
    )  # fmt: skip


def routed(parent: list, children: dict[str, list]) -> ScriptedModel:
    """One model for a parent and its children, each answered from its own script (by the first user
    message of the conversation asking), so the order their turns interleave in changes nothing."""
    queues = {PARENT: deque(parent), **{task: deque(replies) for task, replies in children.items()}}

    def answer(request):
        return queues[request.messages[0]["content"][0]["text"]].popleft()

    return ScriptedModel([answer] * (len(parent) + sum(len(r) for r in children.values())))


def delegating(*tasks: str) -> Reply:
    calls = [Call(name="delegate", id=f"d-{t}", input={"task": t, "background": True}) for t in tasks]
    return Reply(calls=tuple(calls))


async def turn(bench, target, model, tools=()):
    """One of alice's turns; the results of its delegate calls by task."""
    started = {}

    def on_event(event):
        if event.type == "tool_call_finished" and event.name == "delegate":
            started[event.tool_use_id.removeprefix("d-")] = event

    async with bench.turn(target, PARENT, model=model) as request:
        request = replace(request, tools=request.tools.merge(list(tools)))
        await bench.runtime.run(request, on_event=on_event)
    return started


async def until(predicate, seconds=10.0):
    """Poll ``predicate`` until it holds; the bound only turns a hang into a failure."""
    async with asyncio.timeout(seconds):
        while not predicate():  # noqa: ASYNC110 - the state polled here announces no event
            await asyncio.sleep(0.01)


def reports(target):
    return [b for r in target.conversation.read_all() for b in r["content"] if b["type"] == "delegate_report"]


def test_a_report_waiting_for_its_parent_turn_holds_no_slot_and_delays_no_message(bench):
    bench.settings.config.DelegateSettings.max_background = 2
    release, held, cancelled = asyncio.Event(), [], []

    async def cont(session, conversation, report, owed=None):
        # The parent conversation is busy: the report's follow-up turn waits for it, a long time.
        held.append(report.text.split("\n")[0])
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.append(report.text.split("\n")[0])
            raise

    bench.tool_env.services["continue"] = cont
    model = routed(
        [delegating("job 1", "job 2"), Reply(text="both started"), delegating("job 3"), Reply(text="ok")],
        {
            "job 1": [Reply(text="done 1"), Reply(text="answered 1")],
            "job 2": [Reply(text="done 2")],
            "job 3": [Reply(text="done 3")],
        },
    )

    async def go():
        target = bench.target("alice", project_id="lab")
        first = await turn(bench, target, model)
        runs = bench.tool_env.services["delegates"]
        await until(lambda: sorted(held) == ["done 1", "done 2"])
        # Both runs have ended; their follow-ups wait. A third run still finds a free slot...
        third = await turn(bench, target, model)
        # ...and a message to the first run is answered without waiting for its report's follow-up.
        await runs.send(first["job 1"].data["run_id"], "one more thing", target.session)
        await until(lambda: "answered 1" in held)
        await until(lambda: "done 3" in held)
        drained_early = await bench.drain_background(0)
        await bench.aclose()
        return target, third, drained_early

    target, third, drained_early = asyncio.run(go())
    assert third["job 3"].data["status"] == "running", third["job 3"].content
    assert {(r["turn"], r["text"].split("\n")[0]) for r in reports(target)} == {
        (1, "done 1"),
        (1, "done 2"),
        (2, "answered 1"),
        (1, "done 3"),
    }
    assert not drained_early, "drain_background waits for the follow-up turns too"
    assert sorted(cancelled) == sorted(held), "aclose cancels the follow-ups: no task is left unowned"
    model.assert_complete()


# -- the registry, driven directly with the run callables a starter hands over ---------------------


class Parent:
    """A run's starter as the registry sees it: turns that answer at once, or once ``hold`` opens;
    with ``breaks``, the first inbox turn raises once it opens (a starter that breaks its contract)."""

    def __init__(
        self, directory: Path, *, hold: asyncio.Event | None = None, breaks: asyncio.Event | None = None
    ):
        directory.mkdir(parents=True)
        (directory / "messages.jsonl").touch()
        self.conversation = Conversation(directory, conversation_id="d-run")
        self.hold = hold
        self.breaks = breaks
        self.reports: list[RunReport] = []
        self.resumed = 0

    def run(self) -> DetachedRun:
        async def first():
            if self.hold is not None:
                await self.hold.wait()
            return "first"

        async def resume(sender):
            self.resumed += 1
            if self.breaks is not None and self.resumed == 1:
                await self.breaks.wait()
                raise RuntimeError("the turn broke outside its own error handling")
            return f"answered {self.resumed}"

        async def report(done):
            self.reports.append(done)

        return DetachedRun(
            run_id="d-run", conversation=self.conversation, project_id="p", parent_owner="alice",
            first=first, resume=resume, report=report,
        )  # fmt: skip

    def delivered(self) -> list[str]:
        rows = self.conversation.read_all()
        return [b["message"] for r in rows if r["role"] == "event" for b in r["content"]]


class FixOnFirstFailure(logging.Handler):
    """Clears the fault the moment the registry logs its first failed delivery (before it retries)."""

    def __init__(self, fault: Path) -> None:
        super().__init__()
        self.fault = fault

    def emit(self, record: logging.LogRecord) -> None:
        if "attempt 1 of" in record.getMessage() and self.fault.is_dir():
            self.fault.rmdir()
            self.fault.touch()


@pytest.fixture
def inbox_log():
    logger = logging.getLogger("neuralis_jupyter.runtime.inbox")
    handlers = []

    def attach(handler):
        logger.addHandler(handler)
        handlers.append(handler)

    yield attach
    for handler in handlers:
        logger.removeHandler(handler)


def test_a_failed_delivery_is_tried_again_and_the_message_arrives(tmp_path, inbox_log):
    hold = asyncio.Event()
    parent = Parent(tmp_path / "run", hold=hold)
    transcript = parent.conversation.path / "messages.jsonl"
    inbox_log(FixOnFirstFailure(transcript))

    async def go():
        runs = BackgroundDelegates(limit=2, retry_delay=0.01)
        runs.start(parent.run())
        sent = await runs.send("d-run", "look again", ALICE)
        transcript.unlink()
        transcript.mkdir()  # the transcript cannot be appended to: the delivery fails
        hold.set()
        await until(lambda: not runs.pending())
        return sent

    sent = asyncio.run(go())
    assert parent.delivered() == ["look again"]
    assert [(r.turn, r.text, r.inbox_ids) for r in parent.reports] == [
        (1, "first", ()),
        (2, "answered 1", (sent["id"],)),
    ]
    assert read_undelivered(parent.conversation.path) == []


def test_a_delivery_that_keeps_failing_stays_undelivered_on_disk_and_the_run_goes_on(tmp_path):
    hold = asyncio.Event()
    parent = Parent(tmp_path / "run", hold=hold)
    transcript = parent.conversation.path / "messages.jsonl"

    async def go():
        runs = BackgroundDelegates(limit=2, retry_delay=0.01, deliver_attempts=2)
        runs.start(parent.run())
        lost = await runs.send("d-run", "never arrives", ALICE)
        transcript.unlink()
        transcript.mkdir()
        hold.set()
        await until(lambda: not runs.is_working("d-run"))
        transcript.rmdir()
        transcript.touch()
        await runs.send("d-run", "arrives", ALICE)
        await until(lambda: not runs.is_working("d-run"))
        return lost, await runs.undelivered("d-run", ALICE)

    lost, undelivered = asyncio.run(go())
    assert [m["id"] for m in undelivered] == [lost["id"]]
    assert read_undelivered(parent.conversation.path) == undelivered
    assert parent.delivered() == ["arrives"]
    assert [r.text for r in parent.reports] == ["first", "answered 1"]


def test_messages_waiting_when_a_turn_breaks_are_still_taken(tmp_path):
    breaks = asyncio.Event()
    parent = Parent(tmp_path / "run", breaks=breaks)

    async def go():
        runs = BackgroundDelegates(limit=2)
        runs.start(parent.run())
        await until(lambda: not runs.is_working("d-run"))
        await runs.send("d-run", "first message", ALICE)
        await until(lambda: parent.resumed == 1)  # its turn runs, and will break
        waiting = await runs.send("d-run", "second message", ALICE)
        breaks.set()
        await until(lambda: not runs.pending())
        return runs, waiting

    runs, waiting = asyncio.run(go())
    assert parent.delivered() == ["first message", "second message"]
    assert parent.reports[-1].inbox_ids == (waiting["id"],)
    assert not runs.is_working("d-run")
    assert read_undelivered(parent.conversation.path) == []


# -- after a restart -------------------------------------------------------------------------------


def test_after_a_restart_undelivered_messages_are_listed_and_a_send_says_why_it_cannot_continue(tmp_path):
    home = tmp_path / "home"
    before = workbench(home)
    entered, release = asyncio.Event(), asyncio.Event()
    model = routed(
        [delegating("slow"), Reply(text="started")], {"slow": [Reply(calls=(Call(name="lookup", id="c1"),))]}
    )

    async def first_process():
        target = before.target("alice", project_id="lab")
        started = await turn(before, target, model, [gate_tool(entered, release)])
        run_id = started["slow"].data["run_id"]
        await asyncio.wait_for(entered.wait(), 10)
        sent = await before.tool_env.services["delegates"].send(run_id, "still there?", target.session)
        await before.aclose()  # the process ends while the run works: the message never arrived
        return target, run_id, sent

    target, run_id, sent = asyncio.run(first_process())
    after = workbench(home)

    async def second_process():
        _ = after.packages  # the native tools, and the registry, as a host builds them
        runs = after.tool_env.services["delegates"]
        with pytest.raises(NotFound):  # this process never heard of the run...
            await runs.undelivered(run_id, target.session)
        assert runs.recover(target.conversation) == [run_id]  # ...until it looks on disk
        listed = await runs.undelivered(run_id, target.session)
        with pytest.raises(InboxRunNotResumable) as refused:
            await runs.send(run_id, "and now?", target.session)
        with pytest.raises(NotFound):
            await runs.undelivered(run_id, after.session("alice", "default"))
        return listed, refused.value

    listed, refused = asyncio.run(second_process())
    assert [(m["id"], m["text"]) for m in listed] == [(sent["id"], "still there?")]
    assert refused.code == "inbox_run_not_resumable"
    assert "Delegate the task again" in str(refused)
    assert str(target.conversation.path / "delegates" / run_id / "messages.jsonl") in str(refused)


# -- the run's own stop ----------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["first turn", "inbox turn"])
def test_a_stop_request_for_the_runs_conversation_ends_its_turn(bench, which):
    bench.tool_env.services["continue"] = None
    entered, release = asyncio.Event(), asyncio.Event()
    look = Reply(calls=(Call(name="lookup", id="c1"),))
    child = [look] if which == "first turn" else [Reply(text="first"), look]
    model = routed([delegating("job"), Reply(text="started")], {"job": child})

    async def go():
        target = bench.target("alice", project_id="lab")
        started = await turn(bench, target, model, [gate_tool(entered, release)])
        run_id = started["job"].data["run_id"]
        runs = bench.tool_env.services["delegates"]
        if which == "inbox turn":
            await until(lambda: not runs.is_working(run_id))
            await runs.send(run_id, "look it up", target.session)
        await asyncio.wait_for(entered.wait(), 10)
        # What the stop route writes, for the run's own conversation; the gate is never opened.
        await asyncio.to_thread(
            bench.store.stops.request, project_id="lab", conversation_id=run_id, requested_by="alice"
        )
        drained = await bench.drain_background(10)
        await bench.aclose()
        return target, drained

    target, drained = asyncio.run(go())
    assert drained, "the stop request did not end the run's turn"
    assert "[The sub-agent settled stopped: stop requested]" in reports(target)[-1]["text"]
    assert not release.is_set()


# -- the brakes ------------------------------------------------------------------------------------


def test_one_sender_is_rate_limited_per_minute_and_another_is_not(bench):
    bench.settings.config.DelegateSettings.inbox_rate_limit = 2
    bench.tool_env.services["continue"] = None
    model = routed([delegating("job"), Reply(text="started")], {"job": [Reply(text="ok")] * 6})

    async def go():
        target = bench.target("alice", project_id="lab")
        started = await turn(bench, target, model)
        run_id = started["job"].data["run_id"]
        runs = bench.tool_env.services["delegates"]
        for n in (1, 2):
            await runs.send(run_id, f"note {n}", target.session)
        with pytest.raises(InboxRateLimited) as limited:
            await runs.send(run_id, "note 3", target.session)
        await runs.send(run_id, "from the admin", bench.session("dave", "lab"))
        assert await bench.drain_background(10)
        return target, run_id, limited.value

    target, run_id, limited = asyncio.run(go())
    assert limited.code == "inbox_rate_limited"
    assert "inbox_rate_limit" in str(limited)
    inbox = target.conversation.path / "delegates" / run_id / "inbox.jsonl"
    entries = [json.loads(line) for line in inbox.read_text().splitlines()]
    assert [e["message"]["text"] for e in entries if e["op"] == "queued"] == [
        "note 1",
        "note 2",
        "from the admin",
    ]
