"""One tool call through every gate, in order (seed 001).

1. the tool must be in the caller's catalog, else the generic ``Tool not available``;
2. the input must validate against the tool's JSON schema;
3. the envelope: :func:`authorize_tool_invocation`'s answer is used verbatim;
4. the policy's deny arms (blocklist, trust ceiling, capability, allowlist, feature gate);
5. shadow mode: only attested first-party plain reads (no egress, exec or destructive effect) and
   intrinsic tools run, the rest is captured;
6. consent: the permission hook for a write, or a read whose effects require consent;
7. cassette replay of a non-deterministic tool returns its recorded result; otherwise the handler runs.

A withheld call yields a tool_result whose ``is_error``/``outcome`` the runtime sets; its text is one
of the exported refusal constants. Whatever else fails on the way (a gate, the handler, bounding the
result) becomes the call's ``error`` result, never the turn's end; only a cancellation (a stop) and a
:class:`CassetteMismatch` (a replay that diverged) propagate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from ..contracts import refusals
from ..contracts.envelope import authorize_tool_invocation, effects_require_consent
from ..providers.base import ToolUseEvent
from ..providers.errors import CassetteMismatch
from .context import ToolContext
from .events import PermissionRequested, PermissionResolved, ShadowIntent, ToolCallFinished, ToolCallStarted
from .permission import DenyAll, PermissionRequest, needs_consent
from .results import BoundedResult
from .tools import Tool, ToolOutput

__all__ = ["run_tool_call"]

log = logging.getLogger(__name__)
_validators: dict[int, Any] = {}


def _validate(tool: Tool, value: Mapping[str, Any]) -> str | None:
    from .._jsonschema import jsonschema as _load

    jsonschema = _load()  # lazily and without its IRI grammar: see neuralis_jupyter._jsonschema

    validator = _validators.get(id(tool.input_schema))
    if validator is None:
        cls = jsonschema.validators.validator_for(tool.input_schema, default=jsonschema.Draft202012Validator)
        validator = cls(tool.input_schema)
        _validators[id(tool.input_schema)] = validator
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the input"
    return f"{where}: {error.message}"


def _refused(content: str, outcome: str) -> ToolOutput:
    return ToolOutput(content=content, is_error=True, outcome=outcome)  # type: ignore[arg-type]


async def _decide(call: ToolUseEvent, tool: Tool | None, ctx: ToolContext) -> ToolOutput | None:
    """A refusal, or ``None`` when the call may run."""
    req = ctx.request
    if tool is None:
        return _refused(refusals.tool_not_available(call.name), "unavailable")
    problem = _validate(tool, call.input)
    if problem is not None:
        return _refused(refusals.invalid_input(tool.name, problem), "invalid")
    auth = authorize_tool_invocation(tool.facts, req.envelope)
    if not auth.allowed:
        return _refused(refusals.envelope_refusal(tool.name, auth.reason or "it is outside scope"), "refused")
    if req.policy is not None:
        decision = await req.policy.check(tool=tool, input=call.input, session=ctx.session, step=ctx.step)
        if not decision.allowed:
            if decision.generic:
                return _refused(refusals.tool_not_available(call.name), "unavailable")
            return _refused(
                refusals.envelope_refusal(tool.name, decision.reason or "policy denies it"), "denied"
            )
    # A read that sends data out (or runs code, or destroys) is an effect too: shadow captures it.
    plain_read = tool.access == "read" and not effects_require_consent(tool.effects)
    if req.mode.kind == "shadow" and not (tool.intrinsic or (tool.attested and plain_read)):
        ctx.emit(ShadowIntent(tool_use_id=call.id, name=tool.name, input=call.input, access=tool.access))
        if req.policy is not None:
            await req.policy.record_shadow(tool=tool, input=call.input, session=ctx.session)
        await asyncio.to_thread(
            req.conversation.append,
            {
                "role": "event",
                "step": ctx.step,
                "content": [
                    {"type": "shadow_intent", "tool_use_id": call.id, "name": tool.name, "input": call.input}
                ],
            },
        )
        return _refused(refusals.shadow_denied(tool.name), "shadow_denied")
    if needs_consent(tool):
        hook = req.permission or DenyAll()
        preq = PermissionRequest.of(tool, call.input, ctx.session, step=ctx.step)
        ctx.emit(
            PermissionRequested(
                tool_use_id=call.id,
                name=tool.name,
                input=call.input,
                access=tool.access,
                effects=tuple(sorted(tool.effects)),
            )
        )
        answer = await hook(preq)
        ctx.emit(
            PermissionResolved(
                tool_use_id=call.id,
                name=tool.name,
                allowed=answer.allowed,
                reason=answer.reason,
                decided_by=answer.decided_by,
            )
        )
        if not answer.allowed:
            return _refused(refusals.consent_denied(tool.name, answer.reason), "denied")
    return None


async def _execute(call: ToolUseEvent, tool: Tool, ctx: ToolContext) -> ToolOutput:
    tape = ctx.request.tape
    if tape is not None and not tool.deterministic:
        recorded = tape.recorded_result(call.id)
        if recorded is not None:
            return ToolOutput(
                content=recorded.get("content", ""),
                is_error=bool(recorded.get("is_error")),
                outcome=recorded.get("outcome", "ok"),
            )
    try:
        out = await tool.handler(dict(call.input), ctx)
    except (asyncio.CancelledError, CassetteMismatch):  # a stop; a replayed sub-agent that diverged
        raise
    except Exception as exc:  # a tool's failure is the model's information, not the turn's end
        log.info("tool %s failed: %s", tool.name, exc, exc_info=True)
        return ToolOutput(content=f"Error: {type(exc).__name__}: {exc}", is_error=True, outcome="error")
    return out if isinstance(out, ToolOutput) else ToolOutput(content=str(out))


async def run_tool_call(call: ToolUseEvent, ctx: ToolContext) -> dict[str, Any]:
    """Run one call through the gates; return its tool_result block (already bounded)."""
    tool = ctx.request.tools.get(call.name)
    ctx.emit(
        ToolCallStarted(
            tool_use_id=call.id,
            name=call.name,
            input=call.input,
            access=tool.access if tool else None,
            step=ctx.step,
        )
    )
    started = time.monotonic()
    try:
        out = await _decide(call, tool, ctx)
        if out is None:
            assert tool is not None
            out = await _execute(call, tool, ctx)
        if ctx.results.fits(out.content):
            bounded = BoundedResult(content=out.content)  # nothing to offload: no file I/O, no thread hop
        else:
            bounded = await asyncio.to_thread(ctx.results.bound, call.id, out.content)
    except (asyncio.CancelledError, CassetteMismatch):
        raise
    except Exception as exc:  # a gate or the result store failed: the call's error, not the turn's end
        log.exception("tool call %s (%s) failed outside its handler", call.id, call.name)
        out = ToolOutput(content=f"Error: {type(exc).__name__}: {exc}", is_error=True, outcome="error")
        bounded = BoundedResult(content=out.content)
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": call.id,
        "name": call.name,
        "content": bounded.content,
        "is_error": out.is_error,
        "outcome": out.outcome,
    }
    if bounded.full_size is not None:
        block["full_size"] = bounded.full_size
    if ctx.request.tape is not None:
        ctx.request.tape.record_result(call.id, block)
    ctx.emit(
        ToolCallFinished(
            tool_use_id=call.id,
            name=call.name,
            content=bounded.content,
            is_error=out.is_error,
            outcome=out.outcome,
            full_size=bounded.full_size,
            data=out.data,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
    )
    return block
