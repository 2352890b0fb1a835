"""pandas views over the store: usage events, transcripts and spend, typed for analysis.

Frames are built here and nowhere else; the stores hand out plain values. Importing this module costs
nothing: pandas, NumPy and the store load on the first call, because a kernel imports it at start.

``usage()`` reads one SELECT straight from the DBAPI cursor and converts each column with one
vectorised NumPy/pandas call (microsecond ints to ``datetime64[us, UTC]``, ids to the nullable
``string`` dtype). SQLAlchemy's ``Row`` objects are skipped on purpose: at a million rows they cost
about a third of the read, and these columns need no result processing.

``transcript()`` yields one row per content block, so a tool call and its result line up as rows
with the same ``tool_use_id``. ``spend()`` groups ``usage()`` by id columns and a calendar period.
Every frame carries ``attrs["pricing_basis"]``: costs are catalog-price estimates, not invoices.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .providers.catalog import PRICING_BASIS

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.engine import Engine

    from .store import Store
    from .store.conversations import Conversation

__all__ = ["PRICING_BASIS", "SPEND_BY", "spend", "transcript", "usage"]


#: Columns ``spend(by=...)`` may group on.
SPEND_BY: tuple[str, ...] = (
    "project_id",
    "user_id",
    "agent_id",
    "conversation_id",
    "request_id",
    "provider",
    "model",
)
_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_INT_COLUMNS = frozenset({*_TOKENS, "steps", "duration_ms"})
_FLOAT_COLUMNS = frozenset({"cost_usd", "equivalent_cost_usd"})
_TRANSCRIPT_STRINGS = ("role", "kind", "text", "tool_name", "tool_use_id")
_TRANSCRIPT_COLUMNS = ("seq", "ts", *_TRANSCRIPT_STRINGS, "is_error", "outcome")
Instant = datetime | date | str
Period = Literal["day", "week", "month"]


def usage(
    project: str | None = None,
    user: str | None = None,
    agent: str | None = None,
    conversation: str | None = None,
    since: Instant | None = None,
    until: Instant | None = None,
    *,
    store: Store | Engine | str | None = None,
) -> pd.DataFrame:
    """One row per usage event with ``since <= ts < until``, oldest first.

    ``since``/``until`` take an aware datetime, a date (midnight UTC) or an ISO string; a naive
    datetime is refused. ``store`` is a :class:`Store`, an Engine or a URL (default: the configured
    store).
    """
    import numpy as np
    import pandas as pd

    from .store.usage import USAGE_COLUMNS, select_usage

    stmt = select_usage(
        project,
        user_id=user,
        agent_id=agent,
        conversation_id=conversation,
        since=_instant(since, "since"),
        until=_instant(until, "until"),
    )
    with _engine(store).connect() as conn:
        result = conn.execute(stmt)
        try:
            rows = result.cursor.fetchall()
        finally:
            result.close()
    # One 2-D object array, then one typed conversion per column: no per-row Python work after fetch.
    table = np.array(rows, dtype=object) if rows else np.empty((0, len(USAGE_COLUMNS)), object)
    columns: dict[str, Any] = {}
    for i, name in enumerate(USAGE_COLUMNS):
        values = table[:, i]
        if name == "ts":
            columns[name] = pd.to_datetime(values.astype(np.int64), unit="us", utc=True)
        elif name in _INT_COLUMNS:
            columns[name] = values.astype(np.int64)
        elif name in _FLOAT_COLUMNS:
            columns[name] = values.astype(np.float64)  # NULL becomes NaN
        else:
            columns[name] = pd.array(values, dtype=pd.StringDtype())
    frame = pd.DataFrame(columns, copy=False)
    frame.attrs["pricing_basis"] = PRICING_BASIS
    return frame


def spend(
    by: str | Sequence[str] = ("model",),
    period: Period = "day",
    *,
    project: str | None = None,
    since: Instant | None = None,
    until: Instant | None = None,
    store: Store | Engine | str | None = None,
) -> pd.DataFrame:
    """USD and tokens summed per ``by`` columns and calendar ``period`` (UTC; weeks start Monday).

    Columns: the ``by`` columns, ``period``, ``cost_usd``, the four token counts and ``events``.
    Events whose ``by`` value is missing (no agent, say) form their own group rather than vanish.
    """
    import numpy as np
    import pandas as pd

    keys = list(dict.fromkeys([by] if isinstance(by, str) else by))
    bad = [k for k in keys if k not in SPEND_BY]
    if bad:
        raise ValueError(f"cannot group spend by {bad!r}; valid names: {', '.join(SPEND_BY)}")
    if period not in ("day", "week", "month"):
        raise ValueError(f"period must be 'day', 'week' or 'month', got {period!r}")
    frame = usage(project, since=since, until=until, store=store)
    # Floor in NumPy calendar units on the naive UTC values: exact, vectorised, no tz arithmetic.
    naive = frame["ts"].dt.tz_localize(None).to_numpy()
    if period == "month":
        floored = naive.astype("datetime64[M]")
    else:
        floored = naive.astype("datetime64[D]")
        if period == "week":
            days = floored.astype(np.int64)
            floored = (days - (days + 3) % 7).astype("datetime64[D]")  # 1970-01-01 was a Thursday
    frame["period"] = pd.DatetimeIndex(floored.astype("datetime64[us]")).tz_localize(UTC)
    sums = {name: (name, "sum") for name in ("cost_usd", *_TOKENS)}
    out = (
        frame.groupby([*keys, "period"], dropna=False, sort=True)
        .agg(**sums, events=("cost_usd", "size"))
        .reset_index()
    )
    out.attrs["pricing_basis"] = PRICING_BASIS
    return out


def transcript(
    conversation_id: str,
    project: str | None = None,
    agent: str | None = None,
    *,
    store: Store | None = None,
) -> pd.DataFrame:
    """One row per content block of a conversation's transcript, in seq order (seq repeats).

    ``project`` defaults to ``"default"``; without ``agent`` every agent of the project is searched.
    An unknown conversation raises :class:`neuralis_jupyter.store.NotFound`.
    """
    import numpy as np
    import pandas as pd

    found = _find_conversation(_store(store), conversation_id, project or "default", agent)
    cols: dict[str, list[Any]] = {name: [] for name in _TRANSCRIPT_COLUMNS}
    for row in found.read_all():
        content: Any = row.get("content")
        if isinstance(content, str):  # the API's shorthand for one text block
            content = [{"type": "text", "text": content}]
        for block in content or ():
            if isinstance(block, Mapping):
                for name, value in _block_fields(row, block).items():
                    cols[name].append(value)
    frame = pd.DataFrame(
        {
            "seq": np.asarray(cols["seq"], dtype=np.int64),
            "ts": pd.to_datetime(cols["ts"], utc=True, format="ISO8601").as_unit("us"),
            **{name: pd.array(cols[name], dtype=pd.StringDtype()) for name in _TRANSCRIPT_STRINGS},
            "is_error": pd.array(cols["is_error"], dtype="boolean"),
            "outcome": pd.array(cols["outcome"], dtype=pd.StringDtype()),
        }
    )
    return frame


def _block_fields(row: Mapping[str, Any], block: Mapping[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    tool_use_id = None
    is_error = None
    if kind == "tool_use":
        text = json.dumps(block.get("input"), ensure_ascii=False, separators=(",", ":"))
        tool_use_id = block.get("id")
    elif kind == "tool_result":
        text = _result_text(block.get("content"))
        tool_use_id = block.get("tool_use_id")
        is_error = bool(block.get("is_error", False))
    else:
        text = block.get("text")
    return {
        "seq": row["seq"],
        "ts": row["ts"],
        "role": row.get("role"),
        "kind": kind,
        "text": text,
        "tool_name": block.get("name"),
        "tool_use_id": tool_use_id,
        "is_error": is_error,
        "outcome": block.get("outcome"),
    }


def _result_text(content: object) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"))


def _find_conversation(store: Store, conversation_id: str, project: str, agent: str | None) -> Conversation:
    from .store.errors import InvalidId, NotFound

    conversations = store.conversations
    if agent is not None:
        return conversations.find(project_id=project, agent_id=agent, conversation_id=conversation_id)
    agents_dir = store.data_root.project_dir(project) / "agents"
    candidates: list[Path] = sorted(agents_dir.iterdir()) if agents_dir.is_dir() else []
    for agent_dir in candidates:
        try:
            return conversations.find(
                project_id=project, agent_id=agent_dir.name, conversation_id=conversation_id
            )
        except (NotFound, InvalidId):  # not this agent's, or not an agent directory at all
            continue
    raise NotFound("conversation", conversation_id)


def _store(store: Store | None) -> Store:
    from .store import Store

    if store is None:
        from .config import load_settings

        return Store(load_settings())
    if not isinstance(store, Store):
        raise TypeError(f"store must be a Store, got {type(store).__name__}")
    return store


def _engine(store: Store | Engine | str | None) -> Engine:
    from sqlalchemy.engine import Engine

    from .store import Store
    from .store.migrations import migrate
    from .store.sql import open_engine

    if store is None or isinstance(store, Store):
        return _store(store).engine
    engine = open_engine(store) if isinstance(store, str) else store
    if not isinstance(engine, Engine):
        raise TypeError(f"store must be a Store, an Engine or a URL, got {type(store).__name__}")
    migrate(engine)
    return engine


def _instant(value: Instant | None, name: str) -> datetime | None:
    """An aware datetime from a datetime, a date (midnight UTC) or an ISO 8601 string."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = date.fromisoformat(value) if len(value) == 10 else datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not an ISO 8601 date or datetime") from None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                f"{name}={value.isoformat()!r} is naive; give a timezone "
                "(e.g. '2026-11-29T10:00+00:00' or datetime(..., tzinfo=UTC))"
            )
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    raise TypeError(f"{name} must be a datetime, date or ISO string, got {type(value).__name__}")
