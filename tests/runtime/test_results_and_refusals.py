"""Tool results as the model reads them: paging a large result a ``limit`` at a time, a tool's own error
that is not the runtime's refusal, and the reports of background work in the next turn's history."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from neuralis_jupyter.contracts import refusals
from neuralis_jupyter.contracts.refusals import is_kernel_refusal
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, Tool, ToolOutput, ToolRegistry, TurnRequest
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID
from neuralis_jupyter.store import Store

from .harness import Harness
from .helpers import OBJ, Probe, session


@pytest.fixture(params=["scripted", "anthropic", "openai"])
def harness(request, fake_llm):
    return Harness(request.param, None if request.param == "scripted" else fake_llm)


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "home")


@pytest.fixture
def conv(store):
    return store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")


def run(store, conv, model, tools=None, *, message: str | None = "go"):
    req = TurnRequest(
        session=session(),
        conversation=conv,
        model=model,
        tools=tools if tools is not None else ToolRegistry(),
        message=message,
    )
    return asyncio.run(AgentRuntime(store).run(req))


def results_of(conv):
    return {b["tool_use_id"]: b for r in conv.read_all() if r["role"] == "tool" for b in r["content"]}


# -- paging with limit -----------------------------------------------------------------------------------


def test_a_large_result_pages_a_limit_at_a_time(store, conv, harness):
    big = "".join(f"row {i:05d} " + "y" * 30 + "\n" for i in range(700))  # ~28 KB of ASCII
    shown = 20 * 1024 - 400  # the preview keeps 400 bytes free for the paging note
    harness.enqueue(
        Reply(calls=(Call(name="dump", id="d1"),)),
        Reply(
            calls=(
                Call(name="read_tool_result", input={"id": "d1", "offset": shown, "limit": 1000}, id="p1"),
            )
        ),
        Reply(calls=(Call(name="read_tool_result", input={"id": "d1", "offset": shown + 1000}, id="p2"),)),
        Reply(text="read it all"),
    )
    settled = run(store, conv, harness.model, ToolRegistry.of([Probe().tool("dump", reply=big)]))
    assert settled.status == "completed"
    results = results_of(conv)
    page, rest = results["p1"]["content"], results["p2"]["content"]
    body, note = page.split("\n\n[Characters ")
    assert body == big[shown : shown + 1000]  # exactly limit characters
    assert note == (
        f'{shown:,}-{shown + 1000:,} of {len(big):,}. Continue with read_tool_result(id="d1", '
        f"offset={shown + 1000}).]"
    )
    assert rest.split("\n\n[End of result")[0] == big[shown + 1000 :]
    preview = results["d1"]["content"].split("\n\n[Result truncated")[0]
    assert preview + body + rest.split("\n\n[End of result")[0] == big
    harness.assert_complete()


# -- a tool's own error is not the runtime's refusal -------------------------------------------------------


def test_a_tools_own_error_text_is_not_a_kernel_refusal(store, conv):
    async def broken(args: dict[str, Any], ctx: Any) -> ToolOutput:
        raise ValueError("the CSV has no header row")

    async def wary(args: dict[str, Any], ctx: Any) -> ToolOutput:
        return ToolOutput(content="Error: the remote refused: 403 Forbidden", is_error=True, outcome="error")

    tools = ToolRegistry.of(
        [
            Tool(name=n, description=n, input_schema=OBJ, handler=h, access="read", package_id=AGENT_CORE_ID)
            for n, h in (("broken", broken), ("wary", wary))
        ]
    )
    model = ScriptedModel(
        [
            Reply(calls=(Call(name="broken", id="b"), Call(name="wary", id="w"))),
            Reply(text="Refused nothing."),
        ]
    )
    settled = run(store, conv, model, tools)
    results = results_of(conv)
    assert results["b"]["content"] == "Error: ValueError: the CSV has no header row"
    for block in results.values():
        assert (block["is_error"], block["outcome"]) == (True, "error")
        assert is_kernel_refusal(block["content"]) is False
    assert is_kernel_refusal(settled.text) is False  # ordinary model text, even one that starts "Refused"


@pytest.mark.parametrize(
    "text",
    [
        "Error: ValueError: boom",
        "error: Tool not available",
        "The tool was refused by the server.",
        "  Refused: leading space is not the runtime's wording",
        "Refused:no space",
        "",
        None,
        {"content": refusals.stopped("x")},
    ],
)
def test_is_kernel_refusal_is_false_for_anything_else(text):
    assert is_kernel_refusal(text) is False


@pytest.mark.parametrize(
    "text",
    [
        refusals.tool_not_available("x"),
        refusals.envelope_refusal("x", "it is forbidden"),
        refusals.consent_denied("x", "no"),
        refusals.shadow_denied("x"),
        refusals.stopped("x"),
        refusals.budget_refusal("x", "max_steps"),
        refusals.invalid_input("x", "q: required"),
    ],
)
def test_is_kernel_refusal_is_true_for_every_refusal_the_runtime_writes(text):
    assert is_kernel_refusal(text) is True


# -- background reports reach the next turn -----------------------------------------------------------------


def test_a_sub_agents_report_reaches_the_next_turns_history(store, conv):
    conv.append(
        {
            "role": "event",
            "content": [{"type": "delegate_report", "run_id": "d-1", "text": "The child found 3."}],
        }
    )
    model = ScriptedModel([Reply(text="noted")])
    assert run(store, conv, model, message=None).status == "completed"
    sent = json.dumps(model.requests[0].messages)
    assert "<delegate_report>\\nThe child found 3.\\n</delegate_report>" in sent
