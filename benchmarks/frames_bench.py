"""Benchmark: frames.usage() against pd.read_sql, and conversation tail reads at two sizes.

Not a test. Run it directly::

    python benchmarks/frames_bench.py            # 1,000,000 usage rows; 100,000 / 1,000 transcript rows
    python benchmarks/frames_bench.py --usage-rows 100000

Each figure is the best of several timed runs after one warm-up, measured against a peer in the same
run, so the ratios hold on any machine:

- ``frames.usage()`` builds a typed frame (tz-aware ``ts``, string ids) from the same SELECT that
  ``pd.read_sql`` runs untyped. Goal: at most 1.5x the time of ``pd.read_sql``.
- ``Conversation.read_since(last_seq - 10)`` on a 100,000-row conversation against the same tail read
  on a 1,000-row one: the offset index makes a tail read independent of length. Goal: at most 2x.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from neuralis_jupyter import frames
from neuralis_jupyter.store import Store
from neuralis_jupyter.store.migrations import to_micros
from neuralis_jupyter.store.sql import dispose_engines
from neuralis_jupyter.store.usage import USAGE_COLUMNS, select_usage

USAGE_GOAL = 1.5
TAIL_GOAL = 2.0


def best_of(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up: page cache, pool connection, imports
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def fill_usage(store: Store, rows: int) -> None:
    """``rows`` usage events over ~90 days, written with one executemany in one transaction."""
    rnd = random.Random(7)
    start = to_micros(datetime(2026, 9, 1, tzinfo=UTC))
    step = 90 * 24 * 3600 * 1_000_000 // rows
    models = [("anthropic", "claude-x"), ("anthropic", "claude-y"), ("openai", "gpt-z")]
    data = []
    for i in range(rows):
        provider, model = models[i % 3]
        data.append(
            (
                start + i * step + rnd.randrange(step),
                f"project-{i % 4}",
                f"user-{i % 25}",
                None if i % 10 == 0 else f"agent-{i % 40}",
                f"c-{i % 20_000:016x}",
                f"req-{i // 2:08d}",
                provider,
                model,
                rnd.randrange(200_000),
                rnd.randrange(8_000),
                rnd.randrange(100_000),
                rnd.randrange(10_000),
                1 + i % 6,
                rnd.random() * 0.5,
                None if model != "gpt-z" else rnd.random(),
                rnd.randrange(60_000),
            )
        )
    columns = ", ".join(USAGE_COLUMNS)
    marks = ", ".join("?" * len(USAGE_COLUMNS))
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO usage_events ({columns}) VALUES ({marks})", data)


def fill_conversation(store: Store, conversation_id: str, rows: int, batch: int = 5_000) -> Any:
    conv = store.conversations.create(
        project_id="bench", agent_id="agent", user_id="alice", conversation_id=conversation_id
    )
    for first in range(0, rows, batch):
        conv.append_many(transcript_row(i) for i in range(first, min(first + batch, rows)))
    return conv


def transcript_row(i: int) -> dict[str, Any]:
    if i % 3 == 0:
        text = f"question {i} " * 8
        return {"role": "user", "content": [{"type": "text", "text": text}], "user_id": "alice"}
    if i % 3 == 1:
        return {
            "role": "assistant",
            "model": "claude-x",
            "step": 1,
            "content": [
                {"type": "text", "text": f"answer {i} " * 12},
                {"type": "tool_use", "id": f"toolu_{i}", "name": "python", "input": {"code": f"{i} + 1"}},
            ],
        }
    return {
        "role": "tool",
        "step": 1,
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": f"toolu_{i - 1}",
                "name": "python",
                "content": str(i),
                "is_error": False,
                "outcome": "ok",
            }
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--usage-rows", type=int, default=1_000_000)
    parser.add_argument("--long-rows", type=int, default=100_000)
    parser.add_argument("--short-rows", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each usage read")
    parser.add_argument("--tail-repeats", type=int, default=500, help="timed runs of each tail read")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="neuralis-bench-") as tmp:
        store = Store.open(Path(tmp))
        try:
            start = time.perf_counter()
            fill_usage(store, args.usage_rows)
            print(f"filled {args.usage_rows:,} usage rows in {time.perf_counter() - start:.1f} s")
            stmt = select_usage()
            t_frames = best_of(lambda: frames.usage(store=store), args.repeats)
            t_sql = best_of(lambda: pd.read_sql(stmt, store.engine), args.repeats)
            print(
                f"usage(): {t_frames:.2f} s  read_sql: {t_sql:.2f} s  "
                f"ratio {t_frames / t_sql:.2f}x (goal <= {USAGE_GOAL}x)"
            )

            start = time.perf_counter()
            long = fill_conversation(store, "c-long", args.long_rows)
            short = fill_conversation(store, "c-short", args.short_rows)
            print(
                f"wrote conversations of {args.long_rows:,} and {args.short_rows:,} rows "
                f"in {time.perf_counter() - start:.1f} s"
            )
            long_from, short_from = long.last_seq() - 10, short.last_seq() - 10
            assert len(long.read_since(long_from)) == len(short.read_since(short_from)) == 11
            t_long = best_of(lambda: long.read_since(long_from), args.tail_repeats)
            t_short = best_of(lambda: short.read_since(short_from), args.tail_repeats)
            print(
                f"read_since(last_seq - 10): {args.long_rows:,} rows: {t_long * 1e3:.3f} ms  "
                f"{args.short_rows:,} rows: {t_short * 1e3:.3f} ms  "
                f"ratio {t_long / t_short:.2f}x (goal <= {TAIL_GOAL}x)"
            )
        finally:
            dispose_engines()


if __name__ == "__main__":
    main()
