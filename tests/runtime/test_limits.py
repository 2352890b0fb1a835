"""Budgets, the rate cap, what a cut-short step is charged, and what a runtime costs before its first turn."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from neuralis_jupyter.contracts.envelope import Budgets, Envelope
from neuralis_jupyter.packages import PackageSet
from neuralis_jupyter.prompt import AssembledPrompt
from neuralis_jupyter.providers.scripted import Call, Reply
from neuralis_jupyter.runtime import AgentRuntime, StopSignal, Tool, ToolRegistry, TurnRequest
from neuralis_jupyter.runtime.errors import RateLimitExceeded
from neuralis_jupyter.runtime.events import TextDelta
from neuralis_jupyter.runtime.limits import RateLimiter
from neuralis_jupyter.runtime.results import read_tool_result_tool
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store
from neuralis_jupyter.testing import Raw

from .harness import Harness
from .helpers import OBJ, Probe, session


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


@pytest.fixture
def conv(store):
    return store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")


def request(conv, harness, tools=None, **kw):
    return TurnRequest(
        session=kw.pop("session", None) or session(),
        conversation=conv,
        model=harness.model,
        tools=tools if tools is not None else ToolRegistry(),
        message="go",
        **kw,
    )


# -- finding 6: a step cut short is charged what the provider reported -------------------------------


@pytest.mark.parametrize("provider", ["scripted", "anthropic", "openai"])
def test_a_stop_mid_stream_charges_the_input_tokens(store, conv, provider, fake_llm):
    harness = Harness(provider, None if provider == "scripted" else fake_llm)
    harness.enqueue(
        Reply(text="abcdefghij" * 20, chunk=5, delay=0.02, input_tokens=1234, cache_read_tokens=66)
    )
    stop = StopSignal()
    deltas: list[TextDelta] = []

    def on_event(event: Any) -> None:
        if isinstance(event, TextDelta):
            deltas.append(event)
            if len(deltas) == 3:
                stop.set("user pressed stop")

    settled = asyncio.run(AgentRuntime(store).run(request(conv, harness, stop=stop), on_event=on_event))
    assert settled.status == "stopped"
    rows = store.usage.list("default")
    if provider == "openai":
        # Chat Completions reports usage only in its last chunk: a stopped call has nothing to charge.
        assert rows == []
        return
    [row] = rows
    assert (row.input_tokens, row.cache_read_tokens, row.steps) == (1234, 66, 1)
    assert settled.input_tokens == 1234 + 66


def test_a_provider_failure_mid_stream_charges_the_input_tokens(store, conv, fake_llm):
    harness = Harness("anthropic", fake_llm)
    start = {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 777, "output_tokens": 1},
    }}  # fmt: skip
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    harness.enqueue(Raw(events=[start, error]))
    settled = asyncio.run(AgentRuntime(store).run(request(conv, harness)))
    assert settled.status == "failed"
    assert "Overloaded" in settled.reason
    [row] = store.usage.list("default")
    assert (row.input_tokens, row.output_tokens, row.steps) == (777, 1, 1)
    assert settled.input_tokens == 777


# -- finding 7: a budget of zero steps ---------------------------------------------------------------


def test_a_zero_step_budget_runs_no_step(store, conv):
    harness = Harness("scripted", None).enqueue(Reply(text="never"))
    req = request(conv, harness, envelope=Envelope(budgets=Budgets(max_steps=0)))
    settled = asyncio.run(AgentRuntime(store).run(req))
    assert (settled.status, settled.budget, settled.steps) == ("suspended", "max_steps", 0)
    assert harness.request_count == 0


# -- finding 8: no tool is first-party by omission ---------------------------------------------------------


def test_a_tool_must_name_its_package():
    async def handler(args: dict[str, Any], ctx: Any) -> str:
        return "x"

    with pytest.raises(TypeError, match="package_id"):
        Tool(name="t", description="t", input_schema=OBJ, handler=handler, access="read")  # type: ignore[call-arg]
    assert read_tool_result_tool().package_id == AGENT_CORE_ID


# -- finding 10: the rate cap under concurrency ----------------------------------------------------


def test_concurrent_turns_never_exceed_the_rate_cap(store):
    """Six acquirers at once (two runtimes' worth of tasks, one store): exactly the cap gets through."""
    who = session(llm_rate_limit_rpm=2)

    async def race() -> list[Any]:
        limiters = [RateLimiter(store.calls, max_wait=0.2) for _ in range(2)]
        acquirers = [limiters[i % 2].acquire(who, on_wait=lambda *_: None) for i in range(6)]
        return await asyncio.gather(*acquirers, return_exceptions=True)

    outcomes = asyncio.run(race())
    assert sum(o is None for o in outcomes) == 2
    assert sum(isinstance(o, RateLimitExceeded) for o in outcomes) == 4
    assert store.calls.count_since("default", "alice", datetime(2000, 1, 1, tzinfo=UTC)) == 2


def test_concurrent_threads_never_exceed_the_rate_cap(store):
    log = store.calls
    start = threading.Barrier(8)
    taken: list[bool] = []
    now = datetime.now(UTC)

    def reserve() -> None:
        start.wait()
        taken.append(log.reserve("default", "alice", now, limit=3, window=timedelta(minutes=1)) is None)

    threads = [threading.Thread(target=reserve) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == [False] * 5 + [True] * 3
    assert store.calls.count_since("default", "alice", datetime(2000, 1, 1, tzinfo=UTC)) == 3


# -- finding 11: no blocking I/O on the event loop ----------------------------------------------------


def test_a_runtime_opens_no_database_until_its_first_turn(tmp_path):
    store = Store.open(tmp_path / "home")
    AgentRuntime(store)
    assert not (tmp_path / "home" / "neuralis.db").exists()


def test_a_turn_does_its_file_and_database_io_off_the_loop(tmp_path, monkeypatch):
    """Opening the store, reading identity files, reading a stored result: all in worker threads."""
    loop_thread = threading.main_thread()  # asyncio.run runs the loop here
    on_loop: list[str] = []
    read_text = Path.read_text
    create_engine = sqlalchemy.create_engine

    def spy_read(self: Path, *args: Any, **kwargs: Any) -> str:
        if threading.current_thread() is loop_thread and self.name in ("SOUL.md", "d1.txt"):
            on_loop.append(self.name)
        return read_text(self, *args, **kwargs)

    def spy_engine(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is loop_thread:
            on_loop.append("create_engine")
        return create_engine(*args, **kwargs)

    store = Store.open(tmp_path / "home")
    conv = store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
    identity = tmp_path / "SOUL.md"
    identity.write_text("You are careful.")
    probe = Probe()
    harness = Harness("scripted", None).enqueue(
        Reply(calls=(Call(name="dump", id="d1"),)),
        Reply(calls=(Call(name="read_tool_result", input={"id": "d1", "offset": 100}, id="p1"),)),
        Reply(text="read it"),
    )
    tools = ToolRegistry.of([probe.tool("dump", reply="x" * 30_000)])
    prompt = AssembledPrompt(identity_files=[identity], packages=PackageSet([]))
    monkeypatch.setattr(Path, "read_text", spy_read)
    monkeypatch.setattr(sqlalchemy, "create_engine", spy_engine)
    settled = asyncio.run(AgentRuntime(store).run(request(conv, harness, tools, prompt=prompt)))
    assert settled.status == "completed"
    assert "You are careful." in harness.model.requests[0].system
    assert not any(r["content"][0].get("is_error") for r in conv.read_all() if r["role"] == "tool")
    assert on_loop == []
