"""``%stop`` with more than one turn running in the kernel, and a switch of conversation during a turn.

ipykernel 7 runs a subshell's cells on the subshell's own thread, concurrently with the main shell: a chat
cell sent to a subshell is a second turn, running while the main shell's turn is busy. Here the main
turn's ``python`` call sleeps on the main thread (blocking its event loop) while a subshell's turn
streams a long answer, and ``%stop`` from a second subshell must end both. A ``%conversation new`` during
a turn points the next turns elsewhere, and leaves the running turn (and a stop of it) where it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from neuralis_jupyter.store import Store
from neuralis_jupyter.store.projects import DEFAULT_PROJECT_ID

from .harness import WIDGET_VIEW, Execution, KernelHarness, Message

pytestmark = pytest.mark.slow

SLOW = {"text": "word " * 400, "chunk": 5, "delay": 0.025}  # 10 s if nothing stops it
NEVER = {"text": "This answer must never be given."}
#: Earlier than any stop request a test here writes (each test works in conversations of its own).
EVER = datetime(2000, 1, 1, tzinfo=UTC)


def _sleeping_call(marker: Path) -> dict[str, Any]:
    """A model step calling ``python`` with code that writes ``marker``, then sleeps 30 s."""
    code = f"open({str(marker)!r}, 'w').close()\nimport time\ntime.sleep(30)\nslept_through = True"
    return {"text": "", "calls": [{"name": "python", "input": {"code": code}}]}


def _wait_until(condition: Callable[[], bool], message: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(message)
        time.sleep(0.05)


def _growing(m: Message) -> bool:
    return m["msg_type"] == "update_display_data" and len(m["content"]["data"]["text/markdown"]) >= 10


def _on(kernel: KernelHarness, code: str, subshell: str) -> Execution:
    """Run a cell on ``subshell`` (the main shell is busy with a turn) and wait for it."""
    execution = kernel.finish(kernel.start(code, subshell_id=subshell))
    assert execution.status == "ok", execution.reply
    return execution


def _new_conversation(kernel: KernelHarness, subshell: str) -> str:
    result = _on(kernel, "%conversation new", subshell).of_type("execute_result")[0]
    return str(result["content"]["data"]["text/plain"].strip("'\"").split()[1])


def _start_sleeping_turn(
    kernel: KernelHarness, marker: Path, *script: dict[str, Any]
) -> tuple[str, Execution]:
    """A main-shell turn in a new conversation whose python call is running; ``script`` answers what
    follows its first step."""
    kernel.run("%guard auto")
    kernel.run("%conversation new")
    conversation = kernel.conversation()
    kernel.script(_sleeping_call(marker), *script)
    execution = kernel.start("Sleep on it.")
    _wait_until(marker.exists, f"the python call never started ({marker} was not written)")
    return conversation, execution


def _assert_python_interrupted(run: Execution, reason: str) -> None:
    assert run.status == "ok", run.reply
    tool = next(b for b in run.final() if "🔧 python" in b["text/markdown"])
    assert "⏹ interrupted" in tool["text/markdown"]
    assert "KeyboardInterrupt" in tool["text/plain"]
    footer = run.final()[-1]
    assert "stopped" in footer["text/plain"]
    assert reason in footer["text/plain"]
    assert NEVER["text"] not in run.markdown(), "the turn ended with the call"
    assert all(WIDGET_VIEW not in b for b in run.final())


def _assistant_rows(kernel: KernelHarness, conversation: str) -> list[dict[str, Any]]:
    return [r for r in kernel.transcript(conversation) if r["role"] == "assistant"]


def test_percent_stop_ends_every_running_turn_of_the_kernel(kernel: KernelHarness) -> None:
    turn_shell, stop_shell = kernel.create_subshell(), kernel.create_subshell()
    # One script for both turns: the main turn takes the python call, the subshell's turn the long answer.
    main_conversation, main = _start_sleeping_turn(kernel, kernel.home / "both.started", SLOW, NEVER)
    side_conversation = _new_conversation(kernel, turn_shell)
    side = kernel.start("Write at length.", subshell_id=turn_shell)
    kernel.wait_for(side, _growing)

    stop = _on(kernel, "%stop enough of both", stop_shell)
    side_run = kernel.finish(side)
    main_run = kernel.finish(main)

    assert "stopping 2 running turns" in stop.text()
    _assert_python_interrupted(main_run, "enough of both")
    assert side_run.status == "ok", side_run.reply
    footer = side_run.final()[-1]
    assert "stopped" in footer["text/plain"]
    assert "enough of both" in footer["text/plain"]
    partial = _assistant_rows(kernel, side_conversation)[-1]
    assert partial.get("stopped") is True
    assert 0 < len(partial["content"][0]["text"]) < len(SLOW["text"]), "the partial answer is kept"
    # Each turn's own conversation was asked to stop (a turn of it elsewhere stops too).
    stops = Store.open(kernel.home).stops
    for conversation in (main_conversation, side_conversation):
        assert stops.requested(project_id=DEFAULT_PROJECT_ID, conversation_id=conversation, since=EVER)
    # The kernel is usable, and the sleeping code did not run to its end.
    assert kernel.run("%%python\nprint('slept_through' in globals())").text().strip() == "False"


def test_a_new_conversation_during_a_turn_leaves_the_stop_with_the_running_turn(
    kernel: KernelHarness,
) -> None:
    subshell = kernel.create_subshell()
    running, execution = _start_sleeping_turn(kernel, kernel.home / "switch.started", NEVER)

    switched = _new_conversation(kernel, subshell)
    stop = _on(kernel, "%stop changed my mind", subshell)
    run = kernel.finish(execution)

    assert switched != running
    assert "stopping the running turn" in stop.text()
    _assert_python_interrupted(run, "changed my mind")
    assert _assistant_rows(kernel, running), "the turn answered in the conversation it started in"
    stops = Store.open(kernel.home).stops
    assert stops.requested(project_id=DEFAULT_PROJECT_ID, conversation_id=running, since=EVER), (
        "the stop request names the running turn's conversation, not the one the notebook switched to"
    )
    # The switch holds for the next turn.
    assert kernel.conversation() == switched


def test_a_turn_that_ends_leaves_the_others_stoppable(kernel: KernelHarness) -> None:
    turn_shell, stop_shell = kernel.create_subshell(), kernel.create_subshell()
    _, main = _start_sleeping_turn(kernel, kernel.home / "outlived.started", {"text": "Short."}, NEVER)
    _new_conversation(kernel, turn_shell)
    side = _on(kernel, "Answer briefly.", turn_shell)

    stop = _on(kernel, "%stop still sleeping", stop_shell)
    main_run = kernel.finish(main)
    after = _on(kernel, "%stop", stop_shell)

    assert "Short." in side.markdown()
    assert "stopping the running turn" in stop.text()
    _assert_python_interrupted(main_run, "still sleeping")
    assert "no turn is running here" in after.text(), "each turn took itself off the list as it ended"
