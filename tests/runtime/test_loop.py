"""The agent loop of seed 001 on a real store, through the scripted model and through the real
anthropic and openai SDKs against the loopback fake server (every test runs all three)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from neuralis_jupyter.contracts import SpendLimits, SpendRule
from neuralis_jupyter.contracts.envelope import Budgets, Envelope, Scope
from neuralis_jupyter.contracts.refusals import is_kernel_refusal
from neuralis_jupyter.providers.scripted import Call, Reply
from neuralis_jupyter.runtime import AgentRuntime, StopSignal, TurnRequest
from neuralis_jupyter.runtime.context import SHADOW
from neuralis_jupyter.runtime.events import (
    PermissionRequested,
    ShadowIntent,
    TextDelta,
    ToolCallFinished,
    TurnSettled,
)
from neuralis_jupyter.runtime.limits import RateLimiter
from neuralis_jupyter.runtime.tools import ToolRegistry
from neuralis_jupyter.store import Store, UsageEvent

from .harness import MODELS, Harness
from .helpers import Probe, RecordingHook, session


@pytest.fixture(params=["scripted", "anthropic", "openai"])
def harness(request, fake_llm):
    return Harness(request.param, None if request.param == "scripted" else fake_llm)


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


@pytest.fixture
def conv(store):
    return store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")


def run_turn(store, conv, harness, tools=None, *, message="hello", **kw):
    runtime = kw.pop("runtime", None) or AgentRuntime(store)
    events = []
    req = TurnRequest(
        session=kw.pop("session", None) or session(),
        conversation=conv,
        model=harness.model,
        tools=tools if tools is not None else ToolRegistry(),
        message=message,
        **kw,
    )
    settled = asyncio.run(runtime.run(req, on_event=events.append))
    return settled, events


def results_of(conv):
    return {b["tool_use_id"]: b for r in conv.read_all() if r["role"] == "tool" for b in r["content"]}


def events_of(conv, kind):
    return [b for r in conv.read_all() if r["role"] == "event" for b in r["content"] if b["type"] == kind]


def test_text_turn_completes_and_persists(store, conv, harness):
    harness.enqueue(Reply(text="Hi there", chunk=3))
    settled, events = run_turn(store, conv, harness)
    assert settled.status == "completed"
    assert settled.text == "Hi there"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hi there"
    rows = conv.read_all()
    assert [(r["seq"], r["role"]) for r in rows] == [(1, "user"), (2, "assistant")]
    assert rows[0]["content"] == [{"type": "text", "text": "hello"}]
    assert rows[1]["content"] == [{"type": "text", "text": "Hi there"}]
    assert rows[1]["request_id"] == rows[0]["request_id"] == events[0].request_id
    harness.assert_complete()


def test_three_steps_with_a_parallel_tool_step(store, conv, harness):
    """The acceptance scenario: exact usage, one merged row for parallel results, rows in order."""
    probe = Probe()
    tools = ToolRegistry.of([probe.tool("lookup", delay=0.2), probe.tool("summarise")])
    harness.enqueue(
        Reply(
            text="Looking both up.",
            calls=(
                Call(name="lookup", input={"q": "a"}, id="t1"),
                Call(name="lookup", input={"q": "b"}, id="t2"),
            ),
            input_tokens=1000,
            output_tokens=200,
            cache_read_tokens=500,
            cache_write_tokens=100 if harness.provider != "openai" else 0,
        ),
        Reply(calls=(Call(name="summarise", input={"n": 2}, id="t3"),), input_tokens=1500, output_tokens=50),
        Reply(text="Both found.", input_tokens=1800, output_tokens=25),
    )
    settled, _ = run_turn(store, conv, harness, tools)
    assert settled.status == "completed"
    assert settled.steps == 3
    assert settled.text == "Both found."
    assert probe.max_running == 2  # the two lookups ran at the same time
    assert harness.request_count == 3
    assert harness.tool_result_ids(1) == ["t1", "t2"]
    assert harness.tool_result_ids(2) == ["t3"]

    rows = conv.read_all()
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[1]["content"][0] == {"type": "text", "text": "Looking both up."}
    assert [b["id"] for b in rows[1]["content"][1:]] == ["t1", "t2"]
    assert [b["tool_use_id"] for b in rows[2]["content"]] == ["t1", "t2"]
    assert all(b["outcome"] == "ok" and b["is_error"] is False for b in rows[2]["content"])
    # On disk the merged row was appended once per result under one seq; readers keep the last.
    raw = [json.loads(line) for line in (conv.path / "messages.jsonl").read_text().splitlines()]
    assert [r["seq"] for r in raw if r["role"] == "tool"] == [3, 3, 5]

    usage = store.usage.list("default")
    assert len(usage) == 1
    row = usage[0]
    assert (row.provider, row.model, row.steps) == (harness.provider, MODELS[harness.provider], 3)
    cache_write = 100 if harness.provider != "openai" else 0
    assert (row.input_tokens, row.output_tokens, row.cache_read_tokens, row.cache_write_tokens) == (
        4300,
        275,
        500,
        cache_write,
    )
    p = harness.prices
    expected = (4300 * p.input + 275 * p.output + 500 * p.cache_read + cache_write * p.cache_write) / 1e6
    assert row.cost_usd == pytest.approx(expected, rel=1e-12)
    assert settled.cost_usd == pytest.approx(expected, rel=1e-12)
    assert (row.user_id, row.agent_id, row.conversation_id) == ("alice", "assistant", conv.id)
    assert row.request_id == rows[0]["request_id"]
    harness.assert_complete()


def test_hallucinated_tool_gets_the_generic_answer(store, conv, harness):
    harness.enqueue(Reply(calls=(Call(name="secret_admin", id="t1"),)), Reply(text="ok"))
    run_turn(store, conv, harness, Probe().registry())
    block = results_of(conv)["t1"]
    assert block["content"] == "Tool not available: secret_admin"
    assert block["is_error"] is True
    assert block["outcome"] == "unavailable"


def test_invalid_input_is_refused_before_the_handler(store, conv, harness):
    probe = Probe()
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tools = ToolRegistry.of([probe.tool("lookup", schema=schema)])
    harness.enqueue(Reply(calls=(Call(name="lookup", input={"q": 3}, id="t1"),)), Reply(text="ok"))
    run_turn(store, conv, harness, tools)
    block = results_of(conv)["t1"]
    assert block["outcome"] == "invalid"
    assert "q: 3 is not of type 'string'" in block["content"]
    assert probe.calls == []


def test_forbidden_beats_writes_and_reads(store, conv, harness):
    probe = Probe()
    env = Envelope(
        scope=Scope.of(reads="all", writes={"write_note"}, forbidden={"write_note", "read_tool_result"})
    )
    harness.enqueue(
        Reply(
            calls=(
                Call(name="write_note", input={"t": "x"}, id="w"),
                Call(name="read_tool_result", input={"id": "x"}, id="r"),
                Call(name="lookup", id="l"),
            )
        ),
        Reply(text="ok"),
    )
    hook = RecordingHook(allow=True)
    run_turn(store, conv, harness, probe.registry(), envelope=env, permission=hook)
    results = results_of(conv)
    assert results["w"]["outcome"] == "refused"
    assert "forbidden" in results["w"]["content"]
    assert results["r"]["outcome"] == "refused"  # intrinsic, but forbidden still refuses it
    assert results["l"]["outcome"] == "ok"
    assert [name for name, _ in probe.calls] == ["lookup"]
    assert hook.requests == []  # refused before consent was ever asked


def test_reads_and_writes_scope(store, conv, harness):
    probe = Probe()
    env = Envelope(scope=Scope.of(reads={"lookup"}, writes=()))
    harness.enqueue(
        Reply(
            calls=(
                Call(name="lookup", id="l"),
                Call(name="fetch_page", id="f"),
                Call(name="write_note", id="w"),
            )
        ),
        Reply(text="ok"),
    )
    run_turn(store, conv, harness, probe.registry(), envelope=env, permission=RecordingHook())
    results = results_of(conv)
    assert results["l"]["outcome"] == "ok"
    assert results["f"]["outcome"] == results["w"]["outcome"] == "refused"
    assert all(is_kernel_refusal(results[k]["content"]) for k in "fw")


def test_consent_for_writes_and_egress_reads_only(store, conv, harness):
    probe = Probe()
    hook = RecordingHook(allow=True)
    harness.enqueue(
        Reply(
            calls=(
                Call(name="lookup", id="l"),
                Call(name="fetch_page", id="f"),
                Call(name="write_note", id="w"),
            )
        ),
        Reply(text="ok"),
    )
    _, events = run_turn(store, conv, harness, probe.registry(), permission=hook)
    asked = {(r.name, r.access, r.is_read_only) for r in hook.requests}
    assert asked == {("fetch_page", "read", True), ("write_note", "write", False)}
    assert {e.name for e in events if isinstance(e, PermissionRequested)} == {"fetch_page", "write_note"}
    assert sorted(n for n, _ in probe.calls) == ["fetch_page", "lookup", "write_note"]


def test_a_denied_call_is_withheld_not_successful(store, conv, harness):
    probe = Probe()
    harness.enqueue(Reply(calls=(Call(name="write_note", id="w"),)), Reply(text="ok"))
    _, events = run_turn(store, conv, harness, probe.registry(), permission=RecordingHook(allow=False))
    block = results_of(conv)["w"]
    assert block["is_error"] is True
    assert block["outcome"] == "denied"
    assert is_kernel_refusal(block["content"])
    assert "the user said no" in block["content"]
    assert probe.calls == []
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished[0].outcome == "denied"


def test_no_hook_means_writes_are_refused(store, conv, harness):
    probe = Probe()
    harness.enqueue(Reply(calls=(Call(name="write_note", id="w"),)), Reply(text="ok"))
    run_turn(store, conv, harness, probe.registry())
    assert results_of(conv)["w"]["outcome"] == "denied"
    assert probe.calls == []


def test_shadow_mode_runs_only_attested_reads(store, conv, harness):
    probe = Probe()
    tools = ToolRegistry.of([*probe.registry(), probe.tool("third_party_read")])  # a read, not attested
    harness.enqueue(
        Reply(
            calls=(
                Call(name="lookup", id="l"),
                Call(name="write_note", input={"t": "x"}, id="w"),
                Call(name="fetch_page", id="f"),
                Call(name="third_party_read", id="x"),
            )
        ),
        Reply(text="done"),
    )
    hook = RecordingHook(allow=True)
    _, events = run_turn(store, conv, harness, tools, mode=SHADOW, permission=hook)
    results = results_of(conv)
    assert results["l"]["outcome"] == "ok"
    for k in "wfx":
        assert results[k]["outcome"] == "shadow_denied"
        assert results[k]["is_error"] is True
    assert [n for n, _ in probe.calls] == ["lookup"]
    captured = {"write_note", "fetch_page", "third_party_read"}
    assert {e.name for e in events if isinstance(e, ShadowIntent)} == captured
    assert {b["name"] for b in events_of(conv, "shadow_intent")} == captured
    assert hook.requests == []  # shadow is enforced at invocation, not by a hook answering deny


def test_budget_exhaustion_suspends_with_a_handoff(store, conv, harness):
    probe = Probe()
    harness.enqueue(*[Reply(text=f"step {i}", calls=(Call(name="lookup", id=f"t{i}"),)) for i in range(2)])
    settled, _ = run_turn(
        store, conv, harness, probe.registry(), envelope=Envelope(budgets=Budgets(max_steps=2))
    )
    assert settled.status == "suspended"
    assert settled.budget == "max_steps"
    assert settled.handoff == "published"
    assert settled.steps == 2
    assert harness.request_count == 2
    meta = conv.read_meta()
    assert meta["handoff"]["budget"] == "max_steps"
    assert meta["handoff"]["last_text"] == "step 1"
    assert len(events_of(conv, "handoff")) == 1
    harness.assert_complete()


def test_usd_budget_and_absent_handoff(store, conv, harness):
    probe = Probe()
    per_step = 100_000 * harness.prices.input / 1e6
    harness.enqueue(
        *[
            Reply(calls=(Call(name="lookup", id=f"t{i}"),), input_tokens=100_000, output_tokens=0)
            for i in range(2)
        ]
    )
    settled, _ = run_turn(
        store,
        conv,
        harness,
        probe.registry(),
        envelope=Envelope(budgets=Budgets(max_usd=per_step * 1.5)),
        handoff=None,
    )
    assert settled.status == "suspended"
    assert settled.budget == "max_usd"
    assert settled.handoff == "absent"
    assert settled.steps == 2
    assert events_of(conv, "handoff") == []


def test_large_result_is_offloaded_and_paged(store, conv, harness):
    probe = Probe()
    big = "".join(f"line {i:05d} " + "x" * 40 + "\n" for i in range(500))  # ~25 KB of ASCII
    assert 24_000 < len(big.encode()) < 27_000
    shown_chars = 20 * 1024 - 400  # the preview keeps 400 bytes free for the paging note
    tools = ToolRegistry.of([probe.tool("dump", reply=big)])
    harness.enqueue(
        Reply(calls=(Call(name="dump", id="d1"),)),
        Reply(calls=(Call(name="read_tool_result", input={"id": "d1", "offset": shown_chars}, id="p1"),)),
        Reply(text="read it all"),
    )
    settled, _ = run_turn(store, conv, harness, tools)
    assert settled.status == "completed"
    results = results_of(conv)
    first, second = results["d1"]["content"], results["p1"]["content"]
    assert len(first.encode()) <= 20 * 1024
    assert results["d1"]["full_size"] == len(big)
    assert f'read_tool_result(id="d1", offset={shown_chars})' in first
    shown = first.split("\n\n[Result truncated")[0]
    rest = second.split("\n\n[End of result")[0]
    assert shown + rest == big
    assert (conv.path / "results" / "d1.txt").read_text() == big


def test_stop_mid_stream_persists_the_partial_answer(store, conv, harness):
    harness.enqueue(Reply(text="abcdefghij" * 20, chunk=5, delay=0.02))
    stop = StopSignal()

    async def go():
        runtime = AgentRuntime(store)
        req = TurnRequest(
            session=session(),
            conversation=conv,
            model=harness.model,
            tools=ToolRegistry(),
            message="go",
            stop=stop,
        )
        seen = []
        async for event in runtime.run_turn(req):
            seen.append(event)
            if isinstance(event, TextDelta) and len(seen) > 4:
                stop.set("user pressed stop")
        return seen

    events = asyncio.run(go())
    settled = events[-1]
    assert isinstance(settled, TurnSettled)
    assert settled.status == "stopped"
    assert settled.reason == "user pressed stop"
    rows = conv.read_all()
    assistant = next(r for r in rows if r["role"] == "assistant")
    assert assistant["stopped"] is True
    partial = assistant["content"][0]["text"]
    assert 0 < len(partial) < 200
    assert ("abcdefghij" * 20).startswith(partial)
    assert rows[-1]["content"][0]["type"] == "stopped"


def test_stop_flag_from_outside_stops_a_running_tool(store, conv, harness):
    probe = Probe()
    tools = ToolRegistry.of([probe.tool("slow", delay=30)])
    flag = {"set": False}
    stop = StopSignal(poll=lambda: flag["set"], poll_interval=0.05)
    harness.enqueue(Reply(calls=(Call(name="slow", id="s1"),)))

    async def go():
        runtime = AgentRuntime(store)
        req = TurnRequest(
            session=session(), conversation=conv, model=harness.model, tools=tools, message="go", stop=stop
        )

        async def flip():
            await asyncio.sleep(0.3)
            flag["set"] = True

        flipper = asyncio.create_task(flip())
        settled = await asyncio.wait_for(runtime.run(req), timeout=10)
        await flipper
        return settled

    settled = asyncio.run(go())
    assert settled.status == "stopped"
    assert results_of(conv)["s1"]["outcome"] == "stopped"
    assert harness.request_count == 1


def test_spend_limit_refuses_before_the_model_call(store, conv, harness):
    store.usage.record(
        UsageEvent(
            ts=datetime.now(UTC),
            project_id="default",
            user_id="alice",
            agent_id="assistant",
            conversation_id="c-old",
            request_id="r-old",
            provider="scripted",
            model="demo",
            steps=1,
            cost_usd=2.0,
        )
    )
    limits = SpendLimits(by_user={"alice": SpendRule(amount_usd=2.0, period="day")})
    settled, _ = run_turn(store, conv, harness, session=session(spend_limits=limits))
    assert settled.status == "refused"
    assert "daily spend limit of $2.00" in settled.reason
    assert "by_user.alice" in settled.reason
    assert harness.request_count == 0
    assert conv.read_all()[-1]["content"][0]["type"] == "refused"


def test_spend_limit_counts_the_running_turn(store, conv, harness):
    probe = Probe()
    per_step = 100_000 * harness.prices.input / 1e6
    limits = SpendLimits(project_total=SpendRule(amount_usd=per_step * 1.5, period="month"))
    harness.enqueue(
        *[
            Reply(calls=(Call(name="lookup", id=f"t{i}"),), input_tokens=100_000, output_tokens=0)
            for i in range(2)
        ]
    )
    settled, _ = run_turn(store, conv, harness, probe.registry(), session=session(spend_limits=limits))
    assert settled.status == "refused"
    assert "the project's monthly spend limit" in settled.reason
    assert harness.request_count == 2


def test_rate_limit_refuses_when_the_wait_is_too_long(store, conv, harness):
    probe = Probe()
    harness.enqueue(*[Reply(calls=(Call(name="lookup", id=f"t{i}"),)) for i in range(2)])
    runtime = AgentRuntime(store, rate_limiter=RateLimiter(store.calls, max_wait=0.2))
    settled, _ = run_turn(
        store, conv, harness, probe.registry(), session=session(llm_rate_limit_rpm=2), runtime=runtime
    )
    assert settled.status == "refused"
    assert "2 model requests a minute" in settled.reason
    assert harness.request_count == 2


def test_rate_limit_waits_for_a_free_slot(store, conv, harness):
    # Two calls 59.7 s ago fill a 2-a-minute cap; the next call waits ~0.3 s, then runs.
    earlier = datetime.now(UTC) - timedelta(seconds=59.7)
    for _ in range(2):
        store.calls.record("default", "alice", earlier)
    harness.enqueue(Reply(text="after the wait"))
    runtime = AgentRuntime(store, rate_limiter=RateLimiter(store.calls, max_wait=5))
    settled, events = run_turn(store, conv, harness, session=session(llm_rate_limit_rpm=2), runtime=runtime)
    assert settled.status == "completed"
    waits = [e for e in events if e.type == "rate_limited"]
    assert waits
    assert all(0 < w.wait_seconds <= 0.5 and w.limit_rpm == 2 for w in waits)
    assert store.calls.count_since("default", "alice", earlier) == 3


@pytest.mark.parametrize("harness", ["scripted"], indirect=True)
def test_sentinel_session_is_refused(store, conv, harness):
    from neuralis_jupyter.contracts import SentinelIdentityError

    harness.enqueue(Reply(text="x"))
    with pytest.raises(SentinelIdentityError):
        run_turn(store, conv, harness, session=session(user_id="__system__"))
    assert conv.read_all() == []


@pytest.mark.parametrize("harness", ["scripted"], indirect=True)
def test_a_stop_request_in_the_store_stops_the_turn(store, harness):
    """What a server route does to a turn running in a kernel: write a stop request to the store."""
    from neuralis_jupyter.workbench import Workbench

    bench = Workbench(store=store)
    target = bench.target("alice")
    probe = Probe()
    tools = ToolRegistry.of([probe.tool("slow", delay=30)])
    harness.enqueue(Reply(calls=(Call(name="slow", id="s1"),)))

    async def go():
        stop = bench.stop_signal(target)
        req = TurnRequest(
            session=target.session,
            conversation=target.conversation,
            model=harness.model,
            tools=tools,
            message="go",
            stop=stop,
        )

        async def ask_to_stop():
            await asyncio.sleep(0.3)
            await asyncio.to_thread(
                store.stops.request,
                project_id="default",
                conversation_id=target.conversation.id,
                requested_by="bob",
                reason="from the server",
            )

        asker = asyncio.create_task(ask_to_stop())
        settled = await asyncio.wait_for(bench.runtime.run(req), timeout=10)
        await asker
        return settled

    settled = asyncio.run(go())
    assert settled.status == "stopped"
    assert results_of(target.conversation)["s1"]["outcome"] == "stopped"
    # A later turn is not stopped by that old request.
    harness.enqueue(Reply(text="fresh"))
    again, _ = run_turn(
        store, target.conversation, harness, session=target.session, stop=bench.stop_signal(target)
    )
    assert again.status == "completed"


@pytest.mark.parametrize("harness", ["scripted"], indirect=True)
def test_shadow_mode_captures_an_attested_read_that_sends_data_out(store, conv, harness):
    from neuralis_jupyter.contracts.envelope import EGRESS_EXTERNAL

    probe = Probe()
    tools = ToolRegistry.of(
        [
            probe.tool("lookup", attested=True),
            probe.tool("fetch", attested=True, effects=frozenset({EGRESS_EXTERNAL})),
        ]
    )
    harness.enqueue(Reply(calls=(Call(name="lookup", id="l"), Call(name="fetch", id="f"))), Reply(text="ok"))
    run_turn(store, conv, harness, tools, mode=SHADOW, permission=RecordingHook())
    results = results_of(conv)
    assert results["l"]["outcome"] == "ok"
    assert results["f"]["outcome"] == "shadow_denied"
    assert [n for n, _ in probe.calls] == ["lookup"]
