"""The cards around the answer: the session ledger, a sub-agent run, a background shell that reports back."""

from __future__ import annotations

import pytest

from .harness import KernelHarness, Message

pytestmark = pytest.mark.slow

PLAN = {
    "plan": {
        "goal": "Sum the data",
        "done": ["the sum is printed", "the data is unchanged"],
        "todos": [
            {"id": "load", "content": "Load the data", "status": "completed"},
            {"id": "sum", "content": "Add it up", "status": "in_progress"},
        ],
    }
}


def test_a_todos_call_shows_the_session_card(kernel: KernelHarness) -> None:
    kernel.run("%conversation new")
    kernel.run("%guard auto")
    kernel.script({"text": "", "calls": [{"name": "todos", "input": PLAN}]}, {"text": "Planned."})

    run = kernel.run("Plan the work.")

    session = next(b for b in run.final() if "📋 Session" in b["text/markdown"])
    markdown = session["text/markdown"]
    assert "Steps 2/" in markdown, "refreshed at the next step"
    assert "**Goal:** Sum the data" in markdown
    assert "1. [ ] the sum is printed" in markdown
    assert "2. [ ] the data is unchanged" in markdown
    assert "Load the data (completed)" in markdown
    assert "Add it up (in_progress)" in markdown
    assert "Sum the data" in session["text/html"]
    kinds = [b["text/markdown"].split("\n")[0] for b in run.final()]
    assert kinds.index(next(k for k in kinds if "🔧 todos" in k)) < kinds.index(markdown.split("\n")[0])


def test_a_delegate_call_gets_a_sub_agent_card(kernel: KernelHarness) -> None:
    kernel.run("%guard auto")
    kernel.script(
        {
            "text": "",
            "calls": [{"name": "delegate", "input": {"task": "Greet the user.", "agent": "general"}}],
        },
        {"text": "Hello from the child."},
        {"text": "The child greeted you."},
    )

    run = kernel.run("Ask a sub-agent to greet me.")

    sub = next(b for b in run.final() if "sub-agent" in b["text/markdown"] and "🤖" in b["text/markdown"])
    assert "Steps 1" in sub["text/markdown"]
    assert "✓ completed" in sub["text/markdown"]
    assert "Hello from the child." in sub["text/markdown"]
    assert "The child greeted you." in run.markdown()


def _reported(m: Message) -> bool:
    return m["msg_type"] == "update_display_data" and "The shell printed hi." in m["content"]["data"].get(
        "text/markdown", ""
    )


def test_a_background_shell_card_reports_back_after_the_cell_ended(kernel: KernelHarness) -> None:
    kernel.run("%conversation new")
    kernel.run("%guard auto")
    command = {"command": "sleep 0.3; echo hi-from-shell", "background": True}
    kernel.script(
        {"text": "", "calls": [{"name": "execute", "input": command}]},
        {"text": "It runs in the background."},
        {"text": "The shell printed hi."},
    )

    execution = kernel.start("Run it in the background.")
    run = kernel.finish(execution)
    card = next(b for b in run.final() if "🔧 execute" in b["text/markdown"])
    assert "running in the background" in card["text/markdown"]

    update = kernel.wait_for(execution, _reported, timeout=15)

    data = update["content"]["data"]
    assert update["content"]["transient"]["display_id"] in run.displays(), "the same card, updated in place"
    assert "background work ended (exit code 0)" in data["text/markdown"]
    assert "hi-from-shell" in data["text/markdown"]
    assert "application/vnd.jupyter.widget-view+json" not in data
