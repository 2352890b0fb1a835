"""System prompt assembly: order, placeholders, byte-stability across the steps of a turn."""

from __future__ import annotations

import asyncio

from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.store import Store
from neuralis_jupyter.workbench import Workbench


def bench_for(tmp_path):
    return Workbench(store=Store.open(tmp_path / "home"))


def test_order_identity_instructions_rules_overview(tmp_path):
    bench = bench_for(tmp_path)
    target = bench.target("alice")
    identity = bench.store.data_root.agent_dir("default", target.agent.id) / "identity"
    (identity / "notes.md").write_text("EXTRA-NOTES")
    (identity / "aaa.md").write_text("EXTRA-AAA")

    async def build():
        async with bench.turn(target, "hi", model=ScriptedModel()) as request:
            return request.prompt.static(request.session), await request.prompt.dynamic(
                request.session, step=2, max_steps=7
            )

    static, dynamic = asyncio.run(build())
    marks = [
        "**Assistant** (agent `assistant`)",  # SOUL.md
        "# Who you work with",  # USER.md
        "# Heartbeat",  # HEARTBEAT.md
        "EXTRA-AAA",  # other identity files, alphabetical
        "EXTRA-NOTES",
        "\n# Instructions\n",
        "# Working inside Neuralis",  # instructions/neuralis-kernel.md
        "\n# Rules\n",
        "\n<packages>\n",
    ]
    positions = [static.index(m) for m in marks]
    assert positions == sorted(positions)
    assert "You are agent `assistant` in project `default`" in static  # runtime placeholders filled
    assert "{{agentId}}" not in static
    assert "{{projectId}}" not in static
    assert "- general:" in static  # the base agents are listed for delegation
    assert dynamic.startswith("<session>\nGuard: balanced")
    assert dynamic.endswith("Steps: 2/7\n</session>")


def test_static_prompt_is_byte_stable_across_steps(tmp_path):
    bench = bench_for(tmp_path)
    target = bench.target("alice")
    model = ScriptedModel(
        [
            Reply(calls=(Call(name="read_tool_result", input={"id": "none"}),)),
            Reply(calls=(Call(name="read_tool_result", input={"id": "none"}),)),
            Reply(text="done"),
        ]
    )

    async def run():
        async with bench.turn(target, "go", model=model) as request:
            return await bench.runtime.run(request)

    settled = asyncio.run(run())
    assert settled.status == "completed"
    systems = [r.system for r in model.requests]
    assert len(systems) == 3
    assert systems[0] == systems[1] == systems[2]
    assert systems[0].encode() == systems[2].encode()
    dynamics = [r.system_dynamic for r in model.requests]
    assert [d.rsplit("Steps: ", 1)[1].split("/")[0] for d in dynamics] == ["1", "2", "3"]


def test_guard_flip_shows_in_the_next_step(tmp_path):
    from neuralis_jupyter.policy import LiveGuard

    bench = bench_for(tmp_path)
    target = bench.target("alice")
    live = LiveGuard("safe")

    def flip(request):
        live.set("auto")
        return Reply(calls=(Call(name="read_tool_result", input={"id": "x"}),))

    model = ScriptedModel([flip, Reply(text="ok")])

    async def run():
        async with bench.turn(target, "go", model=model, guard=live) as request:
            return await bench.runtime.run(request)

    asyncio.run(run())
    assert model.requests[0].system_dynamic.startswith("<session>\nGuard: safe")
    assert model.requests[1].system_dynamic.startswith("<session>\nGuard: auto")
