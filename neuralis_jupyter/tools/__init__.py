"""The native tools of the builtin agent-core package, one module each.

:func:`native_handlers` builds every handler against one :class:`ToolEnvironment`; the host binds them to
``@neuralis/agent-core`` (the package ships the schemas in ``packages/agent-core/tools/*.json``).
"""

from __future__ import annotations

import importlib
from typing import Any

from .environment import Answerer, ToolEnvironment

__all__ = ["NATIVE_MODULES", "Answerer", "ToolEnvironment", "native_handlers"]

#: The modules whose ``handlers(env)`` together cover the agent-core tool schemas.
NATIVE_MODULES: tuple[str, ...] = (
    "execute",
    "delegate",
    "todos",
    "compact",
    "ask_question",
    "web_fetch",
    "web_search",
    "wait",
)


def native_handlers(env: ToolEnvironment) -> dict[str, Any]:
    """Every native tool's handler, by tool name (``read_tool_result`` is the runtime's own)."""
    from ..runtime.results import read_tool_result_tool

    handlers: dict[str, Any] = {"read_tool_result": read_tool_result_tool().handler}
    for name in NATIVE_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        handlers.update(module.handlers(env))
    return handlers
