"""What a turn reports about itself: one usage row per pricing partition (a tool's call on another model
is a second one, under the same request id), the pricing basis on every priced figure, and the fate of
the handoff a budget halt owes (published, failed, absent)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from neuralis_jupyter.contracts.envelope import Budgets, Envelope
from neuralis_jupyter.providers.base import UsageEvent
from neuralis_jupyter.providers.catalog import PRICING_BASIS, load_catalog
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, Tool, ToolOutput, ToolRegistry, TurnRequest, event_to_json
from neuralis_jupyter.runtime.events import TurnSettled, UsageUpdated
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store

from .helpers import OBJ, Probe, session


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


@pytest.fixture
def conv(store):
    return store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")


def run(store, conv, model, tools=None, **kw) -> tuple[TurnSettled, list[Any]]:
    events: list[Any] = []
    req = TurnRequest(
        session=session(),
        conversation=conv,
        model=model,
        tools=tools if tools is not None else ToolRegistry(),
        message="go",
        **kw,
    )
    settled = asyncio.run(AgentRuntime(store).run(req, on_event=events.append))
    return settled, events


def events_of(conv, kind):
    return [b for r in conv.read_all() if r["role"] == "event" for b in r["content"] if b["type"] == kind]


# -- a tool's model call on another model is a second partition --------------------------------------


def searching_tool() -> ToolRegistry:
    async def search(args: dict[str, Any], ctx: Any) -> ToolOutput:
        # What a native web search does: a call on another model, charged to the running turn.
        ctx.record_usage("anthropic", "claude-haiku-4-5", UsageEvent(input_tokens=2000, output_tokens=300))
        return ToolOutput(content="found it")

    tool = Tool(
        name="search", description="search", input_schema=OBJ, handler=search, access="read",
        package_id=AGENT_CORE_ID,
    )  # fmt: skip
    return ToolRegistry.of([tool])


def test_a_second_model_is_a_second_usage_row_under_the_same_request_id(store, conv):
    model = ScriptedModel(
        [
            Reply(calls=(Call(name="search", id="s1"),), input_tokens=100, output_tokens=10),
            Reply(text="done", input_tokens=150, output_tokens=5),
        ]
    )
    settled, events = run(store, conv, model, searching_tool())
    assert settled.status == "completed"
    rows = {(r.provider, r.model): r for r in store.usage.list("default")}
    assert set(rows) == {("scripted", "demo"), ("anthropic", "claude-haiku-4-5")}
    demo, haiku = rows["scripted", "demo"], rows["anthropic", "claude-haiku-4-5"]
    request_id = conv.read_all()[0]["request_id"]
    assert demo.request_id == haiku.request_id == request_id
    assert (demo.input_tokens, demo.output_tokens, demo.steps) == (250, 15, 2)
    assert (haiku.input_tokens, haiku.output_tokens, haiku.steps) == (2000, 300, 0)  # no step of the turn
    prices = load_catalog().get("anthropic", "claude-haiku-4-5").prices
    assert haiku.cost_usd == pytest.approx((2000 * prices.input + 300 * prices.output) / 1e6, rel=1e-12)
    assert settled.cost_usd == pytest.approx(demo.cost_usd + haiku.cost_usd, rel=1e-12)
    assert {(u.provider, u.model) for u in settled.usage} == set(rows)
    charged = [e for e in events if isinstance(e, UsageUpdated) and e.provider == "anthropic"]
    assert [e.input_tokens for e in charged] == [2000]


# -- every priced figure carries the pricing basis ------------------------------------------------------


def test_usage_and_settlement_events_carry_the_pricing_basis(store, conv):
    model = ScriptedModel([Reply(text="priced", input_tokens=10, output_tokens=2)])
    settled, events = run(store, conv, model)
    usage = [e for e in events if isinstance(e, UsageUpdated)]
    assert usage
    assert all(u.pricing_basis == PRICING_BASIS for u in usage)
    assert settled.pricing_basis == PRICING_BASIS
    assert all(u.pricing_basis == PRICING_BASIS for u in settled.usage)
    # And in the JSON form `neuralis chat --json` prints.
    wire = json.loads(json.dumps(event_to_json(settled)))
    assert wire["pricing_basis"] == PRICING_BASIS
    assert {u["pricing_basis"] for u in wire["usage"]} == {PRICING_BASIS}


# -- the handoff a budget halt owes ---------------------------------------------------------------------


class BrokenPublisher:
    """A checkpoint publisher whose store is gone."""

    def __init__(self) -> None:
        self.attempts = 0

    async def publish(self, conversation: Any, **kwargs: Any) -> None:
        self.attempts += 1
        raise OSError(28, "No space left on device")


def test_a_publisher_that_raises_reports_the_handoff_failed(store, conv):
    publisher = BrokenPublisher()
    model = ScriptedModel([Reply(text="step one", calls=(Call(name="lookup", id="t1"),))])
    settled, _ = run(
        store,
        conv,
        model,
        Probe().registry(),
        envelope=Envelope(budgets=Budgets(max_steps=1)),
        handoff=publisher,
    )
    assert (settled.status, settled.budget, settled.handoff) == ("suspended", "max_steps", "failed")
    assert publisher.attempts == 1
    assert events_of(conv, "handoff") == []  # nothing claims a checkpoint that was never written
    assert "handoff" not in conv.read_meta()


def test_a_token_budget_suspends_the_turn_with_a_handoff(store, conv):
    model = ScriptedModel(
        [
            Reply(text="first", calls=(Call(name="lookup", id="t1"),), input_tokens=400, output_tokens=150),
            Reply(text="never asked for"),
        ]
    )
    settled, _ = run(
        store, conv, model, Probe().registry(), envelope=Envelope(budgets=Budgets(max_tokens=500))
    )
    assert (settled.status, settled.budget, settled.handoff) == ("suspended", "max_tokens", "published")
    assert settled.steps == 1
    assert model.remaining == 1  # the second step was never run
    checkpoint = conv.read_meta()["handoff"]
    assert (checkpoint["budget"], checkpoint["tokens"], checkpoint["steps"]) == ("max_tokens", 550, 1)
    assert checkpoint["last_text"] == "first"
    [row] = events_of(conv, "handoff")
    assert "max_tokens budget ran out after 1 steps" in row["text"]
