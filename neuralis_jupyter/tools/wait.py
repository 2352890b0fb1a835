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
still comes. Like every tool call, the wait is cancelled when the turn is stopped.

A sub-agent run that a message to its inbox set working again reports again; ``wait`` answers with the
latest report in the conversation, so it cannot tell that second turn from the first (the registry's
working flag stays set while a report's continuation waits for this very turn, so it cannot tell either).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..runtime import ToolContext, ToolOutput
from ..store.conversations import Conversation
from .environment import ToolEnvironment

__all__ = ["DEFAULT_SECONDS", "MAX_SECONDS", "POLL_INTERVAL", "handlers"]

DEFAULT_SECONDS = 30.0
MAX_SECONDS = 300.0
#: Seconds between two looks at the conversation. A look reads only the rows appended since the last
#: one, in a worker thread, so it stays cheap however long the conversation is.
POLL_INTERVAL = 0.25

#: Report row types and the key that names the job each reports on.
_REPORT_KEYS = {"background_report": "shell_id", "delegate_report": "run_id"}

JobState = Literal["reported", "running", "starting", "gone", "unknown"]


@dataclass(kw_only=True)
class _Reports:
    """The report rows of one conversation, read incrementally."""

    conversation: Conversation
    found: dict[str, str] = field(default_factory=dict)
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
                    self.found[block[key]] = str(block.get("text", ""))


@dataclass(frozen=True, kw_only=True)
class _Jobs:
    """The caller's view of the process's background registries."""

    services: Mapping[str, Any]
    ctx: ToolContext

    def shells(self) -> set[str]:
        shells = self.services.get("shells")
        return set() if shells is None else {m["shellId"] for m in shells.list(self.ctx.session)}

    def live_runs(self) -> set[str]:
        runs = self.services.get("delegates")
        return set() if runs is None else {k for k, t in list(runs.tasks.items()) if not t.done()}

    def run_dirs(self, run_ids: Iterable[str]) -> set[str]:
        """The run ids whose transcript lives under the caller's conversation. Blocking."""
        base = self.ctx.request.conversation.path / "delegates"
        return {r for r in run_ids if r and "/" not in r and r not in (".", "..") and (base / r).is_dir()}

    async def state(self, job: str, reports: _Reports) -> JobState:
        # Registries first, reports after: a report written before a job left its registry is then
        # always seen, so "gone" never hides a report that was on its way.
        shell = job in self.shells()
        live = job in self.live_runs()
        mine = not shell and bool(await asyncio.to_thread(self.run_dirs, [job]))
        await reports.refresh()
        if job in reports.found:
            return "reported"
        if shell or (mine and live):
            return "running"
        if live:
            return "starting"
        return "gone" if mine else "unknown"

    async def running(self, reports: _Reports) -> list[str]:
        """The caller's jobs that have not reported yet."""
        live = self.live_runs()
        jobs = sorted(self.shells()) + sorted(await asyncio.to_thread(self.run_dirs, live))
        await reports.refresh()
        return [j for j in jobs if j not in reports.found]


def _reported(jobs: list[str], reports: _Reports) -> ToolOutput:
    parts = [f"{job} has ended. Its report:\n{reports.found[job]}" for job in jobs]
    return ToolOutput(content="\n\n".join(parts), data={"jobs": {job: "ended" for job in jobs}})


def _still_running(jobs: list[str], seconds: float) -> ToolOutput:
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


def handlers(env: ToolEnvironment) -> dict[str, Any]:
    async def wait(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        seconds = min(float(args.get("seconds", DEFAULT_SECONDS)), MAX_SECONDS)
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
            watched = [target]
        state: JobState = "running"
        while True:
            if target is None:
                await reports.refresh()
                ended = [j for j in watched if j in reports.found]
                if ended:
                    return _reported(ended, reports)
            else:
                state = await jobs.state(target, reports)
                if state == "reported":
                    return _reported([target], reports)
                if state == "unknown":
                    return _unknown(target)
                if state == "gone":
                    return ToolOutput(
                        content=f"{target} is not running, and no report of it is in this conversation.",
                        data={"jobs": {target: "gone"}},
                    )
            left = deadline - loop.time()
            if left <= 0:
                if target is not None and state == "starting":
                    return _unknown(target)  # its transcript never appeared under this conversation
                return _still_running(watched, seconds)
            await asyncio.sleep(min(POLL_INTERVAL, left))

    return {"wait": wait}
