"""``neuralis chat``: one headless turn from the terminal.

Text streams to stdout as it arrives (``--json``: one event per line). A summary goes to stderr. Exit
status: 0 completed, 3 suspended (a budget ran out), 2 refused or bad input, 1 any other failure
(including a stop). Ctrl-C stops the turn cleanly; the partial answer is kept.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

__all__ = ["register"]

EXIT = {"completed": 0, "suspended": 3, "refused": 2, "failed": 1, "stopped": 1}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chat", help="send one message to an agent and stream its answer")
    p.add_argument("message", help="the message; '-' reads it from stdin")
    p.add_argument("--project", help="project id (default: the default project)")
    p.add_argument("--agent", help="agent id (default: the project's default agent)")
    p.add_argument("--conversation", help="continue this conversation instead of starting one")
    p.add_argument("--model", metavar="PROVIDER:MODEL", help="e.g. anthropic:claude-sonnet-4-6")
    p.add_argument(
        "--guard",
        choices=("safe", "balanced", "auto"),
        help="guard profile for this turn (default: the project's, else balanced); nobody can approve "
        "anything in a headless turn, so a call that would ask is refused",
    )
    p.add_argument("--json", action="store_true", help="print every event as one JSON line")
    p.set_defaults(func=run)


def _fail(message: str, code: int = 2) -> int:
    print(f"neuralis chat: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    from ..providers.errors import ProviderError
    from ..store import StoreError
    from ..store.projects import local_user_id
    from ..workbench import Workbench

    message = sys.stdin.read() if args.message == "-" else args.message
    if not message.strip():
        return _fail("the message is empty")
    try:
        bench = Workbench()
        target = bench.target(
            local_user_id(), project_id=args.project, agent_id=args.agent, conversation_id=args.conversation
        )
        model = bench.model(target, args.model)
    except (ProviderError, StoreError, ValueError) as exc:
        return _fail(str(exc))
    return asyncio.run(_turn(bench, target, model, message, as_json=args.json, guard=args.guard))


async def _turn(
    bench: Any, target: Any, model: Any, message: str, *, as_json: bool, guard: str | None
) -> int:
    from ..policy import LiveGuard
    from ..runtime import TurnSettled, event_to_json
    from ..runtime.events import TextDelta

    stop = bench.stop_signal(target)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set, "interrupted")
    settled: TurnSettled | None = None
    live = LiveGuard(bench.guard_profile(target, guard))
    try:
        # No approver: a headless turn refuses what would ask, naming the guard profile.
        async with bench.turn(target, message, model=model, guard=live, stop=stop) as request:
            async for event in bench.runtime.run_turn(request):
                if as_json:
                    print(json.dumps(event_to_json(event), default=str), flush=True)
                elif isinstance(event, TextDelta):
                    print(event.text, end="", flush=True)
                if isinstance(event, TurnSettled):
                    settled = event
        # A background shell or sub-agent reports back and continues the conversation: a headless
        # command stays until they have, so their work is not lost when the process ends.
        if not await bench.drain_background(0):
            print("neuralis chat: waiting for background work to report back (Ctrl-C stops)", file=sys.stderr)
            await bench.drain_background(bench.settings.background_wait)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        await bench.aclose()
    assert settled is not None
    if not as_json:
        if settled.text:
            print()
        print(_summary(settled, target), file=sys.stderr)
    return EXIT[settled.status]


def _summary(settled: Any, target: Any) -> str:
    parts = [settled.status, f"{settled.steps} step{'s' if settled.steps != 1 else ''}"]
    parts.append(f"{settled.input_tokens:,} in / {settled.output_tokens:,} out tokens")
    parts.append(f"${settled.cost_usd:.4f}")
    parts.append(f"conversation {target.conversation.id}")
    line = "[" + " · ".join(parts) + "]\n" + settled.pricing_basis
    if settled.reason:
        line += f"\n{settled.status}: {settled.reason}"
    return line
