"""``wait``: through real turns, it returns a background shell's or sub-agent's report when the job ends,
says so when the time runs out, answers an id that is not the caller's like one that does not exist,
ends with the turn's stop, and is intrinsic (no reads/writes scope needed) yet refusable by forbidden."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.contracts.envelope import Envelope, Scope
from neuralis_jupyter.policy import LiveGuard
from neuralis_jupyter.providers.base import ModelRequest
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import StopSignal, Tool, ToolOutput, TurnRequest
from neuralis_jupyter.runtime.events import RuntimeEvent, ToolCallFinished, ToolCallStarted
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store
from neuralis_jupyter.tools import wait
from neuralis_jupyter.tools.shells import BackgroundShells
from neuralis_jupyter.workbench import Workbench

from .exec_support import AllowAll, ExecRig, exec_data_root, exec_session, needs_bwrap


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ExecRig]:
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root)
        rig.packages.bind_handlers(AGENT_CORE_ID, wait.handlers(rig.env))
        yield rig


def background(command: str) -> Reply:
    return Reply(calls=(Call(name="execute", input={"command": command, "background": True}, id="b1"),))


def wait_for_the_shell(**extra: Any) -> Any:
    """A scripted step that waits for the shell id the previous step's result handed back."""

    def reply(request: ModelRequest) -> Reply:
        [result] = [b for b in request.messages[-1]["content"] if b["type"] == "tool_result"]
        shell_id = json.loads(result["content"])["shellId"]
        return Reply(calls=(Call(name="wait", input={"for": shell_id, **extra}, id="w1"),))

    return reply


def waiting(**args: Any) -> Reply:
    return Reply(calls=(Call(name="wait", input=args, id="w1"),))


async def closing(rig: ExecRig, coro: Any) -> Any:
    try:
        return await coro
    finally:
        shells = rig.env.services.get("shells")
        if isinstance(shells, BackgroundShells):
            await shells.aclose()


@needs_bwrap
def test_waiting_for_a_shell_returns_its_report(rig: ExecRig) -> None:
    model = ScriptedModel(
        [background("echo hi; sleep 0.3; echo bye"), wait_for_the_shell(), Reply(text="ok")]
    )
    settled = asyncio.run(closing(rig, rig.turn(model)))
    assert settled.status == "completed"
    shell_id = json.loads(rig.result("b1")["content"])["shellId"]
    block = rig.result("w1")
    assert (block["outcome"], block["is_error"]) == ("ok", False)
    assert block["content"].startswith(f"{shell_id} has ended. Its report:\n")
    assert f"Background shell {shell_id} exited with code 0" in block["content"]
    assert "hi\nbye" in block["content"]
    # The model read the report in the same turn, as the wait's result.
    assert "exited with code 0" in json.dumps(model.requests[-1].messages[-1])
    model.assert_complete()


@needs_bwrap
def test_without_for_it_waits_for_the_first_running_job(rig: ExecRig) -> None:
    model = ScriptedModel([background("sleep 0.3; echo late"), waiting(), Reply(text="ok")])
    asyncio.run(closing(rig, rig.turn(model)))
    shell_id = json.loads(rig.result("b1")["content"])["shellId"]
    content = rig.result("w1")["content"]
    assert content.startswith(f"{shell_id} has ended.")
    assert "late" in content


@needs_bwrap
def test_a_job_that_ended_before_the_wait_answers_at_once(rig: ExecRig) -> None:
    first = ScriptedModel([background("echo early"), Reply(text="started")])

    async def go() -> None:
        await rig.turn(first)
        shell_id = json.loads(rig.result("b1")["content"])["shellId"]
        shells = rig.env.services["shells"]
        assert isinstance(shells, BackgroundShells)
        await asyncio.gather(*shells.pending())  # the shell ended and wrote its report row
        await rig.turn(ScriptedModel([waiting(**{"for": shell_id}), Reply(text="ok")]))

    asyncio.run(closing(rig, go()))
    content = rig.result("w1")["content"]
    assert "has ended" in content
    assert "early" in content


@needs_bwrap
def test_the_timeout_says_the_job_is_still_running(rig: ExecRig) -> None:
    model = ScriptedModel([background("sleep 30"), wait_for_the_shell(seconds=0.3), Reply(text="ok")])
    finished: list[ToolCallFinished] = []

    def on_event(event: RuntimeEvent) -> None:
        if isinstance(event, ToolCallFinished) and event.name == "wait":
            finished.append(event)

    asyncio.run(closing(rig, rig.turn(model, on_event=on_event)))
    shell_id = json.loads(rig.result("b1")["content"])["shellId"]
    block = rig.result("w1")
    assert (block["outcome"], block["is_error"]) == ("ok", False)
    assert block["content"].startswith(f"Still running after 0.3 s: {shell_id}.")
    assert finished[0].data == {"jobs": {shell_id: "running"}}


@needs_bwrap
def test_a_stop_ends_the_wait(rig: ExecRig) -> None:
    model = ScriptedModel([background("sleep 30"), wait_for_the_shell(seconds=300)])
    stop = StopSignal()

    def on_event(event: RuntimeEvent) -> None:
        if isinstance(event, ToolCallStarted) and event.name == "wait":
            # Later than the call's start, so that the stop finds the wait under way.
            asyncio.get_running_loop().call_later(0.5, stop.set, "user pressed stop")

    # The bound only turns a wait that ignores the stop into a failure instead of a five-minute hang.
    run = asyncio.wait_for(rig.turn(model, stop=stop, on_event=on_event), timeout=30)
    settled = asyncio.run(closing(rig, run))
    assert settled.status == "stopped"
    assert rig.result("w1")["outcome"] == "stopped"


@needs_bwrap
def test_another_users_running_shell_is_not_known(rig: ExecRig) -> None:
    async def go() -> None:
        await rig.turn(ScriptedModel([background("sleep 30"), Reply(text="started")]))
        shell_id = json.loads(rig.result("b1")["content"])["shellId"]
        # bob, in the same conversation, asks for alice's shell while it runs.
        model = ScriptedModel([waiting(**{"for": shell_id}), Reply(text="ok")])
        await rig.turn(model, session=exec_session(user_id="bob"))

    asyncio.run(closing(rig, go()))
    shell_id = json.loads(rig.result("b1")["content"])["shellId"]
    block = rig.result("w1")
    assert (block["outcome"], block["is_error"]) == ("error", True)
    assert f"No background job {shell_id!r} of yours" in block["content"]


def test_nothing_running_answers_at_once(rig: ExecRig) -> None:
    asyncio.run(rig.turn(ScriptedModel([waiting(seconds=300), Reply(text="ok")])))
    block = rig.result("w1")
    assert block["outcome"] == "ok"
    assert block["content"].startswith("Nothing of yours is running in the background")


def test_an_unknown_id_is_an_error(rig: ExecRig) -> None:
    asyncio.run(rig.turn(ScriptedModel([waiting(**{"for": "nrs-sh-nope"}), Reply(text="ok")])))
    block = rig.result("w1")
    assert (block["outcome"], block["is_error"]) == ("error", True)
    assert "No background job 'nrs-sh-nope' of yours is known" in block["content"]


def test_seconds_past_the_maximum_is_invalid_input(rig: ExecRig) -> None:
    asyncio.run(rig.turn(ScriptedModel([waiting(seconds=301), Reply(text="ok")])))
    assert rig.result("w1")["outcome"] == "invalid"


@pytest.mark.parametrize(
    ("scope", "outcome"),
    [
        (Scope.of(reads=(), writes=()), "ok"),  # intrinsic: no reads scope needed
        (Scope.of(reads="all", writes=(), forbidden={"wait"}), "refused"),  # forbidden still refuses it
    ],
)
def test_wait_is_intrinsic_but_forbidden_refuses_it(rig: ExecRig, scope: Scope, outcome: str) -> None:
    session = rig.open_session()
    tools = rig.packages.tool_registry(session)
    assert tools.get("wait").intrinsic
    request = TurnRequest(
        session=session,
        conversation=rig.conv,
        model=ScriptedModel([waiting(), Reply(text="ok")]),
        tools=tools,
        message="go",
        envelope=Envelope(scope=scope),
        permission=AllowAll(),
    )
    asyncio.run(rig.runtime.run(request))
    assert rig.result("w1")["outcome"] == outcome


def test_seconds_that_is_not_a_finite_positive_number_is_refused(rig: ExecRig) -> None:
    # JSON parsers (OpenAI's json.loads among them) accept NaN, and no comparison with NaN is true:
    # the schema's bounds let it through, and a deadline of NaN would never pass.
    asyncio.run(rig.turn(ScriptedModel([waiting(seconds=math.nan), Reply(text="ok")])))
    block = rig.result("w1")
    assert (block["outcome"], block["is_error"]) == ("invalid", True)
    assert "seconds must be a finite number above 0" in block["content"]


# -- background sub-agents, through the workbench's own tool set -------------------------------------


def gate_tool(gate: asyncio.Event) -> Tool:
    async def hold(args: dict[str, Any], ctx: Any) -> ToolOutput:
        await gate.wait()  # the child stays running until the parent is waiting for it
        return ToolOutput(content="held")

    return Tool(
        name="hold", description="hold", input_schema={"type": "object"}, handler=hold, access="read",
        package_id=AGENT_CORE_ID,
    )  # fmt: skip


def run_id_in(request: ModelRequest) -> str:
    """The run id the last delegate call of the conversation handed back."""
    texts = [b["content"] for m in request.messages for b in m["content"] if b.get("type") == "tool_result"]
    return re.findall(r"as run (d-[0-9a-f]+)", "\n".join(texts))[-1]


def wait_for_the_run(request: ModelRequest) -> Reply:
    return Reply(calls=(Call(name="wait", input={"for": run_id_in(request)}, id="w1"),))


class Routed:
    """One model for a parent and its children, each answered from its own script (by the first user
    message of the conversation asking), so the order their turns interleave in changes nothing."""

    def __init__(self, parent: list[Any], children: dict[str, list[Any]]) -> None:
        self.queues = {"PARENT": deque(parent), **{t: deque(r) for t, r in children.items()}}
        self.model = ScriptedModel([self.answer] * sum(len(q) for q in self.queues.values()))

    def answer(self, request: ModelRequest) -> Reply:
        first = request.messages[0]["content"][0].get("text", "")
        entry = self.queues[first if first in self.queues else "PARENT"].popleft()
        return entry(request) if callable(entry) else entry


def delegating(task: str) -> Reply:
    return Reply(calls=(Call(name="delegate", id=f"d-{task}", input={"task": task, "background": True}),))


def on_wait(gate: asyncio.Event) -> Callable[[RuntimeEvent], None]:
    def on_event(event: RuntimeEvent) -> None:
        if isinstance(event, ToolCallStarted) and event.name == "wait":
            gate.set()

    return on_event


async def bench_turn(bench: Workbench, target: Any, model: ScriptedModel, **kw: Any) -> Any:
    tools, on_event = kw.get("tools", []), kw.get("on_event")
    async with bench.turn(target, "start it", model=model) as request:
        request = replace(request, tools=request.tools.merge(tools))
        return await asyncio.wait_for(bench.runtime.run(request, on_event=on_event), timeout=30)


def run_ids(target: Any) -> list[str]:
    return [p.name for p in (target.conversation.path / "delegates").iterdir()]


def tool_results(target: Any) -> dict[str, dict[str, Any]]:
    rows = target.conversation.read_all()
    return {b["tool_use_id"]: b for r in rows if r["role"] == "tool" for b in r["content"]}


def test_waiting_for_a_background_sub_agent_returns_its_report_and_no_turn_repeats_it(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    bench = Workbench(NeuralisSettings(data_root=str(home)), store=Store.open(home))
    gate = asyncio.Event()
    routed = Routed(
        [delegating("CHILD"), wait_for_the_run, Reply(text="parent done")],
        {"CHILD": [Reply(calls=(Call(name="hold", id="h1"),)), Reply(text="child summary")]},
    )
    target = bench.target("alice")

    async def go() -> Any:
        try:
            return await bench_turn(
                bench, target, routed.model, tools=[gate_tool(gate)], on_event=on_wait(gate)
            )
        finally:
            await bench.drain_background(10)
            await bench.aclose()

    settled = asyncio.run(go())
    assert settled.status == "completed"
    results = tool_results(target)
    run_id = re.search(r"as run (d-[0-9a-f]+)", results["d-CHILD"]["content"]).group(1)
    assert results["w1"]["content"].startswith(f"{run_id} has ended. Its report:\nchild summary")
    # The report's follow-up turn (the host's own continuation) found the report already read by the
    # wait, and did not ask the model again: three parent requests and two child ones, no more.
    assert len(routed.model.requests) == 5
    routed.model.assert_complete()
    assert [r["role"] for r in target.conversation.read_all()].count("user") == 1


def test_after_an_inbox_message_the_wait_is_for_the_new_turns_report(tmp_path: Path) -> None:
    home = tmp_path / "home"
    bench = Workbench(NeuralisSettings(data_root=str(home)), store=Store.open(home))
    bench.tool_env.services["continue"] = None  # no follow-up turns: this test is about wait alone
    gate = asyncio.Event()
    first = Routed(
        [delegating("CHILD"), Reply(text="started")],
        {
            "CHILD": [
                Reply(text="first summary"),
                Reply(calls=(Call(name="hold", id="h1"),)),
                Reply(text="second summary"),
            ]
        },
    )
    then = Routed([wait_for_the_run, Reply(text="read it")], {})
    target = bench.target("alice")

    async def go() -> Any:
        try:
            await bench_turn(bench, target, first.model, tools=[gate_tool(gate)])
            assert await bench.drain_background(10)
            runs = bench.tool_env.services["delegates"]
            (run_id,) = run_ids(target)
            await runs.send(run_id, "Look once more.", target.session)
            # The run works again, held until the wait below has begun: its first report is old news.
            return await bench_turn(bench, target, then.model, on_event=on_wait(gate))
        finally:
            await bench.aclose()

    assert asyncio.run(go()).status == "completed"
    content = tool_results(target)["w1"]["content"]
    assert "has ended. Its report:\nsecond summary" in content
    assert "first summary" not in content


def test_a_run_queued_for_a_free_slot_is_still_running(tmp_path: Path) -> None:
    home = tmp_path / "home"
    bench = Workbench(NeuralisSettings(data_root=str(home)), store=Store.open(home))
    bench.settings.config.DelegateSettings.max_background = 1
    bench.tool_env.services["continue"] = None
    gate = asyncio.Event()
    routed = Routed(
        [delegating("B"), Reply(text="B started"), delegating("A"), Reply(text="A started")],
        {
            "B": [Reply(text="B first"), Reply(text="B second")],
            "A": [Reply(calls=(Call(name="hold", id="h1"),)), Reply(text="A done")],
        },
    )
    target = bench.target("alice")

    async def go() -> Any:
        try:
            await bench_turn(bench, target, routed.model, tools=[gate_tool(gate)])
            (b_run,) = run_ids(target)
            assert await bench.drain_background(10)
            await bench_turn(bench, target, routed.model, tools=[gate_tool(gate)])  # A takes the one slot
            runs = bench.tool_env.services["delegates"]
            await runs.send(b_run, "Once more.", target.session)
            assert b_run in runs.working()
            assert b_run not in runs.tasks  # queued for a free slot: no task yet
            model = ScriptedModel([waiting(**{"for": b_run}), Reply(text="ok")])
            return await bench_turn(bench, target, model, on_event=on_wait(gate))
        finally:
            await bench.aclose()

    assert asyncio.run(go()).status == "completed"
    content = tool_results(target)["w1"]["content"]
    assert "has ended. Its report:\nB second" in content


@needs_bwrap
def test_a_shell_report_a_wait_returned_starts_no_second_turn(tmp_path: Path) -> None:
    with exec_data_root(tmp_path) as root:
        bench = Workbench(NeuralisSettings(data_root=str(root)), store=Store.open(root))
        model = ScriptedModel([background("sleep 0.3; echo done"), wait_for_the_shell(), Reply(text="ok")])
        target = bench.target("alice")

        async def go() -> Any:
            try:
                async with bench.turn(target, "go", model=model, guard=LiveGuard("auto")) as request:
                    settled = await bench.runtime.run(request)
                assert await bench.drain_background(10)  # the shell, and the follow-up it would start
                return settled
            finally:
                await bench.aclose()

        assert asyncio.run(go()).status == "completed"
        assert "exited with code 0" in tool_results(target)["w1"]["content"]
        model.assert_complete()  # no continuation turn asked the model again
        assert len(model.requests) == 3


def test_a_later_report_seen_does_not_count_an_earlier_one_as_seen() -> None:
    from neuralis_jupyter.tools.wait import SeenReports

    seen = SeenReports(limit=2)
    seen.mark("c-1", "d-run", 2)
    # Report 1 was written while the parent turn ran and no wait returned it: its follow-up is owed.
    assert not seen.seen("c-1", "d-run", 1)
    assert seen.seen("c-1", "d-run", 2)
    assert not seen.seen("c-2", "d-run", 2)
    seen.mark("c-1", "sh-1")
    seen.mark("c-1", "sh-2")  # past the bound: the oldest job is forgotten
    assert not seen.seen("c-1", "d-run", 2)
    assert seen.seen("c-1", "sh-1")
    assert seen.seen("c-1", "sh-2")
