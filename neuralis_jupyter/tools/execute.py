"""The ``execute`` tool: a sandboxed shell command, in the foreground or the background, or a skill.

Gates for ``action: "shell"``, in order: ``core.execute`` (the policy checks it from the schema too);
``exec.container``, the shell plane's door (``exec.unconfined`` opens it by itself, seed 000);
``network: true`` needs ``core.web``. Then the working directory is made, a fresh session ticket is
minted, and the sandbox is checked (:mod:`.sandbox`). When bubblewrap cannot start, the call is
REFUSED: fail closed. Only a session holding ``exec.unconfined`` then runs the command without the
sandbox (same minimal environment, timeout and output caps). A session with ``exec.unconfined`` still
gets the sandbox whenever it starts: the privilege rescues a host without bubblewrap; nobody asked for
a weaker shell, and the sandbox costs a few milliseconds.

The working directory (``c.ExecuteSettings.workspace``; by default the agent's own
``projects/<p>/agents/<a>/workspace`` under the data root, ``NeuralisSettings.default_agent`` for a
session naming no agent) is made on first use and is the only place a command can write.

The command's environment is only ``PATH``, ``HOME`` (the working directory), ``LANG``,
``NEURALIS_SESSION_TOKEN`` (minted for this call; it dies when the turn's stream ends),
``NEURALIS_API_URL`` (when a server runs) and the credentials a skill activation staged in this turn.

Result: JSON ``{stdout, stderr, exitCode, cwd}``, plus ``timedOut: true`` after a timeout and
``unconfined: true`` when it ran without the sandbox; the same dict is ``ToolOutput.data``. A non-zero
exit is information (outcome ``ok``, ``is_error`` False); refusals (``refused``) and timeouts
(``error``) are errors. ``background: true`` returns ``{shellId, statusUri, outputUri, status}`` at
once (:mod:`.shells`).

``action: "skill"`` renders a visible skill's SKILL.md into the result and stages its declared
credentials (environment variable names) for the later shell calls of the same turn, from the host
environment first, then the project's ``credentials.json`` (owner-only, as for provider keys).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from ..contracts import refusals
from ..contracts.access import has_feature
from ..contracts.identity import SessionContext
from ..packages import SkillDecl, render_placeholders
from ..providers.credentials import project_credentials
from ..providers.errors import InsecureCredentials, ProviderError
from ..runtime.context import ToolContext
from ..runtime.tools import Handler, ToolOutput
from ..store.paths import check_id
from ..store.tickets import TicketMintRefused
from ._exec_settings import ExecuteSettings
from .environment import ToolEnvironment
from .sandbox import Capture, Launch, Sandbox, run_process
from .shells import BackgroundShells, ShellSpec

__all__ = ["ExecuteSettings", "ShellResult", "handlers"]

log = logging.getLogger(__name__)

#: ``ctx.turn_state`` keys: credentials staged by skills, and skill folders the shell may read.
STAGED_CREDENTIALS = "execute.credentials"
SKILL_FOLDERS = "execute.skill_folders"
_RESERVED = frozenset({"PATH", "HOME", "LANG", "NEURALIS_SESSION_TOKEN", "NEURALIS_API_URL"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ShellResult(TypedDict):
    stdout: str
    stderr: str
    exitCode: int | None
    cwd: str
    timedOut: NotRequired[bool]
    unconfined: NotRequired[bool]


def handlers(env: ToolEnvironment) -> dict[str, Handler]:
    return {"execute": _Execute(env)}


def _refused(reason: str) -> ToolOutput:
    return ToolOutput(content=refusals.envelope_refusal("execute", reason), is_error=True, outcome="refused")


class _Execute:
    def __init__(self, env: ToolEnvironment) -> None:
        self.env = env
        self.settings = ExecuteSettings(config=env.config)
        self.data_root = env.store.data_root.root.resolve()
        self.sandbox = Sandbox(
            bwrap=self.settings.bwrap_path,
            shell=self.settings.shell,
            hidden=[*self.settings.hidden_paths, self.data_root, Path.home()],
            ro_binds=[*self.settings.ro_binds, *_python_dirs(self.settings.expose_python)],
        )

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        if not has_feature(ctx.session, "core.execute"):
            return _refused("the session does not hold the core.execute feature")
        if args.get("action", "shell") == "skill":
            return await self._skill(args, ctx)
        return await self._shell(args, ctx)

    # -- shell ----------------------------------------------------------------------------------------

    async def _shell(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        session = ctx.session
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return ToolOutput(
                content="action shell needs a non-empty command", is_error=True, outcome="invalid"
            )
        if not (has_feature(session, "exec.container") or has_feature(session, "exec.unconfined")):
            return _refused(
                "the shell needs the exec.container feature, which this session does not hold; "
                "ask a project administrator to grant it"
            )
        network = bool(args.get("network", False))
        if network and not has_feature(session, "core.web"):
            return _refused(
                "network access (network: true) needs the core.web feature, which this session does not "
                "hold; run the command without network, or ask a project administrator for core.web"
            )
        background = bool(args.get("background", False))
        limit = self.settings.background_timeout if background else self.settings.timeout
        timeout = min(float(args.get("timeout", limit)), limit)
        cwd = await asyncio.to_thread(self._workspace, session)
        try:
            ticket = await asyncio.to_thread(ctx.runtime.store.tickets.mint, session)
        except TicketMintRefused as exc:
            return _refused(f"no session ticket can be minted for this turn ({exc})")
        env = {
            **ctx.turn_state.get(STAGED_CREDENTIALS, {}),
            "PATH": self.settings.path,
            "HOME": str(cwd),
            "LANG": "C.UTF-8",
            "NEURALIS_SESSION_TOKEN": ticket,
        }
        if self.env.api_url:
            env["NEURALIS_API_URL"] = self.env.api_url
        launch = await self._launch(command, ctx, cwd=cwd, env=env, network=network)
        if isinstance(launch, ToolOutput):
            return launch
        if background:
            return await self._background(command, launch, ctx, time_limit=timeout)
        return await self._foreground(launch, time_limit=timeout)

    def _workspace(self, session: SessionContext) -> Path:
        values = {
            "project": check_id("project", session.project_id),
            "agent": check_id("agent", session.agent_id or self.env.settings.default_agent),
            "user": check_id("user", session.user_id),
        }
        template = self.settings.workspace
        for name, value in values.items():
            template = template.replace("{" + name + "}", value)
        path = (Path(template) if template.startswith("/") else self.data_root / template).resolve()
        if self.data_root.is_relative_to(path):
            raise ValueError(f"c.ExecuteSettings.workspace resolves to {path}, which holds the data root")
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    async def _launch(
        self, command: str, ctx: ToolContext, *, cwd: Path, env: dict[str, str], network: bool
    ) -> Launch | ToolOutput:
        why = await self.sandbox.check(cwd=cwd, network=network)
        if why is None:
            folders = list(ctx.turn_state.get(SKILL_FOLDERS, []))
            return await asyncio.to_thread(
                self.sandbox.launch, command, cwd=cwd, env=env, network=network, ro_binds=folders
            )
        if has_feature(ctx.session, "exec.unconfined"):
            log.warning("running a shell command unconfined for %s: %s", ctx.session.user_id, why)
            return self.sandbox.unconfined(command, cwd=cwd, env=env)
        return _refused(
            f"the shell sandbox cannot start: {why}. Nothing ran. Install bubblewrap (Debian and Ubuntu: "
            "apt-get install bubblewrap) or point c.ExecuteSettings.bwrap_path at it, and allow "
            "unprivileged user namespaces where the host forbids them; only a session holding "
            "exec.unconfined may run commands without the sandbox"
        )

    async def _foreground(self, launch: Launch, *, time_limit: float) -> ToolOutput:
        limit = self.settings.max_output_bytes
        streams = {"stdout": Capture(limit), "stderr": Capture(limit)}
        ended = await run_process(launch, time_limit=time_limit, sink=lambda s, d: streams[s].add(d))
        result: ShellResult = {
            "stdout": streams["stdout"].text(),
            "stderr": streams["stderr"].text(),
            "exitCode": ended.code,
            "cwd": str(launch.cwd),
        }
        if ended.ending == "timed_out":
            result["timedOut"] = True
        if not launch.sandboxed:
            result["unconfined"] = True
        timed_out = ended.ending == "timed_out"
        return ToolOutput(
            content=json.dumps(result, ensure_ascii=False),
            is_error=timed_out,
            outcome="error" if timed_out else "ok",
            data=dict(result),
        )

    async def _background(
        self, command: str, launch: Launch, ctx: ToolContext, *, time_limit: float
    ) -> ToolOutput:
        shells = self.env.services.get("shells")
        if shells is None:
            shells = self.env.services["shells"] = BackgroundShells(data_root=self.data_root)
        if not isinstance(shells, BackgroundShells):
            raise TypeError(f"env.services['shells'] must be a BackgroundShells, got {type(shells).__name__}")
        spec = ShellSpec(
            session=ctx.session,
            conversation=ctx.request.conversation,
            command=command,
            launch=launch,
            timeout=time_limit,
            report_bytes=self.settings.report_max_bytes,
            max_log_bytes=self.settings.max_log_bytes,
        )
        started = await shells.start(spec, continuation=self.env.services.get("continue"))
        return ToolOutput(content=json.dumps(started), data=dict(started))

    # -- skill ----------------------------------------------------------------------------------------

    async def _skill(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        name = args.get("skill")
        if not isinstance(name, str) or not name:
            return ToolOutput(
                content="action skill needs the skill's name in 'skill'", is_error=True, outcome="invalid"
            )
        skill = next((s for s in self.env.packages.skills(ctx.session) if s.name == name), None)
        if skill is None:
            return ToolOutput(
                content=f"Skill not found: {name!r}. Activate one of the skills listed in <packages>.",
                is_error=True,
                outcome="error",
            )
        staged, missing, note = await asyncio.to_thread(self._credentials, skill, ctx.session)
        ctx.turn_state.setdefault(STAGED_CREDENTIALS, {}).update(staged)
        folders: list[str] = ctx.turn_state.setdefault(SKILL_FOLDERS, [])
        if str(skill.path) not in folders:
            folders.append(str(skill.path))
        lines = [
            f'<skill name="{skill.name}" package="{skill.package_id}">',
            f"Folder (readable from the shell): {skill.path}",
            "",
            render_placeholders(skill.body, ctx.session).strip(),
            "</skill>",
        ]
        if staged:
            lines.append(f"Credentials staged for shell calls in this turn: {', '.join(sorted(staged))}.")
        if missing:
            lines.append(
                f"Missing credentials: {', '.join(missing)}. Set them in the host environment or in the "
                "project's credentials.json; commands that need them will fail without them."
            )
        if note:
            lines.append(note)
        data = {"skill": skill.name, "folder": str(skill.path), "staged": sorted(staged), "missing": missing}
        return ToolOutput(content="\n".join(lines), data=data)

    def _credentials(
        self, skill: SkillDecl, session: SessionContext
    ) -> tuple[dict[str, str], list[str], str | None]:
        """(values staged by name, names missing, a note on the credential file) — blocking."""
        note = None
        try:
            stored = project_credentials(self.env.store.data_root, session.project_id)
        except (InsecureCredentials, ProviderError) as exc:
            stored, note = {}, f"The project's credential file was not read: {exc}"
        staged: dict[str, str] = {}
        missing: list[str] = []
        for name in _unique(skill.credentials):
            value = os.environ.get(name, "").strip() or stored.get(name, "").strip()
            if _ENV_NAME.fullmatch(name) and name not in _RESERVED and value:
                staged[name] = value
            else:
                missing.append(name)
        return staged, missing, note


def _python_dirs(expose: bool) -> list[str]:
    return list(dict.fromkeys([sys.prefix, sys.base_prefix])) if expose else []


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
