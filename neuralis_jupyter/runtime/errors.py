"""Runtime errors.

RuntimeError_ (``NeuralisRuntimeError``)
├── TurnRefused          the turn may not start or continue (a limit, a sentinel, bad input)
│   ├── SpendLimitExceeded   a spend limit is reached; checked BEFORE each model call
│   └── RateLimitExceeded    the per-minute model request cap held the call too long
└── TurnStopped          control flow: a stop was requested (never escapes run_turn)
"""

from __future__ import annotations

__all__ = ["NeuralisRuntimeError", "RateLimitExceeded", "SpendLimitExceeded", "TurnRefused", "TurnStopped"]


class NeuralisRuntimeError(Exception):
    code = "runtime_error"


class TurnRefused(NeuralisRuntimeError):
    code = "turn_refused"


class SpendLimitExceeded(TurnRefused):
    code = "spend_limit_exceeded"

    def __init__(self, limit: str, message: str) -> None:
        self.limit = limit
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.limit, str(self)))


class RateLimitExceeded(TurnRefused):
    code = "rate_limited"


class TurnStopped(NeuralisRuntimeError):
    code = "stopped"
