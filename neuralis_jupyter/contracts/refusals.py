"""The runtime's own refusal wording (seed 001, item 8).

A withheld call is not a successful one: downstream evidence comes from the tool_result's ``is_error``
and ``outcome``, and where a transcript carries no attribution, :func:`is_kernel_refusal` matches these
exported texts instead of guessing from an "Error" prefix. The runtime owns the wording; both ends
move together.
"""

from __future__ import annotations

__all__ = [
    "REFUSAL_PREFIXES",
    "budget_refusal",
    "consent_denied",
    "envelope_refusal",
    "invalid_input",
    "is_kernel_refusal",
    "shadow_denied",
    "stopped",
    "tool_not_available",
]

_NOT_AVAILABLE = "Tool not available: "
_REFUSED = "Refused: "
_NOT_RUN = "Not run: "
_INVALID = "Invalid input for "

#: Every refusal the runtime writes into a tool_result starts with one of these.
REFUSAL_PREFIXES: tuple[str, ...] = (_NOT_AVAILABLE, _REFUSED, _NOT_RUN, _INVALID)


def tool_not_available(name: str) -> str:
    """The generic answer for a hidden, gated or invented tool: it never says which."""
    return f"{_NOT_AVAILABLE}{name}"


def envelope_refusal(name: str, reason: str) -> str:
    return f"{_REFUSED}{name} was not run because {reason}."


def consent_denied(name: str, why: str | None = None) -> str:
    suffix = f": {why}" if why else ""
    return f"{_REFUSED}permission to run {name} was denied{suffix}."


def shadow_denied(name: str) -> str:
    return f"{_NOT_RUN}{name} was captured as an intent; this run is in shadow mode and performs no effects."


def stopped(name: str) -> str:
    return f"{_NOT_RUN}{name} was not run because the turn was stopped."


def budget_refusal(name: str, budget: str) -> str:
    return f"{_NOT_RUN}{name} was not run because the run's {budget} budget is exhausted."


def invalid_input(name: str, error: str) -> str:
    return f"{_INVALID}{name}: {error}. Fix the arguments to match the tool's schema and call it again."


def is_kernel_refusal(text: object) -> bool:
    return isinstance(text, str) and text.startswith(REFUSAL_PREFIXES)
