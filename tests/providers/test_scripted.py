"""ScriptedModel fails loudly both ways: a reply nobody asked for, and a request the script cannot answer."""

from __future__ import annotations

import asyncio

import pytest

from neuralis_jupyter.providers.scripted import Reply, ScriptedModel, ScriptExhausted
from neuralis_jupyter.runtime import AgentRuntime, ToolRegistry, TurnRequest
from neuralis_jupyter.store import Store

from ..runtime.helpers import session


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


def turn(store: Store, model: ScriptedModel):
    conv = store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
    req = TurnRequest(session=session(), conversation=conv, model=model, tools=ToolRegistry(), message="hi")
    return asyncio.run(AgentRuntime(store).run(req))


def test_assert_complete_fails_on_replies_left_over(store):
    model = ScriptedModel([Reply(text="one"), Reply(text="two"), Reply(text="three")])
    assert turn(store, model).status == "completed"  # a text answer ends the turn after one reply
    assert model.remaining == 2
    with pytest.raises(AssertionError, match="2 scripted replies were never requested"):
        model.assert_complete()
    turn(store, model)
    turn(store, model)
    model.assert_complete()  # every reply was asked for: passes


def test_a_request_past_the_script_fails_the_turn(store):
    model = ScriptedModel([Reply(text="only one")])
    turn(store, model)
    settled = turn(store, model)
    assert settled.status == "failed"
    assert ScriptExhausted.__name__ in settled.reason
    assert "called 2 times but the script has only 1 replies" in settled.reason
