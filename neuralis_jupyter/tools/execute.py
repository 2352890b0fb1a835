"""The ``execute`` tool: a sandboxed shell command, in the foreground or the background, or a skill.

Gates for ``action: "shell"``, in order: ``core.execute`` (the policy checks it from the schema too);
``exec.container``, the shell plane's door (``exec.unconfined`` opens it by itself, seed 000);
``network: true`` needs ``core.web``. Then the working directory is made, a fresh session ticket is
minted, and the sandbox is checked (:mod:`.sandbox`). When bubblewrap cannot start, the call is
REFUSED: fail closed. Only a session holding ``exec.unconfined`` then runs the command without the
sandbox (same minimal environment, timeout and output caps), and only when the call may use the network
(``network: true`` with ``core.web``) or ``c.ExecuteSettings.unconfined_network`` allows it: an
unconfined command has the host's network, which ``network: false`` promises it does not. A session
with ``exec.unconfined`` still gets the sandbox whenever it starts: the privilege rescues a host without
bubblewrap; nobody asked for a weaker shell, and the sandbox costs a few milliseconds.

The working directory (``c.ExecuteSettings.workspace``; by default the caller's own
``projects/<p>/agents/<a>/workspace/<user>`` under the data root, ``NeuralisSettings.default_agent`` for
a session naming no agent; always inside the data root) is made on first use and is the only place a
command can write.

The command's environment is only ``PATH``, ``HOME`` (the working directory), ``LANG``,
``NEURALIS_SESSION_TOKEN`` (minted for this call; it dies when the turn's stream ends),
``NEURALIS_API_URL`` (when a server runs) and the credentials a skill activation staged in this turn.

Result: JSON ``{stdout, stderr, exitCode, cwd}``, plus ``timedOut: true`` after a timeout and
``unconfined: true`` when it ran without the sandbox; the same dict is ``ToolOutput.data``. A non-zero
exit is information (outcome ``ok``, ``is_error`` False); refusals (``refused``) and timeouts
(``error``) are errors. ``background: true`` returns ``{shellId, statusUri, outputUri, status}`` at
once (:mod:`.shells`).

``action: "skill"`` renders a visible skill's SKILL.md into the result and stages its credentials
(environment variable names) for the later shell calls of the same turn. A name is staged only when
the skill's package is not ``untrusted``, its ``neuralis.json`` declares the name under ``credentials``,
the name is not the platform's (:func:`reserved_credential`: provider, hub and Neuralis variables, and
names that steer the loader, the shell or Python), and the project's ``credentials.json`` (owner-only,
as for provider keys) holds a value. The host process's environment is never read: its secrets are the
platform's, not a package's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from ..contracts import refusals
from ..contracts.access import has_feature
from ..packages import PackageSet, SkillDecl, UnknownPackage, render_placeholders
from ..providers.credentials import PROVIDER_KEYS, project_credentials
from ..providers.errors import InsecureCredentials, ProviderError
from ..runtime.context import ToolContext
from ..runtime.tools import Handler, ToolOutput
from ..store.paths import DataRoot
from ..store.tickets import TicketMintRefused
from ._exec_settings import ExecuteSettings, workspace_dir
from .environment import ToolEnvironment
from .sandbox import Capture, Launch, Sandbox, run_process
from .shells import BackgroundShells, ShellSpec

__all__ = ["ExecuteSettings", "ShellResult", "handlers", "reserved_credential"]

log = logging.getLogger(__name__)

#: ``ctx.turn_state`` keys: credentials staged by skills, and skill folders the shell may read.
STAGED_CREDENTIALS = "execute.credentials"
SKILL_FOLDERS = "execute.skill_folders"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Credential names no skill may stage, compared upper-cased: the platform's provider keys, the hub's
#: and Jupyter's tokens, Neuralis's own variables, and names that change how the loader, the shell or
#: Python behave (a "credential" that is really code injection).
_RESERVED_PREFIXES = (
    "ANTHROPIC_",
    "OPENAI_",
    "AZURE_OPENAI_",
    "JUPYTERHUB_",
    "JUPYTER_",
    "JPY_",
    "NEURALIS_",
    "LD_",
    "DYLD_",
    "PYTHON",
    "LC_",
    "BASH_",
)
_RESERVED_NAMES = frozenset(
    {
        *(v for keys in PROVIDER_KEYS.values() for v in (*keys.api_key_vars, keys.base_url_var)),
        *("PATH", "HOME", "LANG", "LANGUAGE", "SHELL", "ENV", "IFS", "PS4", "PROMPT_COMMAND", "CDPATH"),
        *("TMPDIR", "USER", "LOGNAME", "PWD", "SHELLOPTS", "GCONV_PATH", "HOSTALIASES", "RESOLV_HOST_CONF"),
    }
)


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
        cwd = await asyncio.to_thread(
            workspace_dir,
            self.settings,
            data_root=self.data_root,
            session=session,
            default_agent=self.env.settings.default_agent,
        )
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
            if not network and not self.settings.unconfined_network:
                return _refused(
                    f"the shell sandbox cannot start: {why}. Nothing ran. Without the sandbox the command "
                    "would have the host's network, and this call may not use the network; call again with "
                    "network: true (needs core.web), or let an administrator set "
                    "c.ExecuteSettings.unconfined_network = True, or install bubblewrap"
                )
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
        staged = await asyncio.to_thread(
            _stage_credentials, skill, self.env.packages, self.env.store.data_root, ctx.session.project_id
        )
        ctx.turn_state.setdefault(STAGED_CREDENTIALS, {}).update(staged.values)
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
        names = sorted(staged.values)
        if names:
            lines.append(f"Credentials staged for shell calls in this turn: {', '.join(names)}.")
        if staged.missing:
            lines.append(
                f"Missing credentials: {', '.join(staged.missing)}. A project administrator can set them in "
                "the project's credentials.json; commands that need them will fail without them."
            )
        if staged.refused:
            why = "; ".join(f"{name} ({reason})" for name, reason in staged.refused.items())
            lines.append(f"Credentials never staged: {why}.")
        if staged.note:
            lines.append(staged.note)
        data = {
            "skill": skill.name,
            "folder": str(skill.path),
            "staged": names,
            "missing": staged.missing,
            "refused": sorted(staged.refused),
        }
        return ToolOutput(content="\n".join(lines), data=data)


def reserved_credential(name: str) -> bool:
    """Whether ``name`` is the platform's (or steers the shell) and so never staged for a skill."""
    upper = name.upper()
    return upper in _RESERVED_NAMES or upper.startswith(_RESERVED_PREFIXES)


@dataclass(frozen=True, kw_only=True)
class _Staged:
    values: dict[str, str]
    missing: list[str]
    #: name -> why it is never staged.
    refused: dict[str, str]
    note: str | None = None


def _stage_credentials(
    skill: SkillDecl, packages: PackageSet, data_root: DataRoot, project_id: str
) -> _Staged:
    """The credentials ``skill`` may have, from the project's credential file only (blocking)."""
    try:
        manifest = packages.get(skill.package_id).manifest
    except UnknownPackage:
        manifest = None
    declared = {c.id for c in manifest.credentials} if manifest is not None else set()
    wanted: list[str] = []
    refused: dict[str, str] = {}
    for name in _unique(skill.credentials):
        if not _ENV_NAME.fullmatch(name):
            refused[name] = "not an environment variable name"
        elif reserved_credential(name):
            refused[name] = "reserved for the platform"
        elif manifest is None or manifest.trust == "untrusted":
            refused[name] = "the skill's package is untrusted"
        elif name not in declared:
            refused[name] = f"not declared under credentials in {skill.package_id}'s neuralis.json"
        else:
            wanted.append(name)
    if not wanted:
        return _Staged(values={}, missing=[], refused=refused)
    try:
        stored = project_credentials(data_root, project_id)
    except (InsecureCredentials, ProviderError) as exc:
        note = f"The project's credential file was not read: {exc}"
        return _Staged(values={}, missing=wanted, refused=refused, note=note)
    values = {n: stored[n].strip() for n in wanted if stored.get(n, "").strip()}
    return _Staged(values=values, missing=[n for n in wanted if n not in values], refused=refused)


def _python_dirs(expose: bool) -> list[str]:
    return list(dict.fromkeys([sys.prefix, sys.base_prefix])) if expose else []


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
