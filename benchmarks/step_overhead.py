"""Per-step overhead of the agent loop: our runtime against openai-agents, pydantic-ai and a raw loop.

Usage::

    python benchmarks/step_overhead.py [--steps N] [--repeats R] [--warmup W] [--stat median|best]

The peers are benchmark-only dependencies (``pip install '.[bench]'``); a peer that does not import is
reported as not installed and skipped.

Method
------
One :class:`~neuralis_jupyter.testing.fake_llm.FakeLLMServer` runs in a child process (so that its
request parsing and SSE rendering do not share the measured process's GIL, as a real model server
would not) and answers ``POST /v1/chat/completions`` with ``stream: true``. Every runner plays the same
scripted conversation of N model calls ("steps"): each of the first N-1 responses calls one tool,
``lookup(q)`` (a local function returning a short string), and the last answers with text. The script
entry is a function of the request: it counts the ``role: tool`` messages already in it, so every
runner gets the same responses whatever its own bookkeeping. After each run the server is asked how
many requests it saw; a runner that made anything but N streamed requests fails the benchmark.

The runners, all on the OpenAI chat-completions wire and the same SDK (``openai.AsyncOpenAI``):

* **raw loop**: a hand-written ``while`` loop on one shared client: ``chat.completions.create(
  stream=True)``, accumulate the deltas, run the tool, append the messages. No persistence, no
  events: the floor that the HTTP round trips and the SDK's own parsing set.
* **neuralis**: ``AgentRuntime.run`` with ``OpenAIModel`` on a fresh store in a temp directory; every
  row goes to the conversation's JSONL file and usage to SQLite each step, as in production. (As
  shipped, ``OpenAIModel`` builds its own SDK client per model call; it cannot be handed the shared one.)
* **openai-agents**: ``Runner.run_streamed`` with ``OpenAIChatCompletionsModel`` on the shared client,
  tracing disabled, the stream drained.
* **pydantic-ai**: ``Agent.run`` with ``OpenAIChatModel`` on an ``OpenAIProvider`` wrapping the shared
  client, with an ``event_stream_handler`` so that its model requests stream too.

Each runner is warmed up, then the runners take turns (round robin, to spread any drift) for R timed
runs; a runner's time is the median of its runs (``--stat best``: the fastest; noise only ever adds
time, so best-of-R is steadier on a busy machine, the median closer to what a user sees). One
conversation per run; setup (the agent, the store, a new conversation) is outside the timed region.

Reading the numbers
-------------------
``per-step`` is a runner's wall time for one N-step run (median, or best) divided by N. The raw loop's
per-step time is the floor: the fake server's round trip plus the SDK's own work (building the request,
whose parameter transform grows with the history, and parsing the stream), so every per-step time grows
with N. ``overhead vs raw`` is a runner's per-step time minus the raw loop's: what its agent machinery
adds to each step. Two goals from issue 3 are printed: ``neuralis / raw loop`` (per-step wall times;
goal <= 1.2x), and ``<= 0.5x the fastest peer``, read as the ratio of per-step overhead above the raw
loop (ours over the fastest peer's). The ratio of per-step wall times to the fastest peer is printed
too; it is dominated by the shared floor and cannot reach 0.5x unless a peer is more than twice as slow
as the raw loop, so the overhead ratio is the meaningful one. ``min..max`` shows the spread of the runs.
Absolute numbers depend on the machine; compare ratios from one invocation.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

MODEL = "gpt-4.1-mini"
API_KEY = "sk-bench-not-a-key"
SYSTEM = "You are a helpful research assistant working inside a Jupyter notebook."
PROMPT = "Look up the items one by one, then summarise."
LOOKUP_DESCRIPTION = "Look up one item by its key."
LOOKUP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"q": {"type": "string", "description": "The key to look up."}},
    "required": ["q"],
    "additionalProperties": False,
}
#: Fixed token counts keep the server from estimating them from every (growing) request body.
TOKENS = {"input_tokens": 200, "output_tokens": 20}
INSTALL_HINT = "not installed (pip install '.[bench]')"


def lookup(q: str) -> str:
    """The one tool: trivial, local, the same for every runner."""
    return f"{q}: 42 (source: bench table)"


# -- the fake server, in a child process ---------------------------------------------------------


def _serve(conn: Connection, steps: int) -> None:
    """The child process: a FakeLLMServer driven over ``conn`` (``arm`` n / ``check`` / ``stop``)."""
    from neuralis_jupyter.providers.scripted import Call, Reply
    from neuralis_jupyter.testing.fake_llm import FakeLLMServer, RecordedRequest

    def answer(request: RecordedRequest) -> Reply:
        done = sum(1 for m in request.body.get("messages", ()) if m.get("role") == "tool")
        if done < steps - 1:
            return Reply(calls=(Call(name="lookup", input={"q": f"item-{done + 1}"}),), **TOKENS)
        return Reply(text=f"All {done} items were found; each is 42.", **TOKENS)

    with FakeLLMServer() as server:
        conn.send(server.openai_base_url)
        first = 0
        while True:
            command, *args = conn.recv()
            if command == "arm":
                first = len(server.requests)
                server.enqueue(*[answer] * args[0])
                conn.send(None)
            elif command == "check":
                seen = server.requests[first:]
                conn.send(
                    {
                        "requests": len(seen),
                        "unstreamed": sum(not r.stream for r in seen),
                        "remaining": server.remaining,
                        "errors": list(server.errors),
                    }
                )
            else:
                conn.send(None)
                return


class ServerProcess:
    """The parent's handle on the child's fake server."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, steps), name="fake-llm", daemon=True)
        self._process.start()
        self.base_url: str = self._conn.recv()

    def arm(self) -> None:
        """Queue the N answers of one conversation."""
        self._conn.send(("arm", self.steps))
        self._conn.recv()

    def check(self, runner: str) -> None:
        """Fail unless the last conversation was exactly N streamed requests, none unanswered."""
        self._conn.send(("check",))
        got = self._conn.recv()
        problems = []
        if got["requests"] != self.steps:
            problems.append(f"made {got['requests']} model requests, not {self.steps}")
        if got["unstreamed"]:
            problems.append(f"made {got['unstreamed']} requests without stream: true")
        if got["remaining"]:
            problems.append(f"left {got['remaining']} scripted answers unused")
        if got["errors"]:
            problems.append("the fake server saw errors: " + "; ".join(got["errors"]))
        if problems:
            raise AssertionError(f"{runner}: " + ", ".join(problems))

    def close(self) -> None:
        with suppress(OSError, EOFError):  # the child may be gone already; do not hide the first error
            self._conn.send(("stop",))
            self._conn.recv()
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.terminate()


# -- the runners ---------------------------------------------------------------------------------


@dataclass
class Runner:
    name: str
    #: One N-step conversation, from the user's message to the final text.
    run: Callable[[], Awaitable[str]]
    #: Untimed preparation before each run (a new conversation, say).
    prepare: Callable[[], None] = lambda: None
    times: list[float] = field(default_factory=list)


def _expected_text(steps: int) -> str:
    return f"All {steps - 1} items were found; each is 42."


def raw_loop(client: Any) -> Runner:
    tools = [
        {
            "type": "function",
            "function": {"name": "lookup", "description": LOOKUP_DESCRIPTION, "parameters": LOOKUP_SCHEMA},
        }
    ]

    async def run() -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
        ]
        while True:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=messages,
                tools=tools,
                stream=True,
                stream_options={"include_usage": True},
            )
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            async with stream:
                async for chunk in stream:
                    for choice in chunk.choices:
                        delta = choice.delta
                        if delta.content:
                            text.append(delta.content)
                        for part in delta.tool_calls or ():
                            call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": []})
                            call["id"] = call["id"] or part.id or ""
                            if part.function is not None:
                                call["name"] = call["name"] or part.function.name or ""
                                call["arguments"].append(part.function.arguments or "")
            if not calls:
                return "".join(text)
            wire_calls = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": "".join(c["arguments"])},
                }
                for _, c in sorted(calls.items())
            ]
            messages.append({"role": "assistant", "content": "".join(text) or None, "tool_calls": wire_calls})
            for c in wire_calls:
                result = lookup(**json.loads(c["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})

    return Runner("raw loop", run)


def neuralis(base_url: str, home: Path, steps: int) -> Runner:
    from neuralis_jupyter.contracts import SessionContext
    from neuralis_jupyter.providers.openai import OpenAIModel
    from neuralis_jupyter.runtime import AgentRuntime, StaticPrompt, Tool, ToolRegistry, TurnRequest
    from neuralis_jupyter.store import Store

    store = Store.open(home)
    runtime = AgentRuntime(store, max_steps=max(50, steps))
    model = OpenAIModel(MODEL, api_key=API_KEY, base_url=base_url, max_retries=0)
    session = SessionContext(
        user_id="alice",
        project_id="default",
        agent_id="assistant",
        role="owner",
        priority=0,
        granted_features=("*",),
        agent_access="*",
    )

    async def handler(args: dict[str, Any], ctx: Any) -> str:
        return lookup(**args)

    tools = ToolRegistry.of(
        [
            Tool(
                name="lookup",
                description=LOOKUP_DESCRIPTION,
                input_schema=LOOKUP_SCHEMA,
                handler=handler,
                access="read",
                attested=True,
                package_id="benchmark",
            )
        ]
    )
    conversation: list[Any] = []

    def prepare() -> None:
        # Every run is a new conversation; creating it is not part of a turn.
        conversation[:] = [
            store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
        ]

    async def run() -> str:
        request = TurnRequest(
            session=session,
            conversation=conversation[0],
            model=model,
            tools=tools,
            message=PROMPT,
            prompt=StaticPrompt(text=SYSTEM),  # the same instructions every runner sends
        )
        settled = await runtime.run(request)
        if settled.status != "completed" or settled.steps != steps:
            raise AssertionError(f"neuralis: the turn settled {settled.status} after {settled.steps} steps")
        return settled.text

    return Runner("neuralis", run, prepare)


def openai_agents(client: Any, steps: int) -> Runner:
    from agents import Agent, function_tool, set_tracing_disabled
    from agents import Runner as AgentsRunner
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel

    set_tracing_disabled(True)

    @function_tool(name_override="lookup", description_override=LOOKUP_DESCRIPTION)
    def lookup_tool(q: str) -> str:
        return lookup(q)

    agent = Agent(
        name="bench",
        instructions=SYSTEM,
        model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        tools=[lookup_tool],
    )

    async def run() -> str:
        result = AgentsRunner.run_streamed(agent, input=PROMPT, max_turns=steps + 1)
        async for _ in result.stream_events():
            pass
        return str(result.final_output)

    return Runner("openai-agents", run)


def pydantic_ai(client: Any, steps: int) -> Runner:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    agent = Agent(
        OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client)),
        instructions=SYSTEM,
    )

    @agent.tool_plain(name="lookup", description=LOOKUP_DESCRIPTION)
    def lookup_tool(q: str) -> str:
        return lookup(q)

    async def drain(ctx: Any, events: Any) -> None:
        async for _ in events:
            pass

    limits = UsageLimits(request_limit=steps + 1)

    async def run() -> str:
        result = await agent.run(PROMPT, event_stream_handler=drain, usage_limits=limits)
        return str(result.output)

    return Runner("pydantic-ai", run)


# -- measuring and reporting ---------------------------------------------------------------------


async def _timed(runner: Runner, server: ServerProcess, expected: str) -> float:
    runner.prepare()
    server.arm()
    gc.collect()
    started = time.perf_counter()
    text = await runner.run()
    elapsed = time.perf_counter() - started
    server.check(runner.name)
    if text != expected:
        raise AssertionError(f"{runner.name}: the final answer was {text!r}, not {expected!r}")
    return elapsed


async def measure(
    args: argparse.Namespace, server: ServerProcess, home: Path
) -> tuple[list[Runner], dict[str, str]]:
    import openai

    skipped: dict[str, str] = {}
    async with openai.AsyncOpenAI(api_key=API_KEY, base_url=server.base_url, max_retries=0) as client:
        runners = [raw_loop(client), neuralis(server.base_url, home, args.steps)]
        for name, build in (("openai-agents", openai_agents), ("pydantic-ai", pydantic_ai)):
            try:
                runners.append(build(client, args.steps))
            except ImportError as exc:
                skipped[name] = f"{INSTALL_HINT}; missing {exc.name or exc}"
        expected = _expected_text(args.steps)
        for runner in runners:
            for _ in range(args.warmup):
                await _timed(runner, server, expected)
        for _ in range(args.repeats):
            for runner in runners:
                runner.times.append(await _timed(runner, server, expected))
    return runners, skipped


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for dist in ("openai", "openai-agents", "pydantic-ai-slim"):
        with suppress(PackageNotFoundError):
            found.append(f"{dist} {version(dist)}")
    return ", ".join(found)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def report(runners: list[Runner], skipped: dict[str, str], args: argparse.Namespace) -> None:
    n = args.steps
    pick = statistics.median if args.stat == "median" else min
    per_step = {r.name: pick(r.times) / n for r in runners}
    spread = {r.name: (min(r.times) / n, max(r.times) / n) for r in runners}
    raw = per_step["raw loop"]
    ours = per_step["neuralis"]
    calls = f"{n - 1} tool call{'s' * (n != 2)}"
    print(
        f"{n} steps per conversation ({calls}, then text), "
        f"{args.stat} of {args.repeats} runs after {args.warmup} warm-up"
    )
    print(f"python {sys.version.split()[0]}; {_versions()}")
    print()
    print(f"  {'runner':<15} {'per-step':>10} {'overhead vs raw':>16}   {'min..max per-step':>20}")
    for r in runners:
        over = "—" if r.name == "raw loop" else f"{(per_step[r.name] - raw) * 1000:+.2f} ms"
        low, high = spread[r.name]
        print(
            f"  {r.name:<15} {_ms(per_step[r.name]):>10} {over:>16}   "
            f"{low * 1000:>8.2f}..{high * 1000:.2f} ms"
        )
    for name, why in skipped.items():
        print(f"  {name:<15} {why}")
    print()
    width = 50
    print("  neuralis / raw loop:".ljust(width) + f"{ours / raw:.2f}x (goal <= 1.2x)  [per-step wall times]")
    peers = {name: t for name, t in per_step.items() if name not in ("raw loop", "neuralis")}
    if not peers:
        print("  neuralis / fastest peer:".ljust(width) + "n/a (no peer installed)")
        return
    fastest = min(peers, key=peers.__getitem__)
    print(
        f"  neuralis / fastest peer ({fastest}):".ljust(width)
        + f"{ours / peers[fastest]:.2f}x  [per-step wall times]"
    )
    ours_over, peer_over = ours - raw, peers[fastest] - raw
    ratio = f"{ours_over / peer_over:.2f}x" if peer_over > 0 else "n/a (the peer adds nothing)"
    print(
        f"  neuralis overhead / {fastest} overhead:".ljust(width)
        + f"{ratio} (goal <= 0.5x)  [{ours_over * 1000:+.2f} ms vs {peer_over * 1000:+.2f} ms per step]"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="model calls per conversation (>= 2)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per runner")
    parser.add_argument(
        "--stat", choices=("median", "best"), default="median", help="which of a runner's runs counts"
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per runner first")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.repeats < 1 or args.warmup < 0:
        parser.error("--steps must be >= 2, --repeats >= 1, --warmup >= 0")
    server = ServerProcess(args.steps)
    try:
        with tempfile.TemporaryDirectory(prefix="neuralis-bench-") as tmp:
            runners, skipped = asyncio.run(measure(args, server, Path(tmp) / "home"))
    finally:
        server.close()
    report(runners, skipped, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
