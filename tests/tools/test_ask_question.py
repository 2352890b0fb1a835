"""``ask_question``: the turn waits for the answerer; a headless run takes the default or refuses."""

from __future__ import annotations

import asyncio

import pytest
from traitlets.config import Config

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.store import Store
from neuralis_jupyter.workbench import Workbench

OPTIONS = [{"id": "stg", "label": "Staging"}, {"id": "prod", "label": "Production"}]


class Answerer:
    def __init__(self, answer, delay=0.0):
        self.answer, self.delay, self.asked = answer, delay, []

    async def ask(self, *, question, options, multiple, tool_use_id):
        self.asked.append((question, [o["id"] for o in options], multiple, tool_use_id))
        await asyncio.sleep(self.delay)
        return self.answer


def run_question(tmp_path, args, answerer=None, timeout=None):
    home = tmp_path / "home"
    config = Config()
    if timeout is not None:
        config.AskSettings.timeout = timeout
    settings = NeuralisSettings(data_root=str(home), config=config)
    bench = Workbench(settings, store=Store.open(home))
    bench.tool_env.answerer = answerer  # what a kernel does: its widgets answer
    model = ScriptedModel([Reply(calls=(Call(name="ask_question", id="q1", input=args),)), Reply(text="ok")])
    target = bench.target("alice")

    async def go():
        async with bench.turn(target, "ask me", model=model) as request:
            started = asyncio.get_running_loop().time()
            settled = await bench.runtime.run(request)
            return settled, asyncio.get_running_loop().time() - started

    _settled, elapsed = asyncio.run(go())
    block = next(b for r in target.conversation.read_all() if r["role"] == "tool" for b in r["content"])
    return block, elapsed


def test_the_turn_waits_for_the_answer(tmp_path):
    answerer = Answerer(["prod"], delay=0.3)
    block, elapsed = run_question(tmp_path, {"question": "Where?", "options": OPTIONS}, answerer)
    assert block["content"] == "The user chose: prod (Production)."
    assert block["outcome"] == "ok"
    assert elapsed >= 0.3
    assert answerer.asked == [("Where?", ["stg", "prod"], False, "q1")]


def test_free_text_answer(tmp_path):
    block, _ = run_question(tmp_path, {"question": "Name?"}, Answerer(["Ada"]))
    assert block["content"] == "The user answered: Ada"


def test_headless_takes_the_declared_default(tmp_path):
    block, _ = run_question(tmp_path, {"question": "Where?", "options": OPTIONS, "default": "stg"})
    assert block["outcome"] == "ok"
    assert "default was taken: stg (Staging)" in block["content"]


def test_headless_without_a_default_refuses_clearly(tmp_path):
    block, _ = run_question(tmp_path, {"question": "Where?", "options": OPTIONS})
    assert block["outcome"] == "refused"
    assert block["is_error"] is True
    assert "nobody can answer questions in this headless run" in block["content"]


@pytest.mark.parametrize(("default", "expected_outcome"), [("stg", "ok"), (None, "error")])
def test_no_answer_in_time(tmp_path, default, expected_outcome):
    args = {"question": "Where?", "options": OPTIONS}
    if default:
        args["default"] = default
    block, elapsed = run_question(tmp_path, args, Answerer(["prod"], delay=5), timeout=0.2)
    assert block["outcome"] == expected_outcome
    assert elapsed < 3


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"question": "q", "options": [{"id": "a", "label": "A"}, {"id": "a", "label": "B"}]}, "unique"),
        ({"question": "q", "options": OPTIONS, "default": "nope"}, "default names no option"),
        ({"question": "q", "options": OPTIONS, "default": ["stg", "prod"]}, "multiple: true"),
    ],
)
def test_malformed_questions(tmp_path, args, fragment):
    block, _ = run_question(tmp_path, args, Answerer(["stg"]))
    assert block["outcome"] == "invalid"
    assert fragment in block["content"]


def test_turns_running_at_once_each_ask_their_own_answerer(tmp_path):
    home = tmp_path / "home"
    bench = Workbench(NeuralisSettings(data_root=str(home)), store=Store.open(home))
    first, second = Answerer(["stg"], delay=0.2), Answerer(["prod"])
    asking = {"question": "Where?", "options": OPTIONS}

    async def turn(answerer, message):
        target = await asyncio.to_thread(bench.target, "alice")  # each its own new conversation
        model = ScriptedModel(
            [Reply(calls=(Call(name="ask_question", id="q1", input=asking),)), Reply(text="ok")]
        )
        async with bench.turn(target, message, model=model, answerer=answerer) as request:
            await bench.runtime.run(request)
        return next(b for r in target.conversation.read_all() if r["role"] == "tool" for b in r["content"])

    async def both():
        return await asyncio.gather(turn(first, "one"), turn(second, "two"))

    one, two = asyncio.run(both())
    assert (len(first.asked), len(second.asked)) == (1, 1)
    assert one["content"] == "The user chose: stg (Staging)."
    assert two["content"] == "The user chose: prod (Production)."


def test_a_turn_with_nobody_to_answer_refuses_even_if_the_host_has_an_answerer(tmp_path):
    home = tmp_path / "home"
    bench = Workbench(NeuralisSettings(data_root=str(home)), store=Store.open(home))
    host = Answerer(["prod"])
    bench.tool_env.answerer = host
    target = bench.target("alice")
    ask = {"question": "Where?", "options": OPTIONS}
    model = ScriptedModel([Reply(calls=(Call(name="ask_question", id="q1", input=ask),)), Reply(text="ok")])

    async def go():
        async with bench.turn(target, "headless", model=model, answerer=None) as request:
            await bench.runtime.run(request)

    asyncio.run(go())
    block = next(b for r in target.conversation.read_all() if r["role"] == "tool" for b in r["content"])
    assert block["outcome"] == "refused"
    assert host.asked == []
