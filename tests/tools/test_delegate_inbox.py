"""A background sub-agent run's own inbox: settle delivery, the sender named, reports again, bounds."""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from dataclasses import replace

import pytest

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import Tool, ToolOutput
from neuralis_jupyter.runtime.inbox import (
    INBOX_FILE,
    InboxDeliveryInvalid,
    InboxDeliveryUnsupported,
    InboxForbidden,
    InboxFull,
    InboxToSelf,
    read_undelivered,
)
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import NotFound, Store
from neuralis_jupyter.workbench import Workbench

OBJ = {"type": "object", "properties": {}, "additionalProperties": True}
PARENT, TASK = "start it", "slow job"


@pytest.fixture
def bench(tmp_path):
    home = tmp_path / "home"
    store = Store.open(home)
    for project, members in {
        "lab": {"alice": "owner", "bob": "member", "dave": "admin"},
        "other": {"alice": "owner"},
    }.items():
        path = store.data_root.project_dir(project) / "project.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"id": project, "members": members}))
    bench = Workbench(NeuralisSettings(data_root=str(home)), store=store)
    bench.reports = []

    async def cont(session, conversation, report, owed=None):  # the host's continuation, recorded
        bench.reports.append((session, conversation.id, report))

    bench.tool_env.services["continue"] = cont
    return bench


class Gate:
    """A read tool the child calls; it holds the child's first turn open until released."""

    def __init__(self):
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    def tool(self):
        async def handler(args, ctx):
            self.entered.set()
            await self.release.wait()
            return ToolOutput(content="looked")

        return Tool(
            name="lookup",
            description="look",
            input_schema=OBJ,
            handler=handler,
            access="read",
            package_id=AGENT_CORE_ID,
        )


def routed(parent, child):
    """One model for the parent and its child, each answered from its own script (by the first user
    message of the conversation asking), so the order their turns interleave in changes nothing."""
    queues = {PARENT: deque(parent), TASK: deque(child)}

    def answer(request):
        return queues[request.messages[0]["content"][0]["text"]].popleft()

    return ScriptedModel([answer] * (len(parent) + len(child)))


PARENT_SCRIPT = [
    Reply(calls=(Call(name="delegate", id="d1", input={"task": TASK, "background": True}),)),
    Reply(text="parent carries on"),
]


async def start(bench, model, gate=None):
    """Alice's turn in the lab project that starts the background run; its run id."""
    target = bench.target("alice", project_id="lab")
    started = []

    def on_event(event):
        if event.type == "tool_call_finished" and event.name == "delegate":
            started.append(event)

    async with bench.turn(target, PARENT, model=model) as request:
        if gate is not None:
            request = replace(request, tools=request.tools.merge([gate.tool()]))
        await bench.runtime.run(request, on_event=on_event)
    (event,) = started
    assert event.data["status"] == "running", event.content
    return target, event.data["run_id"]


async def drain(bench):
    assert await bench.drain_background(10)


def child_rows(target, run_id):
    path = target.conversation.path / "delegates" / run_id / "messages.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def delegate_reports(target):
    return [b for r in target.conversation.read_all() for b in r["content"] if b["type"] == "delegate_report"]


def test_a_message_sent_while_the_run_works_is_delivered_when_its_turn_ends(bench):
    gate = Gate()
    model = routed(
        PARENT_SCRIPT,
        [
            Reply(calls=(Call(name="lookup", id="c1"),)),
            Reply(text="first summary"),
            Reply(text="second summary"),
        ],
    )

    async def go():
        target, run_id = await start(bench, model, gate)
        runs = bench.tool_env.services["delegates"]
        await asyncio.wait_for(gate.entered.wait(), timeout=10)
        queued = await runs.send(run_id, "Also check the tests folder.", target.session)
        listed = await runs.undelivered(run_id, target.session)
        # What a restarted process would list: the file, without the run.
        on_disk = read_undelivered(target.conversation.path / "delegates" / run_id)
        gate.release.set()
        await drain(bench)
        return target, run_id, queued, listed, on_disk

    target, run_id, queued, listed, on_disk = asyncio.run(go())
    assert queued["queued"] is True
    assert re.fullmatch(r"msg_[0-9a-f]{24}", queued["id"])
    assert [(m["id"], m["delivery"], m["text"]) for m in listed] == [
        (queued["id"], "settle", "Also check the tests folder.")
    ]
    assert listed[0]["from"] == {
        "userId": "alice",
        "agentId": target.agent.id,
        "conversationId": target.conversation.id,
    }
    assert on_disk == listed

    rows = child_rows(target, run_id)
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant", "event", "assistant"]
    (block,) = rows[4]["content"]
    assert block["type"] == "inbox_message"
    assert block["id"] == queued["id"]
    assert block["from"]["userId"] == "alice"
    assert block["message"] == "Also check the tests folder."
    assert rows[4]["user_id"] == "alice"
    # The continuation's model request carries the message, naming its sender, after the first summary.
    last = model.requests[-1]
    assert last.messages[0]["content"][0]["text"] == TASK
    assert last.messages[-1]["role"] == "user"
    seen = last.messages[-1]["content"][0]["text"]
    assert seen.startswith("<inbox_message>\nMessage from user alice (agent ")
    assert seen.endswith("Also check the tests folder.\n</inbox_message>")
    child_first = next(r for r in model.requests if r.messages[0]["content"][0]["text"] == TASK)
    assert [t.name for t in last.tools] == [t.name for t in child_first.tools]  # the run's own tools

    reports = delegate_reports(target)
    assert [r["text"].split("\n")[0] for r in reports] == ["first summary", "second summary"]
    assert "inbox_ids" not in reports[0]
    assert reports[1]["inbox_ids"] == [queued["id"]]
    assert [r.text.split("\n")[0] for _, _, r in bench.reports] == ["first summary", "second summary"]
    runs = bench.tool_env.services["delegates"]
    assert asyncio.run(runs.undelivered(run_id, target.session)) == []
    model.assert_complete()


def test_a_message_to_a_run_that_has_ended_continues_it_at_once(bench):
    model = routed(PARENT_SCRIPT, [Reply(text="first summary"), Reply(text="after the message")])

    async def go():
        target, run_id = await start(bench, model)
        runs = bench.tool_env.services["delegates"]
        await drain(bench)
        assert not runs.is_working(run_id)
        assert len(delegate_reports(target)) == 1
        await runs.send(run_id, "One more thing: cite your sources.", target.session)
        assert runs.is_working(run_id)
        await drain(bench)
        return target, run_id

    target, run_id = asyncio.run(go())
    rows = child_rows(target, run_id)
    assert [r["role"] for r in rows] == ["user", "assistant", "event", "assistant"]
    assert rows[2]["content"][0]["message"] == "One more thing: cite your sources."
    assert rows[3]["content"][0]["text"] == "after the message"
    assert [r["text"].split("\n")[0] for r in delegate_reports(target)] == [
        "first summary",
        "after the message",
    ]
    session, conversation_id, _ = bench.reports[1]
    assert (session.user_id, conversation_id) == ("alice", target.conversation.id)
    model.assert_complete()


def test_immediate_and_unknown_deliveries_are_refused_and_nothing_is_queued(bench):
    model = routed(PARENT_SCRIPT, [Reply(text="done")])

    async def go():
        target, run_id = await start(bench, model)
        runs = bench.tool_env.services["delegates"]
        await drain(bench)
        errors = []
        for delivery in ("immediate", "eventually"):
            with pytest.raises((InboxDeliveryUnsupported, InboxDeliveryInvalid)) as refused:
                await runs.send(run_id, "now please", target.session, delivery=delivery)
            errors.append(refused.value)
        return target, run_id, errors

    target, run_id, (immediate, unknown) = asyncio.run(go())
    assert immediate.code == "inbox_delivery_unsupported"
    assert "settle" in str(immediate)
    assert unknown.code == "inbox_delivery_invalid"
    assert "'eventually'" in str(unknown)
    assert not (target.conversation.path / "delegates" / run_id / INBOX_FILE).exists()
    assert len(delegate_reports(target)) == 1  # no continuation started


def test_only_who_may_write_the_parent_conversation_may_send(bench):
    model = routed(PARENT_SCRIPT, [Reply(text="done"), Reply(text="the admin's answer")])

    async def go():
        target, run_id = await start(bench, model)
        runs = bench.tool_env.services["delegates"]
        await drain(bench)
        bob = bench.session("bob", "lab")
        with pytest.raises(InboxForbidden) as forbidden:
            await runs.send(run_id, "from bob", bob)
        with pytest.raises(InboxForbidden):
            await runs.undelivered(run_id, bob)
        with pytest.raises(NotFound):  # another project sees no run at all
            await runs.send(run_id, "from elsewhere", bench.session("alice", "other"))
        with pytest.raises(InboxToSelf) as to_self:  # the run's own session
            await runs.send(run_id, "note to self", target.session.replace(delegate_run_id=run_id))
        assert not runs.is_working(run_id)
        # An admin may open any member's conversation, so an admin may message its runs.
        await runs.send(run_id, "from the admin", bench.session("dave", "lab"))
        await drain(bench)
        return target, run_id, forbidden.value, to_self.value

    target, run_id, forbidden, to_self = asyncio.run(go())
    assert forbidden.code == "inbox_forbidden"
    assert to_self.code == "inbox_to_self"
    rows = child_rows(target, run_id)
    assert [b["message"] for r in rows if r["role"] == "event" for b in r["content"]] == ["from the admin"]
    assert rows[-2]["user_id"] == "dave"
    assert bench.reports[-1][0].user_id == "dave"  # the parent continues as the sender, not the owner
    model.assert_complete()


def test_a_full_inbox_refuses_one_more(bench):
    bench.settings.config.DelegateSettings.inbox_limit = 2
    gate = Gate()
    model = routed(
        PARENT_SCRIPT,
        [Reply(calls=(Call(name="lookup", id="c1"),)), Reply(text="first"), Reply(text="both read")],
    )

    async def go():
        target, run_id = await start(bench, model, gate)  # the handlers, and the limit, are built here
        runs = bench.tool_env.services["delegates"]
        await asyncio.wait_for(gate.entered.wait(), timeout=10)
        ids = [(await runs.send(run_id, f"note {n}", target.session))["id"] for n in (1, 2)]
        with pytest.raises(InboxFull) as full:
            await runs.send(run_id, "note 3", target.session)
        listed = [m["id"] for m in await runs.undelivered(run_id, target.session)]
        gate.release.set()
        await drain(bench)
        return target, run_id, ids, listed, full.value

    target, run_id, ids, listed, full = asyncio.run(go())
    assert full.code == "inbox_full"
    assert "inbox_limit" in str(full)
    assert listed == ids
    # One sender's messages arrive together, in one continuation turn.
    events = [r for r in child_rows(target, run_id) if r["role"] == "event"]
    assert [[b["message"] for b in r["content"]] for r in events] == [["note 1", "note 2"]]
    assert delegate_reports(target)[-1]["inbox_ids"] == ids
    model.assert_complete()
