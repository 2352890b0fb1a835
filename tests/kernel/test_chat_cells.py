"""Chat cells in a real kernel: streamed cards, the shared namespace, and clicks while the cell runs."""

from __future__ import annotations

import itertools

import pytest

from .harness import WIDGET_VIEW, KernelHarness, is_button, is_card, widget_comm

pytestmark = pytest.mark.slow

ANSWER = "The **mean** is 4.2 and the spread is small; nothing in the data looks out of place."


def test_a_chat_cell_streams_then_freezes(kernel: KernelHarness) -> None:
    deltas = len(ANSWER) // 2
    kernel.script({"text": ANSWER, "chunk": 2, "delay": 0.005})  # about 45 deltas over a quarter second

    run = kernel.run("What is the mean?")

    answer_id, *others = run.displays()
    bundles = run.displays()[answer_id]
    kinds = [m["msg_type"] for m in run.of_type("display_data", "update_display_data")]
    assert kinds[0] == "display_data"
    assert "update_display_data" in kinds
    texts = [b["text/markdown"] for b in bundles]
    assert len(texts) >= 3, "the answer grows in several updates"
    assert len(texts) < deltas // 3, "updates are throttled, not one per delta"
    assert all(ANSWER.startswith(t) for t in texts)
    assert all(len(a) <= len(b) for a, b in itertools.pairwise(texts))
    assert WIDGET_VIEW in bundles[0], "while the turn runs the output is a live widget"
    for final in run.final():
        assert WIDGET_VIEW not in final, "a finished turn leaves static outputs only"
        assert {"text/markdown", "text/html", "text/plain"} <= final.keys()
    assert bundles[-1]["text/markdown"] == ANSWER
    assert "<strong>mean</strong>" in bundles[-1]["text/html"]
    assert bundles[-1]["text/plain"] == ANSWER
    footer = run.final()[-1]
    assert "completed" in footer["text/plain"]
    assert "1 step" in footer["text/plain"]
    assert "tokens" in footer["text/markdown"]
    assert "$" in footer["text/markdown"]
    assert "estimates" in footer["text/html"], "the pricing basis is the cost's hover title"
    closed = {m["content"]["comm_id"] for m in run.of_type("comm_close")}
    opened = {m["content"]["comm_id"] for m in run.of_type("comm_open")}
    assert opened, "the live cards are widgets"
    assert opened == closed, "every widget of the turn is closed when it ends"
    assert len(others) == 1, "one answer card and the footer"


def test_python_cells_share_the_namespace_with_the_agent(kernel: KernelHarness) -> None:
    kernel.run("%guard auto")
    kernel.run("%%python\nsamples = [3, 4, 5]")
    kernel.script(
        {
            "text": "Adding one.",
            "calls": [{"name": "python", "input": {"code": "samples.append(6)\nsum(samples)"}}],
        },
        {"text": "The total is 18."},
    )

    run = kernel.run("Add 6 to samples and sum them.")

    seen = kernel.run("%%python\nprint(samples)")
    assert seen.text().strip() == "[3, 4, 5, 6]"
    tool = next(b for b in run.final() if "python" in b["text/plain"] and "samples.append" in b["text/plain"])
    assert "✓ done" in tool["text/markdown"]
    assert "18" in tool["text/markdown"], "the result is in the card's details"
    assert "<details>" in tool["text/html"]
    answers = [b["text/markdown"] for b in run.final()]
    assert (
        answers.index("Adding one.")
        < answers.index(tool["text/markdown"])
        < answers.index("The total is 18.")
    )


def test_an_approve_click_while_the_cell_runs_resolves_the_turn(kernel: KernelHarness) -> None:
    kernel.run("%guard balanced")
    kernel.run("%%python\ncounter = 1")
    kernel.script(
        {"text": "", "calls": [{"name": "python", "input": {"code": "counter += 41\ncounter"}}]},
        {"text": "Counter is 42 now."},
    )

    execution = kernel.start("Bump the counter.")
    button = kernel.wait_for(execution, is_button("Approve"))
    approve = button["content"]["comm_id"]
    kernel.click(approve)
    run = kernel.finish(execution)

    assert run.status == "ok"
    assert any(
        m["content"]["comm_id"] == approve and m["content"]["data"].get("state", {}).get("disabled") is True
        for m in run.of_type("comm_msg")
    ), "an answered card disables its buttons"
    assert kernel.run("%%python\nprint(counter)").text().strip() == "42"
    markdown = run.markdown()
    assert "approved by alice" in markdown
    assert "✓ done" in markdown
    assert "42" in markdown
    assert "Counter is 42 now." in markdown
    assert all(WIDGET_VIEW not in b for b in run.final())


def test_a_deny_click_leaves_a_withheld_call_card(kernel: KernelHarness) -> None:
    kernel.run("%guard balanced")
    kernel.run("%%python\nprecious = 'intact'")
    kernel.script(
        {"text": "", "calls": [{"name": "python", "input": {"code": "precious = 'gone'"}}]},
        {"text": "Understood, I left it alone."},
    )

    execution = kernel.start("Overwrite precious.")
    button = kernel.wait_for(execution, is_button("Deny"))
    kernel.click(button["content"]["comm_id"])
    run = kernel.finish(execution)

    assert run.status == "ok"
    assert kernel.run("%%python\nprint(precious)").text().strip() == "intact"
    tool = next(b for b in run.final() if "🔧 python" in b["text/markdown"])
    assert "denied — not run" in tool["text/markdown"]
    assert "✓" not in tool["text/markdown"].splitlines()[0]
    assert "denied" in tool["text/plain"]
    assert "alice denied it in the notebook" in tool["text/plain"]
    assert "--jp-warn-color1" in tool["text/html"], "a withheld call has its own colour"
    approval = next(b for b in run.final() if "Approve python?" in b["text/markdown"])
    assert "denied by alice" in approval["text/markdown"]


def test_an_ask_question_card_answers_with_the_clicked_option(kernel: KernelHarness) -> None:
    question = {
        "question": "Which colour?",
        "options": [{"id": "r", "label": "Red"}, {"id": "b", "label": "Blue"}],
    }
    kernel.script(
        {"text": "", "calls": [{"name": "ask_question", "input": question}]},
        {"text": "Blue it is."},
    )

    execution = kernel.start("Pick a colour with me.")
    button = kernel.wait_for(execution, is_button("Blue"))
    kernel.click(button["content"]["comm_id"])
    run = kernel.finish(execution)

    assert run.status == "ok"
    markdown = run.markdown()
    assert "Answer: **Blue**" in markdown
    assert "The user chose: b (Blue)" in markdown
    assert "Blue it is." in markdown


def test_a_multiple_choice_question_takes_the_toggled_options(kernel: KernelHarness) -> None:
    question = {
        "question": "Which columns?",
        "multiple": True,
        "options": [
            {"id": "a", "label": "Age"},
            {"id": "h", "label": "Height"},
            {"id": "w", "label": "Weight"},
        ],
    }
    kernel.script({"text": "", "calls": [{"name": "ask_question", "input": question}]}, {"text": "Noted."})

    execution = kernel.start("Choose columns with me.")
    kernel.wait_for(execution, is_card("❓ Which columns?"))
    submit = kernel.wait_for(execution, is_button("Submit"))
    for label in ("Age", "Weight"):
        toggle = widget_comm(kernel.messages(execution), "ToggleButtonModel", description=label)
        assert toggle is not None
        kernel.set_state(toggle, value=True)
    kernel.click(submit["content"]["comm_id"])
    run = kernel.finish(execution)

    assert "The user chose: a (Age), w (Weight)" in run.markdown()
    assert "Answer: **Age, Weight**" in run.markdown()


def test_a_question_without_options_takes_typed_text(kernel: KernelHarness) -> None:
    question = {"question": "What should the report be called?"}
    kernel.script(
        {"text": "", "calls": [{"name": "ask_question", "input": question}]}, {"text": "Good name."}
    )

    execution = kernel.start("Ask me for a title.")
    kernel.wait_for(execution, is_card("❓ What should the report be called?"))
    submit = kernel.wait_for(execution, is_button("Submit"))
    text = widget_comm(kernel.messages(execution), "TextModel")
    assert text is not None
    kernel.set_state(text, value="Quarterly sampling")
    kernel.click(submit["content"]["comm_id"])
    run = kernel.finish(execution)

    assert "The user answered: Quarterly sampling" in run.markdown()


def test_chat_cells_are_counted_like_code_cells(kernel: KernelHarness) -> None:
    kernel.script({"text": "one"})
    first = kernel.run("%%python\n1 + 1")
    chat = kernel.run("count me")
    after = kernel.run("%%python\n2 + 2")
    counts = [e.reply["content"]["execution_count"] for e in (first, chat, after)]
    assert counts == sorted(counts)
    assert len(set(counts)) == 3, f"every cell gets its own number, got {counts}"
