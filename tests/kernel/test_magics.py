"""The line magics in a real kernel: each switch takes effect, and a refused one changes nothing.

A refused ``%agent``, ``%model`` or ``%conversation`` must leave the kernel talking where it did: the
next chat cell still answers. ``%inbox`` messages a background sub-agent run as the kernel's own user.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import Tool, ToolOutput
from neuralis_jupyter.runtime.inbox import read_undelivered
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store
from neuralis_jupyter.store.projects import DEFAULT_PROJECT_ID
from neuralis_jupyter.workbench import Workbench

from .harness import TIMEOUT, Execution, KernelHarness

pytestmark = pytest.mark.slow


def shown(kernel: KernelHarness, code: str) -> str:
    """What a magic returned (its execute_result, without the repr quotes)."""
    (result,) = kernel.run(code).of_type("execute_result")
    return result["content"]["data"]["text/plain"].strip("'\"")


def refused(kernel: KernelHarness, code: str) -> Execution:
    execution = kernel.finish(kernel.start(code))
    assert execution.status == "error", f"{code!r} was accepted"
    return execution


def still_chats(kernel: KernelHarness) -> None:
    kernel.script({"text": "Still here."})
    assert "Still here." in kernel.run("Are you there?").markdown()


def test_agent_switches_to_a_created_agent_and_back(kernel: KernelHarness) -> None:
    default = shown(kernel, "%agent").removeprefix("agent: ")  # provisions the project's default agent
    store = Store.open(kernel.home)
    research = store.agents.create(store.projects.session_for("alice", DEFAULT_PROJECT_ID), name="Research")

    assert shown(kernel, f"%agent {research.id}") == f"agent: {research.id}"
    kernel.script({"text": "Research speaking."})
    assert "Research speaking." in kernel.run("Who is this?").markdown()
    conversation = kernel.conversation()
    assert shown(kernel, "%conversation") == f"conversation: {conversation} (agent {research.id})"
    assert list(
        kernel.home.glob(f"projects/*/agents/{research.id}/conversations/{conversation}/messages.jsonl")
    )

    assert shown(kernel, f"%agent {default}") == f"agent: {default}"
    assert kernel.conversation() != conversation, "another agent, another conversation"
    assert shown(kernel, "%conversation").endswith(f"(agent {default})")


def test_an_unknown_agent_leaves_the_kernel_where_it_was(kernel: KernelHarness) -> None:
    agent = shown(kernel, "%agent")
    conversation = kernel.conversation()

    error = refused(kernel, "%agent nosuch")

    assert "nosuch" in error.reply["content"]["evalue"]
    assert shown(kernel, "%agent") == agent
    assert kernel.conversation() == conversation
    still_chats(kernel)


def test_model_refuses_a_bad_reference_and_takes_a_good_one(kernel: KernelHarness) -> None:
    before = shown(kernel, "%model")
    try:
        for bad, says in (
            ("gpt4", "PROVIDER:MODEL"),
            ("anthropic:no-such-model", "known anthropic models"),
            ("nosuch:model", "the providers are"),
        ):
            error = refused(kernel, f"%model {bad}")
            assert says in error.reply["content"]["evalue"]
            assert shown(kernel, "%model") == before, f"%model {bad} changed the model"

        assert shown(kernel, "%model anthropic:claude-sonnet-4-6") == "model: anthropic:claude-sonnet-4-6"
        assert shown(kernel, "%model") == "model: anthropic:claude-sonnet-4-6"
    finally:
        kernel.run(f"%model {before.removeprefix('model: ')}")
    still_chats(kernel)


def test_conversation_new_fork_resume_and_a_bad_id(kernel: KernelHarness) -> None:
    kernel.run("%conversation new")
    first = kernel.conversation()
    kernel.script({"text": "First answer."}, {"text": "Answer after resuming."})
    kernel.run("Remember the number 7.")

    kernel.run("%conversation new")
    fresh = kernel.conversation()
    assert fresh != first

    kernel.run(f"%conversation {first}")
    assert kernel.conversation() == first
    kernel.run("%conversation fork")
    fork = kernel.conversation()
    assert fork not in (first, fresh)
    texts = kernel.run("%%python\nt = %transcript\nprint(list(t.text))").text()
    assert "Remember the number 7." in texts, "a fork starts with its source's messages"
    assert "First answer." in texts

    error = refused(kernel, "%conversation c-0000000000000000")
    assert "c-0000000000000000" in error.reply["content"]["evalue"]
    assert kernel.conversation() == fork

    kernel.run(f"%conversation {first}")
    kernel.run("What was the number?")
    rows = kernel.transcript(first)
    assert [r["role"] for r in rows] == ["user", "assistant", "user", "assistant"]
    assert rows[-1]["content"][0]["text"] == "Answer after resuming."


def test_transcript_and_usage_return_rows_of_this_conversation(kernel: KernelHarness) -> None:
    kernel.run("%conversation new")
    kernel.script({"text": "Counted."})
    kernel.run("Count me in.")
    conversation = kernel.conversation()

    out = kernel.run(
        "%%python\n"
        "t = %transcript\n"
        "u = %usage\n"
        "print(list(t.role), list(t.text))\n"
        "print(len(u), sorted(set(u.conversation_id)), int(u.output_tokens.sum()) > 0)"
    ).text()

    transcript, usage = out.strip().splitlines()
    assert transcript == "['user', 'assistant'] ['Count me in.', 'Counted.']"
    assert usage == f"1 [{conversation!r}] True"


# -- %inbox ---------------------------------------------------------------------------------------------


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def eventually(check: Callable[[], Any], what: str) -> Any:
    """Poll ``check`` until it answers something true; the bound only turns a hang into a failure."""
    deadline = time.monotonic() + TIMEOUT
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen in {TIMEOUT} s")
        time.sleep(0.1)
    return found


def conversation_dir(kernel: KernelHarness, conversation: str) -> Path:
    (path,) = kernel.home.glob(f"projects/*/agents/*/conversations/{conversation}")
    return path


def test_inbox_sends_as_the_kernels_user_and_the_run_answers(kernel: KernelHarness) -> None:
    kernel.run("%conversation new")
    kernel.run("%guard auto")
    start = {"name": "delegate", "input": {"task": "Count the files.", "background": True}}
    # The parent's turns and the run's interleave: every answer after the first is the same text.
    kernel.script({"text": "", "calls": [start]}, *[{"text": "Noted."}] * 8)
    kernel.run("Count them in the background.")
    parent = conversation_dir(kernel, kernel.conversation())
    (run,) = eventually(lambda: list((parent / "delegates").glob("d-*")), "the run's start")
    eventually(
        lambda: any(
            b["type"] == "delegate_report" for r in rows(parent / "messages.jsonl") for b in r["content"]
        ),
        "the run's first report",
    )
    # A cell that rewrites who the environment says the user is changes nothing: the kernel's
    # identity was fixed when it started, and the line names no sender.
    kernel.run("%%python\nimport os\nos.environ['NEURALIS_USER'] = 'mallory'")
    try:
        queued = shown(kernel, f"%inbox {run.name} Did you count the hidden ones?")
    finally:
        kernel.run("%%python\nos.environ['NEURALIS_USER'] = 'alice'")

    assert queued.startswith("queued msg_")

    def answered() -> list[dict[str, Any]]:
        run_rows = rows(run / "messages.jsonl")
        events = any(r["role"] == "event" for r in run_rows)
        return run_rows if events and run_rows[-1]["role"] == "assistant" else []

    run_rows = eventually(answered, "the run's answer to the message")
    (block,) = next(r for r in run_rows if r["role"] == "event")["content"]
    assert block["type"] == "inbox_message"
    assert block["message"] == "Did you count the hidden ones?"  # sent, not taken for a help request
    assert block["from"]["userId"] == "alice"
    assert block["id"] == queued.split()[1]

    def report_turns() -> list[int]:
        parent_rows = rows(parent / "messages.jsonl")
        return [b["turn"] for r in parent_rows for b in r["content"] if b["type"] == "delegate_report"]

    eventually(lambda: report_turns() == [1, 2], "the run's second report")
    assert shown(kernel, "%inbox") == "no messages wait undelivered for this conversation's sub-agent runs"
    error = refused(kernel, "%inbox d-000000000000 hello")
    assert "d-000000000000" in error.reply["content"]["evalue"]


def test_inbox_lists_what_a_run_never_received_before_a_restart(kernel: KernelHarness) -> None:
    kernel.run("%conversation new")
    conversation = kernel.conversation()
    # Another process (a kernel since shut down) ran this conversation: its run was working, a message
    # waited for it, and then the process ended.
    bench = Workbench(NeuralisSettings(data_root=str(kernel.home)), store=Store.open(kernel.home))
    target = bench.target("alice", conversation_id=conversation)
    entered = asyncio.Event()

    async def hold(args: dict[str, Any], ctx: Any) -> ToolOutput:
        entered.set()
        await asyncio.Event().wait()
        return ToolOutput(content="never")

    held = Tool(
        name="hold", description="hold", input_schema={"type": "object"}, handler=hold, access="read",
        package_id=AGENT_CORE_ID,
    )  # fmt: skip
    start = Call(name="delegate", input={"task": "Hold.", "background": True})
    script = {
        "Start it.": [Reply(calls=(start,)), Reply(text="ok")],
        "Hold.": [Reply(calls=(Call(name="hold"),))],
    }
    model = ScriptedModel([lambda r: script[r.messages[0]["content"][0]["text"]].pop(0)] * 3)

    async def previous_process() -> tuple[str, str]:
        async with bench.turn(target, "Start it.", model=model) as request:
            await bench.runtime.run(replace(request, tools=request.tools.merge([held])))
        await asyncio.wait_for(entered.wait(), TIMEOUT)
        runs = bench.tool_env.services["delegates"]
        (run_id,) = runs.tasks
        queued = await runs.send(run_id, "Are you still there?", target.session)
        await bench.aclose()
        return run_id, queued["id"]

    run_id, message_id = asyncio.run(previous_process())

    listed = shown(kernel, "%inbox")
    assert run_id in listed
    assert message_id in listed
    assert "from alice" in listed
    assert "Are you still there?" in listed
    error = refused(kernel, f"%inbox {run_id} And now?")
    assert "is not held by this process" in error.reply["content"]["evalue"]
    assert "Delegate the task again" in error.reply["content"]["evalue"]


def started_run(kernel: KernelHarness) -> tuple[Path, Path]:
    """A new conversation (the parent's directory) with a background run that has reported once."""
    kernel.run("%conversation new")
    kernel.run("%guard auto")
    start = {"name": "delegate", "input": {"task": "Count the files.", "background": True}}
    kernel.script({"text": "", "calls": [start]}, *[{"text": "Noted."}] * 8)
    kernel.run("Count them in the background.")
    parent = conversation_dir(kernel, kernel.conversation())
    (run,) = eventually(lambda: list((parent / "delegates").glob("d-*")), "the run's start")
    eventually(lambda: report_turns(parent) == [1], "the run's first report")
    return parent, run


def report_turns(parent: Path) -> list[int]:
    parent_rows = rows(parent / "messages.jsonl")
    return [b["turn"] for r in parent_rows for b in r["content"] if b["type"] == "delegate_report"]


def test_inbox_in_a_subshell_answers_while_a_python_cell_blocks_the_main_shell(kernel: KernelHarness) -> None:
    parent, run = started_run(kernel)
    entered, go_on = kernel.home / "blocking-entered", kernel.home / "blocking-go-on"
    blocking = kernel.start(
        f"%%python\nimport pathlib, time\npathlib.Path({str(entered)!r}).touch()\n"
        f"while not pathlib.Path({str(go_on)!r}).exists():\n    time.sleep(0.05)"
    )
    eventually(entered.exists, "the main shell's blocking cell")
    subshell = kernel.create_subshell()
    try:
        # The main shell's loop is blocked: the message is accepted and written on the subshell's thread.
        sent = kernel.finish(kernel.start(f"%inbox {run.name} Anything new?", subshell_id=subshell))
        waiting = read_undelivered(run)
    finally:
        go_on.touch()
    assert sent.status == "ok", sent.reply
    (result,) = sent.of_type("execute_result")
    queued = result["content"]["data"]["text/plain"].strip("'\"")
    assert [m["id"] for m in waiting] == [queued.split()[1]]
    assert kernel.finish(blocking).status == "ok"
    # Once the main shell is free, the run takes the message on its own loop and reports again.
    eventually(lambda: report_turns(parent) == [1, 2], "the run's second report")
    assert read_undelivered(run) == []


def test_an_agents_python_call_cannot_send_to_an_inbox(kernel: KernelHarness) -> None:
    kernel.run("%conversation new")
    kernel.run("%guard auto")
    outcome = kernel.home / "agent-inbox-outcome"
    code = (
        "try:\n"
        "    said = get_ipython().run_line_magic('inbox', 'd-000000000000 message yourself')\n"
        "except Exception as exc:\n"
        '    said = f\'{type(exc).__name__} {getattr(exc, "code", "")}: {exc}\'\n'
        f"open({str(outcome)!r}, 'w').write(said)"
    )
    kernel.script({"text": "", "calls": [{"name": "python", "input": {"code": code}}]}, {"text": "Tried."})
    kernel.run("Message your sub-agent from code.")

    said = outcome.read_text(encoding="utf-8")
    assert said.startswith("InboxHopsExceeded inbox_hops_exceeded: ")
    assert "an agent's code cannot message sub-agents; only the user can" in said
    # The user still can, once the call has ended (here: the run is unknown, and says so).
    error = refused(kernel, "%inbox d-000000000000 hello")
    assert error.reply["content"]["ename"] != "InboxHopsExceeded"


def test_an_inbox_line_inside_a_string_of_a_python_cell_stays_text(kernel: KernelHarness) -> None:
    out = kernel.run(
        '%%python\nnote = """\n%inbox d-000000000000 not a call?\n"""\nprint(note.strip())'
    ).text()
    assert out.strip() == "%inbox d-000000000000 not a call?"
