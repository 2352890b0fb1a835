"""Small pieces both provider converters share."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .errors import ModelCallFailed

__all__ = ["parse_tool_input", "plain"]


def parse_tool_input(
    provider: str, name: str, raw: str, *, initial: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON object a streamed tool call's argument fragments add up to.

    No fragments means no arguments (``{}``), or the block's initial input when the provider sent one
    whole. Anything but a JSON object fails the call: a truncated object usually means the response
    hit ``max_tokens`` in the middle of the arguments, and running a tool on half its input is worse.
    """
    if not raw.strip():
        return dict(initial or {})
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ModelCallFailed(
            provider,
            f"the arguments of tool call {name!r} are not valid JSON ({exc.msg} at {exc.pos}); "
            f"the response may have hit max_tokens: {raw[:200]!r}",
        ) from None
    if not isinstance(value, dict):
        raise ModelCallFailed(
            provider, f"the arguments of tool call {name!r} are not a JSON object: {raw[:200]!r}"
        )
    return value


def plain(value: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` as plain JSON data, so SDK serialisers never see our Mapping subclasses.

    A plain ``dict`` is returned as it is (the SDKs do not mutate request bodies); only other
    mappings are copied.
    """
    if type(value) is dict:
        return value
    return json.loads(json.dumps(value, default=_mapping))


def _mapping(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON data")
