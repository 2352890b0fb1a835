"""One usage row with every column set, for the store tests on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

from neuralis_jupyter.store.usage import UsageEvent

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def usage_event(**overrides: object) -> UsageEvent:
    values: dict[str, object] = {
        "ts": T0,
        "project_id": "p",
        "user_id": "alice",
        "agent_id": "a1",
        "conversation_id": "c-1",
        "request_id": "r1",
        "provider": "anthropic",
        "model": "claude-x",
        "input_tokens": 1200,
        "output_tokens": 300,
        "cache_read_tokens": 50,
        "cache_write_tokens": 7,
        "steps": 2,
        "cost_usd": 0.0125,
        "equivalent_cost_usd": None,
        "duration_ms": 1800,
    }
    return UsageEvent(**{**values, **overrides})  # type: ignore[arg-type]
