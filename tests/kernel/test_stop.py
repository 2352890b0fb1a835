"""Ending a running turn cleanly: ``%stop`` on a kernel subshell, a stop flag in the store, an interrupt.

The first tests stream a long, slow scripted answer, stop it once the first words are on screen, and
check that the cell completes (no error, the kernel alive), the footer says "stopped", and the
transcript keeps the partial answer. The others stop the turn while the agent's ``python`` call sleeps
in the notebook's namespace, where the code blocks the kernel's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from neuralis_jupyter.store import Store
from neuralis_jupyter.store.projects import DEFAULT_PROJECT_ID

from .harness import WIDGET_VIEW, Execution, KernelHarness, Message

pytestmark = pytest.mark.slow

SLOW = {"text": "word " * 400, "chunk": 5, "delay": 0.025}  # 10 s if nothing stops it


def _growing(m: Message) -> bool:
    return m["msg_type"] == "update_display_data" and len(m["content"]["data"]["text/markdown"]) >= 10


def _start_slow_turn(kernel: KernelHarness) -> tuple[str, Execution]:
    kernel.run("%conversation new")
    conversation = kernel.conversation()
    kernel.script(SLOW)
    execution = kernel.start("Write at length.")
    kernel.wait_for(execution, _growing)
    return conversation, execution


def _assert_stopped(kernel: KernelHarness, run: Execution, conversation: str, reason: str) -> None:
    assert run.status == "ok", run.reply
    footer = run.final()[-1]
    assert "stopped" in footer["text/plain"]
    assert reason in footer["text/plain"]
    assert all(WIDGET_VIEW not in b for b in run.final())
    rows = kernel.transcript(conversation)
    assistant = [r for r in rows if r["role"] == "assistant"][-1]
    assert assistant.get("stopped") is True
    partial = assistant["content"][0]["text"]
    assert 0 < len(partial) < len(SLOW["text"]), "the partial answer is kept"
    assert SLOW["text"].startswith(partial)
    shown = run.final()[0]["text/markdown"]
    assert shown.strip() == partial.strip() or partial.startswith(shown.strip())


def test_percent_stop_on_a_subshell_ends_the_running_turn(kernel: KernelHarness) -> None:
    subshell = kernel.create_subshell()
    conversation, execution = _start_slow_turn(kernel)

    stop = kernel.finish(kernel.start("%stop enough for now", subshell_id=subshell))
    run = kernel.finish(execution)

    assert "stopping the running turn" in stop.text()
    _assert_stopped(kernel, run, conversation, "enough for now")


def test_a_stop_flag_in_the_store_ends_the_running_turn(kernel: KernelHarness) -> None:
    conversation, execution = _start_slow_turn(kernel)

    store = Store.open(kernel.home)
    store.stops.request(
        project_id=DEFAULT_PROJECT_ID,
        conversation_id=conversation,
        requested_by="alice",
        reason="from the test",
    )
    run = kernel.finish(execution)

    _assert_stopped(kernel, run, conversation, "stop requested")


def test_an_interrupt_stops_the_turn_and_keeps_the_kernel(kernel: KernelHarness) -> None:
    conversation, execution = _start_slow_turn(kernel)

    kernel.km.interrupt_kernel()
    run = kernel.finish(execution)

    _assert_stopped(kernel, run, conversation, "interrupted")
    assert kernel.km.is_alive()
    assert kernel.run("%%python\nprint(6 * 7)").text().strip() == "42"


# -- a stop while the agent's python code runs ------------------------------------------------------------


def _start_sleeping_python(kernel: KernelHarness, marker: Path) -> tuple[str, Execution]:
    """A turn whose python call writes ``marker`` then sleeps 30 s; returns once the code is running."""
    kernel.run("%guard auto")
    kernel.run("%conversation new")
    conversation = kernel.conversation()
    code = f"open({str(marker)!r}, 'w').close()\nimport time\ntime.sleep(30)\nslept_through = True"
    kernel.script(
        {"text": "", "calls": [{"name": "python", "input": {"code": code}}]},
        {"text": "This answer must never be given."},
    )
    execution = kernel.start("Sleep on it.")
    _wait_until(marker.exists, f"the python call never started ({marker} was not written)")
    return conversation, execution


def _wait_until(condition: Callable[[], bool], message: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(message)
        time.sleep(0.05)


def _assert_python_interrupted(kernel: KernelHarness, run: Execution, reason: str) -> None:
    assert run.status == "ok", run.reply
    tool = next(b for b in run.final() if "🔧 python" in b["text/markdown"])
    assert "⏹ interrupted" in tool["text/markdown"]
    assert "done" not in tool["text/plain"]
    assert "KeyboardInterrupt" in tool["text/plain"]
    footer = run.final()[-1]
    assert "stopped" in footer["text/plain"]
    assert reason in footer["text/plain"]
    assert "must never be given" not in run.markdown(), "the turn ended with the call"
    assert all(WIDGET_VIEW not in b for b in run.final())
    # The kernel is usable, and the code did not run to its end.
    assert kernel.run("%%python\nprint('slept_through' in globals())").text().strip() == "False"


def test_percent_stop_interrupts_a_running_python_call(kernel: KernelHarness) -> None:
    subshell = kernel.create_subshell()
    _, execution = _start_sleeping_python(kernel, kernel.home / "stop-python.started")

    stop = kernel.finish(kernel.start("%stop no more sleeping", subshell_id=subshell))
    run = kernel.finish(execution)

    assert "stopping the running turn" in stop.text()
    _assert_python_interrupted(kernel, run, "no more sleeping")


def test_a_stop_flag_in_the_store_interrupts_a_running_python_call(kernel: KernelHarness) -> None:
    conversation, execution = _start_sleeping_python(kernel, kernel.home / "flag-python.started")

    Store.open(kernel.home).stops.request(
        project_id=DEFAULT_PROJECT_ID,
        conversation_id=conversation,
        requested_by="alice",
        reason="from the test",
    )
    run = kernel.finish(execution)

    _assert_python_interrupted(kernel, run, "stop requested")


def test_an_interrupt_ends_a_running_python_call(kernel: KernelHarness) -> None:
    _, execution = _start_sleeping_python(kernel, kernel.home / "interrupt-python.started")

    kernel.km.interrupt_kernel()
    run = kernel.finish(execution)

    _assert_python_interrupted(kernel, run, "interrupted")
    assert kernel.km.is_alive()
