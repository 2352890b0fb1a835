"""The cards' static forms, without a kernel: what a saved notebook shows for each state."""

from __future__ import annotations

import pytest

from neuralis_jupyter.kernel.cards.answer import AnswerCard
from neuralis_jupyter.kernel.cards.render import OUTCOMES, input_summary
from neuralis_jupyter.kernel.cards.session import FooterCard
from neuralis_jupyter.kernel.cards.tool import ToolCard
from neuralis_jupyter.runtime.events import TurnSettled, UsageUpdated


def _tool(outcome: str, content: str, data: dict[str, object] | None = None) -> ToolCard:
    card = ToolCard(display_id="d", live=False, name="python", input={"code": "df.describe()"})
    card.finished(outcome=outcome, content=content, data=data, duration_ms=1500)
    return card


def test_model_html_in_an_answer_is_shown_as_text() -> None:
    card = AnswerCard(display_id="d", live=False)
    card.add("Look: <img src=x onerror=alert(1)> and [click](javascript:alert(1)) **bold**")

    html = card.html()

    assert "<img" not in html
    assert "&lt;img" in html
    assert "javascript:" not in html
    assert "<strong>bold</strong>" in html
    assert card.bundle()["text/markdown"].startswith("Look: <img"), "the markdown keeps the source"


@pytest.mark.parametrize("outcome", sorted(set(OUTCOMES) - {"ok", "error"}))
def test_a_withheld_call_is_never_shown_as_a_success(outcome: str) -> None:
    card = _tool(outcome, f"Refused: python was {outcome}.")

    bundle = card.bundle()

    assert "not run" in bundle["text/markdown"].splitlines()[0]
    assert "✓" not in bundle["text/markdown"].splitlines()[0]
    assert f"> Refused: python was {outcome}." in bundle["text/markdown"]
    assert f"Refused: python was {outcome}." in bundle["text/plain"]
    assert "--jp-warn-color1" in bundle["text/html"]
    assert "Result:" not in bundle["text/markdown"], "a refusal is not a result"


def test_a_failed_call_and_a_done_call_read_differently() -> None:
    failed = _tool("error", "Traceback: NameError")
    done = _tool("ok", "count 3\nmean 4.2")

    assert "✗ failed · 1.5 s" in failed.markdown()
    assert "--jp-error-color1" in failed.html()
    assert "✓ done · 1.5 s" in done.markdown()
    assert "mean 4.2" in done.markdown()
    assert "<details>" in done.html()


def test_backticks_in_a_call_cannot_break_out_of_its_code() -> None:
    card = ToolCard(display_id="d", live=False, name="execute", input={"command": "echo `date`"})
    card.finished(outcome="ok", content="```\n# not a heading\n```", data=None, duration_ms=5)

    markdown = card.markdown()

    assert markdown.startswith("**🔧 execute** `` echo `date` `` — ✓ done")
    assert "````\n```\n# not a heading\n```\n````" in markdown


def test_a_background_call_waits_then_reports() -> None:
    card = _tool("ok", '{"shellId": "sh-1", "status": "running"}', {"shellId": "sh-1", "status": "running"})
    assert card.background == "sh-1"
    assert "running in the background" in card.markdown()

    card.report(text="Background shell sh-1 exited with code 3", exit_code=3)
    card.follow("It failed; I will look.")

    assert "background work ended (exit code 3)" in card.markdown()
    assert "exited with code 3" in card.plain()
    assert "↪ It failed; I will look." in card.markdown()
    assert "--jp-error-color1" in card.html()


def test_summaries_say_what_a_call_does() -> None:
    assert input_summary({"code": "import pandas as pd\ndf = pd.read_csv('x')"}) == "import pandas as pd…"
    assert input_summary({"plan": {"goal": "Sum the data", "todos": []}}) == "plan: Sum the data"
    assert input_summary({"mark": {"met": [1]}}) == '{"mark": {"met": [1]}}'
    assert len(input_summary({"command": "x" * 500})) == 80


def test_the_footer_shows_the_bill_with_the_pricing_basis_on_hover() -> None:
    usage = UsageUpdated(
        provider="anthropic",
        model="m",
        input_tokens=1200,
        output_tokens=34,
        cache_read_tokens=0,
        cache_write_tokens=0,
        steps=2,
        cost_usd=0.0123,
        pricing_basis="Catalog list prices",
    )
    settled = TurnSettled(
        status="stopped",
        text="",
        steps=2,
        reason="stopped from the notebook",
        input_tokens=1200,
        output_tokens=34,
        cost_usd=0.0123,
        duration_ms=2300,
        usage=(usage,),
    )

    footer = FooterCard.for_turn(display_id="f", settled=settled, usage=[usage], elapsed_ms=0, rate_waits=0)

    assert footer.plain() == (
        "⏹ stopped: stopped from the notebook · 2 steps · 1,200 in / 34 out tokens · $0.0123 (estimate)"
        " · 2.3 s"
    )
    assert 'title="Catalog list prices"' in footer.html()
    errored = FooterCard.for_turn(display_id="f", settled=None, usage=[usage], elapsed_ms=10, rate_waits=1.5)
    assert "ended with an error" in errored.plain()
    assert "waited 1.5 s for the rate limit" in errored.plain()


def test_an_interrupted_call_shows_what_it_printed_and_is_not_a_success() -> None:
    card = _tool(
        "stopped", "step 1\nKeyboardInterrupt: the code was interrupted\n", {"interrupted": "enough"}
    )

    head = card.markdown().splitlines()[0]

    assert "⏹ interrupted · 1.5 s" in head
    assert "not run" not in head, "it ran, in part"
    assert "✓" not in head
    assert "Result:" in card.markdown()
    assert "KeyboardInterrupt" in card.markdown()
    assert "--jp-error-color1" in card.html()
