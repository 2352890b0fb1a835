"""``wait``: let background work report back before the turn goes on (seed 001, item 2).

A background job is a shell started with ``execute(background=true)`` or a sub-agent run started with
``delegate(background=true)``. It has ended once its report row is in the conversation: the
``background_report`` row a shell writes (``shell_id``), or the ``delegate_report`` row of a sub-agent
run (``run_id``). ``wait`` watches the conversation for that row and returns the report itself, because
a row that arrives while a turn runs otherwise reaches the model only in the next turn's history.

Which jobs are the caller's: a shell when the shell manager (``env.services["shells"]``) lists it for
the caller's session, which means the same project, user, agent and conversation; a sub-agent run when
its transcript lives under the caller's conversation (``delegates/<run_id>/``). A run that the
background registry (``env.services["delegates"]``) holds but whose transcript is not there yet is still
starting; a run whose transcript never appears there is answered like an id that does not exist.

``for`` names one job. Without it, ``wait`` returns when the first of the caller's running jobs reports,
and at once when none is running. A timeout is not an error: the job is still running and its report
still comes. Like every tool call, the wait is cancelled when the turn is stopped. ``seconds`` must be
a finite number above 0 (a JSON parser may hand over NaN, which would never time out).

A sub-agent run takes a turn for each message to its inbox and reports again, each report stamped with
its turn number. A run that is working (a turn runs, or waits for a free slot) owes the report of the
turn the registry names (:meth:`~neuralis_jupyter.runtime.inbox.BackgroundDelegates.working`) when the
wait begins: only that report or a later one ends the wait, never the report of an earlier turn. A
run that is not working answers with its latest report.

A report the wait hands to the model is marked in :class:`SeenReports` (``env.services["seen_reports"]``):
the follow-up turn that report would start in this conversation is then skipped, since the turn that
waited has already read it.
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..runtime import ToolContext, ToolOutput
from ..store.conversations import Conversation
from .environment import ToolEnvironment

__all__ = ["DEFAULT_SECONDS", "MAX_SECONDS", "POLL_INTERVAL", "SeenReports", "handlers"]

DEFAULT_SECONDS = 30.0
MAX_SECONDS = 300.0
#: Seconds between two looks at the conversation. A look reads only the rows appended since the last
#: one, in a worker thread, so it stays cheap however long the conversation is.
POLL_INTERVAL = 0.25

#: Report row types and the key that names the job each reports on.
_REPORT_KEYS = {"background_report": "shell_id", "delegate_report": "run_id"}

JobState = Literal["reported", "running", "starting", "gone", "unknown"]


class SeenReports:
    """The reports a ``wait`` has handed to the model, per conversation and job: the sub-agent run's
    turn numbers whose report it returned (a shell reports once: turn 0). Exactly those: a wait that
    returned turn 2 has not shown turn 1, whose follow-up is still owed. In process memory, like the
    background jobs themselves, and bounded: the oldest jobs are forgotten first."""

    def __init__(self, limit: int = 10_000) -> None:
        self._seen: OrderedDict[tuple[str, str], set[int]] = OrderedDict()
        self._limit = limit

    def mark(self, conversation_id: str, job: str, turn: int = 0) -> None:
        key = (conversation_id, job)
        self._seen.setdefault(key, set()).add(turn)
        self._seen.move_to_end(key)
        while len(self._seen) > self._limit:
            self._seen.popitem(last=False)

    def seen(self, conversation_id: str, job: str, turn: int = 0) -> bool:
        """Whether a wait in the conversation handed over this very report of ``job``."""
        return turn in self._seen.get((conversation_id, job), ())


@dataclass(frozen=True, kw_only=True)
class _Report:
    text: str
    #: The sub-agent run's turn the report is for; 0 for a shell.
    turn: int


@dataclass(kw_only=True)
class _Reports:
    """The latest report row of each job of one conversation, read incrementally."""

    conversation: Conversation
    found: dict[str, _Report] = field(default_factory=dict)
    _next_seq: int = 0

    async def refresh(self) -> None:
        rows = await asyncio.to_thread(self.conversation.read_since, self._next_seq)
        for row in rows:
            self._next_seq = max(self._next_seq, row["seq"] + 1)
            if row.get("role") != "event":
                continue
            for block in row.get("content", []):
                key = _REPORT_KEYS.get(block.get("type", ""))
                if key is not None and isinstance(block.get(key), str):
                    turn = block.get("turn")
                    self.found[block[key]] = _Report(
                        text=str(block.get("text", "")), turn=turn if isinstance(turn, int) else 0
                    )

    def has(self, job: str, owed: int | None) -> bool:
        """Whether the report ``owed`` (a turn number; ``None``: any) or a later one is in."""
        report = self.found.get(job)
        return report is not None and (owed is None or report.turn >= owed)


@dataclass(frozen=True, kw_only=True)
class _Jobs:
    """The caller's view of the process's background registries."""

    services: Mapping[str, Any]
    ctx: ToolContext

    def shells(self) -> set[str]:
        shells = self.services.get("shells")
        return set() if shells is None else {m["shellId"] for m in shells.list(self.ctx.session)}

    def working_runs(self) -> dict[str, int]:
        """The runs working in this process, each with the turn whose report it owes."""
        runs = self.services.get("delegates")
        return {} if runs is None else runs.working()

    def run_dirs(self, run_ids: Iterable[str]) -> set[str]:
        """The run ids whose transcript lives under the caller's conversation. Blocking."""
        base = self.ctx.request.conversation.path / "delegates"
        return {r for r in run_ids if r and "/" not in r and r not in (".", "..") and (base / r).is_dir()}

    async def state(self, job: str, reports: _Reports, owed: int | None) -> JobState:
        # Registries first, reports after: a report written before a job left its registry is then
        # always seen, so "gone" never hides a report that was on its way.
        shell = job in self.shells()
        live = job in self.working_runs()
        mine = not shell and bool(await asyncio.to_thread(self.run_dirs, [job]))
        await reports.refresh()
        if reports.has(job, owed):
            return "reported"
        if shell or (mine and live):
            return "running"
        if live:
            return "starting"
        return "gone" if mine else "unknown"

    async def running(self, reports: _Reports) -> dict[str, int | None]:
        """The caller's jobs that have not reported yet, each with the report it owes."""
        working = self.working_runs()
        mine = await asyncio.to_thread(self.run_dirs, working)
        jobs: dict[str, int | None] = {s: None for s in sorted(self.shells())}
        jobs.update({r: working[r] for r in sorted(mine)})
        await reports.refresh()
        return {j: owed for j, owed in jobs.items() if not reports.has(j, owed)}


def _reported(jobs: list[str], reports: _Reports, ctx: ToolContext, seen: SeenReports) -> ToolOutput:
    for job in jobs:
        seen.mark(ctx.request.conversation.id, job, reports.found[job].turn)
    parts = [f"{job} has ended. Its report:\n{reports.found[job].text}" for job in jobs]
    return ToolOutput(content="\n\n".join(parts), data={"jobs": {job: "ended" for job in jobs}})


def _still_running(jobs: Iterable[str], seconds: float) -> ToolOutput:
    names = ", ".join(jobs)
    return ToolOutput(
        content=(
            f"Still running after {seconds:g} s: {names}. The report arrives in this conversation when "
            "the job ends; wait again or carry on with other work."
        ),
        data={"jobs": {job: "running" for job in jobs}},
    )


def _unknown(job: str) -> ToolOutput:
    return ToolOutput(
        content=(
            f"No background job {job!r} of yours is known in this conversation. Give a shell id from "
            "execute(background=true) or a run id from delegate(background=true)."
        ),
        is_error=True,
        outcome="error",
    )


def _seconds(args: dict[str, Any]) -> float | ToolOutput:
    raw = args.get("seconds", DEFAULT_SECONDS)
    seconds = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        return ToolOutput(
            content=(
                f"Refused: seconds must be a finite number above 0 (at most {MAX_SECONDS:g}), not {raw!r}. "
                f"Call wait again with seconds between 1 and {MAX_SECONDS:g}, or leave it out for "
                f"{DEFAULT_SECONDS:g}."
            ),
            is_error=True,
            outcome="invalid",
        )
    return min(seconds, MAX_SECONDS)


def handlers(env: ToolEnvironment) -> dict[str, Any]:
    seen: SeenReports = env.services.setdefault("seen_reports", SeenReports())

    async def wait(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        seconds = _seconds(args)
        if isinstance(seconds, ToolOutput):
            return seconds
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        jobs = _Jobs(services=env.services, ctx=ctx)
        reports = _Reports(conversation=ctx.request.conversation)
        target = args.get("for")
        if target is None:
            watched = await jobs.running(reports)
            if not watched:
                return ToolOutput(
                    content="Nothing of yours is running in the background: there is nothing to wait for.",
                    data={"jobs": {}},
                )
        else:
            # What the run owes when the wait begins: a report of an earlier turn does not end it.
            watched = {target: jobs.working_runs().get(target)}
        state: JobState = "running"
        while True:
            if target is None:
                await reports.refresh()
                ended = [j for j, owed in watched.items() if reports.has(j, owed)]
                if ended:
                    return _reported(ended, reports, ctx, seen)
            else:
                state = await jobs.state(target, reports, watched[target])
                if state == "reported":
                    return _reported([target], reports, ctx, seen)
                if state == "unknown":
                    return _unknown(target)
                if state == "gone":
                    return ToolOutput(
                        content=f"{target} is not running, and no report of its latest turn is in this "
                        "conversation.",
                        data={"jobs": {target: "gone"}},
                    )
            left = deadline - loop.time()
            if left <= 0:
                if target is not None and state == "starting":
                    return _unknown(target)  # its transcript never appeared under this conversation
                return _still_running(watched, seconds)
            await asyncio.sleep(min(POLL_INTERVAL, left))

    return {"wait": wait}
