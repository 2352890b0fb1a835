"""Ending a running turn cleanly: ``%stop`` on a kernel subshell, a stop flag in the store, an interrupt.

Each test streams a long, slow scripted answer, stops it once the first words are on screen, and checks
that the cell completes (no error, the kernel alive), the footer says "stopped", and the transcript
keeps the partial answer.
"""

from __future__ import annotations

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
