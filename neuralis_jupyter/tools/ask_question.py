"""``ask_question``: pause the turn and ask the user.

The turn blocks until the host's :class:`~neuralis_jupyter.tools.environment.Answerer` (a widget in the
kernel, a route on the server) returns, within ``AskSettings.timeout``. A headless run has nobody to
ask: it takes the question's declared ``default`` and says so, or ends the call with a clear refusal so
the model decides itself and states its assumption.
"""

from __future__ import annotations

import asyncio
from typing import Any

from traitlets import Float, TraitError, validate
from traitlets.config import Configurable

from ..runtime import ToolContext, ToolOutput
from .environment import ToolEnvironment, turn_answerer

__all__ = ["AskSettings", "handlers"]


class AskSettings(Configurable):
    timeout = Float(
        900.0, help="Seconds a question waits for its answer before the call ends unanswered."
    ).tag(config=True)

    @validate("timeout")
    def _positive(self, proposal: dict[str, Any]) -> float:
        if proposal["value"] <= 0:
            raise TraitError(f"timeout must be positive, got {proposal['value']!r}")
        return proposal["value"]


def _defaults(args: dict[str, Any]) -> list[str]:
    value = args.get("default")
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _labels(args: dict[str, Any], ids: list[str]) -> str:
    by_id = {o["id"]: o["label"] for o in args.get("options") or ()}
    return ", ".join(f"{i} ({by_id[i]})" if i in by_id else repr(i) for i in ids)


def _check(args: dict[str, Any]) -> str | None:
    options = args.get("options") or []
    ids = [o["id"] for o in options]
    if len(set(ids)) != len(ids):
        return "option ids must be unique"
    unknown = [d for d in _defaults(args) if options and d not in ids]
    if unknown:
        return f"default names no option: {', '.join(unknown)}"
    if len(_defaults(args)) > 1 and not args.get("multiple"):
        return "several defaults need multiple: true"
    return None


def handlers(env: ToolEnvironment) -> dict[str, Any]:
    settings = AskSettings(config=env.config)

    async def ask_question(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        problem = _check(args)
        if problem:
            return ToolOutput(content=f"Invalid question: {problem}.", is_error=True, outcome="invalid")
        defaults = _defaults(args)
        answerer = turn_answerer(env)
        if answerer is None:
            if defaults:
                return ToolOutput(
                    content=(
                        f"Nobody can answer in this headless run; the question's default was taken: "
                        f"{_labels(args, defaults)}."
                    ),
                    data={"answer": defaults, "answered_by": "default"},
                )
            return ToolOutput(
                content=(
                    "Refused: nobody can answer questions in this headless run. Decide yourself, say "
                    "which assumption you made, or give the question a default."
                ),
                is_error=True,
                outcome="refused",
            )
        try:
            answer = await asyncio.wait_for(
                answerer.ask(
                    question=args["question"],
                    options=list(args.get("options") or []),
                    multiple=bool(args.get("multiple")),
                    tool_use_id=ctx.session.tool_use_id or "",
                ),
                timeout=settings.timeout,
            )
        except TimeoutError:
            answer = None
        if not answer:
            if defaults:
                return ToolOutput(
                    content=f"No answer came in time; the default was taken: {_labels(args, defaults)}.",
                    data={"answer": defaults, "answered_by": "default"},
                )
            return ToolOutput(
                content="No answer came in time. Decide yourself and say which assumption you made.",
                is_error=True,
                outcome="error",
            )
        if args.get("options"):
            return ToolOutput(
                content=f"The user chose: {_labels(args, answer)}.",
                data={"answer": answer, "answered_by": "user"},
            )
        return ToolOutput(
            content=f"The user answered: {answer[0]}", data={"answer": answer, "answered_by": "user"}
        )

    return {"ask_question": ask_question}
