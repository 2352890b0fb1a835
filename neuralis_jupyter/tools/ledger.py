"""The session ledger: a conversation's goal, loop bound, todo list and archived cycles (seed 003).

On disk it is ``meta.json["session_ledger"]``, typed by the TypedDicts below (JSON, not values)::

    {"goal": {"text", "done": [{"text", "met"}], "loop": {"until"?, "maxSteps"?},
              "set_by": "agent" | "user" | "workflow", "locked", "evolve"?} | null,
     "todos": [{"id", "content", "status"}], "name": str | null,
     "history": [{"version", "name", "goal", "todos", "outcome", "closed_at", "counts"}]}

A cycle is what is open: the goal and the todo list. A goal is free to set once per cycle, then LOCKED
for the agent: its text and conditions stay, ``until`` stays once set, ``maxSteps`` only goes down. The
one exception is a self-evolving run (``evolve: "agent"``, authored by the user or a workflow), where the
agent may rewrite or clear the goal but still cannot loosen the loop bound. ``locked`` on disk is the
derived flag the prompt shows. Closing a cycle archives it as one versioned entry (``v1``, ``v2`` ...; the
oldest dropped beyond the bound) and empties it.

Every function here is pure: it takes a ledger and returns a new one, or raises :class:`Refused` having
changed nothing. Persistence, the tool and the prompt section live in :mod:`.todos`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict, cast

__all__ = [
    "ArchiveEntry",
    "Condition",
    "Counts",
    "Evolve",
    "Goal",
    "Loop",
    "Outcome",
    "Refused",
    "SessionLedger",
    "SetBy",
    "Status",
    "Todo",
    "archive",
    "archived_line",
    "close",
    "complete",
    "is_open",
    "ledger_from",
    "mark",
    "new_goal",
    "plan",
    "render_session",
]

Status = Literal["pending", "in_progress", "completed", "cancelled"]
SetBy = Literal["agent", "user", "workflow"]
Outcome = Literal["achieved", "cleared"]
Evolve = Literal["agent"]

_MARKS: dict[str, str] = {"pending": " ", "in_progress": "~", "completed": "x", "cancelled": "-"}


class Condition(TypedDict):
    text: str
    met: bool


class Loop(TypedDict, total=False):
    until: str
    maxSteps: int


class Goal(TypedDict):
    text: str
    done: list[Condition]
    loop: Loop
    set_by: SetBy
    locked: bool
    evolve: NotRequired[Evolve]


class Todo(TypedDict):
    id: str
    content: str
    status: Status


class Counts(TypedDict):
    met: int
    conditions: int
    completed: int
    todos: int


class ArchiveEntry(TypedDict):
    version: int
    name: str | None
    goal: Goal | None
    todos: list[Todo]
    outcome: Outcome
    closed_at: str
    counts: Counts


class SessionLedger(TypedDict):
    goal: Goal | None
    todos: list[Todo]
    name: str | None
    history: list[ArchiveEntry]


class Refused(Exception):
    """A step the ledger refuses; nothing of that step was applied. The message is for the model."""


def ledger_from(value: Mapping[str, Any] | None) -> SessionLedger:
    """A ledger from ``meta.json``'s section (missing keys filled), as a private copy."""
    value = copy.deepcopy(dict(value or {}))
    return {
        "goal": value.get("goal"),
        "todos": list(value.get("todos") or []),
        "name": value.get("name"),
        "history": list(value.get("history") or []),
    }


def is_open(ledger: SessionLedger) -> bool:
    return ledger["goal"] is not None or bool(ledger["todos"])


def new_goal(
    text: str, done: list[str], loop: Loop | None, *, set_by: SetBy, evolve: Evolve | None = None
) -> Goal:
    goal: Goal = {
        "text": text,
        "done": [{"text": t, "met": False} for t in done],
        "loop": cast(Loop, dict(loop or {})),
        "set_by": set_by,
        "locked": evolve != "agent",
    }
    if evolve is not None:
        goal["evolve"] = evolve
    return goal


def _quote(goal: Goal) -> str:
    return f'"{goal["text"]}"'


def _lock_refusal(goal: Goal) -> Refused:
    if goal["set_by"] == "agent":
        how = (
            "mark its conditions met, or close the cycle and plan the next in one call "
            '({"close": "cleared", "plan": {...}})'
        )
        return Refused(f"the goal {_quote(goal)} is locked for this cycle; {how}")
    return Refused(
        f"the goal {_quote(goal)} was set by the {goal['set_by']} and is locked; you can mark its "
        "conditions met and achieve it, the user changes the rest"
    )


def _check_loop(goal: Goal, loop: Mapping[str, Any]) -> None:
    current = goal["loop"]
    until = loop.get("until")
    if until is not None and "until" in current and until != current["until"]:
        raise Refused(f'until is locked once set (it is "{current["until"]}")')
    steps = loop.get("maxSteps")
    if steps is not None and "maxSteps" in current and steps > current["maxSteps"]:
        raise Refused(f"maxSteps can only be lowered (it is {current['maxSteps']}, {steps} was asked)")


def plan(ledger: SessionLedger, args: Mapping[str, Any]) -> tuple[SessionLedger, str]:
    """Apply a ``plan``: name and todos freely; goal, done and loop under the lock. Returns the new
    ledger and what landed, in words."""
    todos = args.get("todos")
    if todos is not None:
        ids = [t["id"] for t in todos]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise Refused(f"todo ids must be unique ({', '.join(dupes)} repeat)")
    out = ledger_from(ledger)
    goal = out["goal"]
    text, done, loop = args.get("goal"), args.get("done"), args.get("loop")
    landed: list[str] = []
    if goal is None and (text is not None or done is not None or loop is not None):
        if text is None:
            raise Refused("done and loop belong to a goal, and none is open; send goal with them")
        out["goal"] = new_goal(text, list(done or []), loop, set_by="agent")
        landed.append("goal set")
    elif goal is not None:
        rewrite = (text is not None and text != goal["text"]) or (
            done is not None and list(done) != [c["text"] for c in goal["done"]]
        )
        if rewrite and goal["locked"]:
            raise _lock_refusal(goal)
        _check_loop(goal, loop or {})
        if rewrite:  # a self-evolving run: conditions that stay keep their state
            met = {c["text"]: c["met"] for c in goal["done"]}
            goal["text"] = text if text is not None else goal["text"]
            if done is not None:
                goal["done"] = [{"text": t, "met": met.get(t, False)} for t in done]
            landed.append("goal rewritten")
        if loop:
            goal["loop"] = cast(Loop, {**goal["loop"], **loop})
            landed.append("loop " + _loop_words(goal["loop"]))
    if args.get("name") is not None:
        out["name"] = args["name"]
        landed.append(f'name "{args["name"]}"')
    if todos is not None:
        out["todos"] = [{"id": t["id"], "content": t["content"], "status": t["status"]} for t in todos]
        landed.append(f"{len(todos)} todo(s)")
    return out, "plan (" + (", ".join(landed) or "no change") + ")"


def _match(goal: Goal | None, item: int | str) -> int | None:
    if goal is None:
        return None
    if isinstance(item, int):
        return item - 1 if 1 <= item <= len(goal["done"]) else None
    return next((i for i, c in enumerate(goal["done"]) if c["text"] == item), None)


def mark(ledger: SessionLedger, args: Mapping[str, Any]) -> tuple[SessionLedger, str]:
    """Apply a ``mark``, all or nothing: every met item must match a condition (by 1-based number or
    exact text) and every todo id must exist, or nothing of it is applied."""
    out = ledger_from(ledger)
    goal = out["goal"]
    met: list[int | str] = list(args.get("met") or [])
    changes: list[Mapping[str, Any]] = list(args.get("todos") or [])
    by_id = {t["id"]: t for t in out["todos"]}
    failed = [f"no condition {item!r}" for item in met if _match(goal, item) is None]
    failed += [f"no todo {c['id']!r}" for c in changes if c["id"] not in by_id]
    if failed:
        if goal is None:
            known = "no goal is open"
        else:
            known = "conditions: " + " · ".join(f"{i}. {c['text']}" for i, c in enumerate(goal["done"], 1))
        ids = ", ".join(by_id) or "none"
        raise Refused(f"{'; '.join(failed)} ({known}; todo ids: {ids}); nothing of it was applied")
    landed: list[str] = []
    indexes = sorted({i for item in met if (i := _match(goal, item)) is not None})
    if goal is not None and indexes:
        for i in indexes:
            goal["done"][i]["met"] = True
        landed.append("condition(s) " + ", ".join(str(i + 1) for i in indexes) + " met")
    for change in changes:
        by_id[change["id"]]["status"] = change["status"]
        landed.append(f"todo {change['id']} {change['status']}")
    return out, "mark (" + (", ".join(landed) or "no change") + ")"


def complete(ledger: SessionLedger) -> bool:
    """Whether the open cycle is done by itself: every condition met, or (no conditions) every todo
    completed (cancelled ones aside, at least one completed)."""
    goal = ledger["goal"]
    if goal is not None and goal["done"]:
        return all(c["met"] for c in goal["done"])
    statuses = [t["status"] for t in ledger["todos"]]
    return "completed" in statuses and all(s in ("completed", "cancelled") for s in statuses)


def archive(
    ledger: SessionLedger, outcome: Outcome, *, closed_at: str, max_entries: int
) -> tuple[SessionLedger, ArchiveEntry]:
    """Archive the open cycle as the next version and empty it; keep the newest ``max_entries``."""
    out = ledger_from(ledger)
    goal, todos = out["goal"], out["todos"]
    conditions = goal["done"] if goal is not None else []
    entry: ArchiveEntry = {
        "version": out["history"][-1]["version"] + 1 if out["history"] else 1,
        "name": out["name"],
        "goal": goal,
        "todos": todos,
        "outcome": outcome,
        "closed_at": closed_at,
        "counts": {
            "met": sum(c["met"] for c in conditions),
            "conditions": len(conditions),
            "completed": sum(t["status"] == "completed" for t in todos),
            "todos": len(todos),
        },
    }
    out["history"] = [*out["history"], entry][-max_entries:]
    out["goal"], out["todos"], out["name"] = None, [], None
    return out, entry


def close(
    ledger: SessionLedger, outcome: Outcome, *, by: SetBy, closed_at: str, max_entries: int
) -> tuple[SessionLedger, ArchiveEntry | None]:
    """Close the open cycle as ``outcome`` on behalf of ``by``; ``None`` when nothing is open.

    The agent achieves a goal only when every condition is met (or it has none), and clears only a goal
    it set itself, unless the run is self-evolving. The user may do either at any time.
    """
    if not is_open(ledger):
        return ledger, None
    goal = ledger["goal"]
    if by == "agent" and goal is not None:
        unmet = [f"{i}. {c['text']}" for i, c in enumerate(goal["done"], 1) if not c["met"]]
        if outcome == "achieved" and unmet:
            raise Refused(
                f"{len(unmet)} condition(s) of {_quote(goal)} unmet "
                f"({' · '.join(unmet)}); mark them met first"
            )
        if outcome == "cleared" and goal["set_by"] != "agent" and goal.get("evolve") != "agent":
            raise Refused(
                f"the goal {_quote(goal)} was set by the {goal['set_by']}; you can "
                "achieve it, never clear it (only the user can, in Goal & loop)"
            )
    return archive(ledger, outcome, closed_at=closed_at, max_entries=max_entries)


# -- rendering -------------------------------------------------------------------------------------------


def _loop_words(loop: Loop) -> str:
    words = []
    if "until" in loop:
        words.append(f"until {loop['until']}")
    if "maxSteps" in loop:
        words.append(f"maxSteps {loop['maxSteps']}")
    return " · ".join(words)


def archived_line(entry: ArchiveEntry) -> str:
    """``Archived: v3 "…" achieved (3/3 · 5/5 todos)``; the condition part only when there were any."""
    counts = entry["counts"]
    title = entry["goal"]["text"] if entry["goal"] else entry["name"] or "todo list"
    parts = [f"{counts['completed']}/{counts['todos']} todos"]
    if counts["conditions"]:
        parts.insert(0, f"{counts['met']}/{counts['conditions']}")
    return f'Archived: v{entry["version"]} "{title}" {entry["outcome"]} ({" · ".join(parts)})'


def render_session(ledger: SessionLedger) -> str:
    """The ledger's lines in the per-step ``<session>`` block, and in the todos tool's answer.

    Step-independent on purpose, so the tool's answer and the prompt show the same text; the
    ``Steps: <step>/<max>`` line is the prompt's own.
    """
    lines: list[str] = []
    goal = ledger["goal"]
    if goal is not None:
        marker = ""
        if goal["set_by"] != "agent":
            marker = f" [set by {goal['set_by']}{' — locked' if goal['locked'] else ''}]"
        lines.append(f"Goal: {goal['text']}{marker}")
        lines += [f"- [{'x' if c['met'] else ' '}] {i}. {c['text']}" for i, c in enumerate(goal["done"], 1)]
        if goal["loop"]:
            lines.append("Loop: " + _loop_words(goal["loop"]))
    if ledger["todos"] or ledger["name"]:
        lines.append(f"Plan: {ledger['name']}" if ledger["name"] else "Todos:")
        lines += [f"- [{_MARKS[t['status']]}] {t['id']}: {t['content']}" for t in ledger["todos"]]
    if ledger["history"]:
        lines.append(archived_line(ledger["history"][-1]))
    return "\n".join(lines)
