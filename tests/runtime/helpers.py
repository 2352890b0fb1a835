"""Small shared pieces for runtime tests: a store, a session, tools with declared effects."""

from __future__ import annotations

import asyncio
from typing import Any

from neuralis_jupyter.contracts import SessionContext
from neuralis_jupyter.contracts.envelope import EGRESS_EXTERNAL
from neuralis_jupyter.runtime.permission import PermissionDecision, PermissionRequest
from neuralis_jupyter.runtime.tools import AGENT_CORE_ID, Tool, ToolOutput, ToolRegistry

OBJ: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}


def session(**extra: Any) -> SessionContext:
    base: dict[str, Any] = {
        "user_id": "alice",
        "project_id": "default",
        "agent_id": "assistant",
        "role": "owner",
        "priority": 0,
        "granted_features": ("*",),
        "agent_access": "*",
    }
    return SessionContext(**{**base, **extra})


class Probe:
    """Records every handler call; handlers may be slowed down to prove concurrency."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.running = 0
        self.max_running = 0

    def tool(
        self,
        name: str,
        *,
        access: str = "read",
        effects: frozenset[str] = frozenset(),
        reply: str | None = None,
        delay: float = 0.0,
        attested: bool = False,
        deterministic: bool = True,
        schema: dict[str, Any] | None = None,
        package_id: str = AGENT_CORE_ID,
    ) -> Tool:
        async def handler(args: dict[str, Any], ctx: Any) -> ToolOutput:
            self.calls.append((name, args))
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            try:
                if delay:
                    await asyncio.sleep(delay)
                return ToolOutput(content=reply if reply is not None else f"{name} ok {sorted(args.items())}")
            finally:
                self.running -= 1

        return Tool(
            name=name,
            description=f"the {name} tool",
            input_schema=schema or OBJ,
            handler=handler,
            access=access,  # type: ignore[arg-type]
            effects=effects,
            attested=attested,
            deterministic=deterministic,
            package_id=package_id,
        )

    def registry(self) -> ToolRegistry:
        return ToolRegistry.of(
            [
                self.tool("lookup", attested=True),
                self.tool("write_note", access="write"),
                self.tool("fetch_page", effects=frozenset({EGRESS_EXTERNAL})),
            ]
        )


class RecordingHook:
    """A permission hook that answers from a fixed decision and remembers what it was asked."""

    def __init__(self, allow: bool = True) -> None:
        self.allow = allow
        self.requests: list[PermissionRequest] = []

    async def __call__(self, request: PermissionRequest) -> PermissionDecision:
        self.requests.append(request)
        return PermissionDecision(
            allowed=self.allow, reason=None if self.allow else "the user said no", decided_by="test"
        )
