"""The knobs of the ``execute`` tool: ``c.ExecuteSettings.<name>`` in any Jupyter config file, and the
workspace they name (:func:`workspace_dir`, shared by ``execute`` and ``web_fetch``'s ``save_to``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path, PurePosixPath

from traitlets import Bool, Float, Integer, List, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from ..contracts.identity import SessionContext
from ..store.paths import check_id

__all__ = ["WORKSPACE_PLACEHOLDERS", "ExecuteSettings", "workspace_dir"]

WORKSPACE_PLACEHOLDERS = ("project", "agent", "user")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ExecuteSettings(Configurable):
    """How ``execute`` runs shell commands: the sandbox, the limits and the working directory."""

    bwrap_path = Unicode(
        "bwrap",
        help=(
            "The bubblewrap executable: a name looked up on PATH or an absolute path. When it is missing "
            "or cannot set up its namespaces, shell calls are refused unless the caller holds "
            "exec.unconfined. Before bubblewrap 0.8 the sandbox runs without --disable-userns."
        ),
    ).tag(config=True)

    shell = List(
        Unicode(),
        default_value=["/bin/sh", "-c"],
        help=(
            "The argv prefix the command string is appended to. /bin/sh -c starts fastest and reads no "
            "profile files; use ['/bin/bash', '-c'] for bash syntax."
        ),
    ).tag(config=True)

    timeout = Float(
        120.0,
        help="Seconds a foreground command may run before its process group is killed. A call may ask "
        "for less, never more.",
    ).tag(config=True)

    background_timeout = Float(
        3600.0,
        help="Seconds a background command may run before it is killed and reported as timed out.",
    ).tag(config=True)

    max_output_bytes = Integer(
        20_000,
        help="Bytes of stdout, and separately of stderr, a result keeps: the first and the last half, "
        "with a '[… N bytes omitted …]' marker between them.",
    ).tag(config=True)

    report_max_bytes = Integer(
        4_000,
        help="Bytes of output (head and tail) a background shell's report carries into the conversation.",
    ).tag(config=True)

    max_log_bytes = Integer(
        10_000_000,
        help="Bytes of output a background shell's output.jsonl keeps; later output is dropped with a "
        "notice line (the command keeps running).",
    ).tag(config=True)

    workspace = Unicode(
        "projects/{project}/agents/{agent}/workspace/{user}",
        help=(
            "The shell's working directory, the only writable place in the sandbox, and where web_fetch's "
            "save_to writes. Relative paths are under the data root; {project}, {agent} and {user} are "
            "replaced from the caller's session (by default every user has a workspace of their own per "
            "agent, as conversations are private). It must resolve to a folder inside the data root; "
            "created on first use."
        ),
    ).tag(config=True)

    unconfined_network = Bool(
        False,
        help=(
            "Let a session holding exec.unconfined run a command without the sandbox (bubblewrap cannot "
            "start) even when the call may not use the network (network: false, or no core.web). An "
            "unconfined command always has the host's network; by default such a call is refused."
        ),
    ).tag(config=True)

    hidden_paths = List(
        Unicode(),
        default_value=["/home", "/root", "/run"],
        help=(
            "Absolute paths the sandbox covers with an empty read-only tmpfs. The data root and the host "
            "user's home are always hidden too; /run is hidden because unix sockets (docker, databases) "
            "stay connectable through a read-only mount."
        ),
    ).tag(config=True)

    ro_binds = List(
        Unicode(),
        help="Absolute host paths bound read-only into the sandbox even under a hidden path "
        "(e.g. a shared dataset in /home/shared). Missing paths are skipped.",
    ).tag(config=True)

    expose_python = Bool(
        True,
        help="Bind this Python environment (sys.prefix and the interpreter it was made from) read-only "
        "into the sandbox, so that `python` in the shell is the kernel's Python even when it lives "
        "under a hidden home (pyenv, conda, ~/.venvs).",
    ).tag(config=True)

    path = Unicode(
        help="PATH inside the shell. Default: this Python environment's bin directory, then the system's.",
    ).tag(config=True)

    @default("path")
    def _default_path(self) -> str:
        if sys.prefix != sys.base_prefix:
            return f"{sys.prefix}/bin:{_SYSTEM_PATH}"
        return _SYSTEM_PATH

    @validate("bwrap_path")
    def _validate_bwrap_path(self, proposal: dict[str, object]) -> str:
        value = str(proposal["value"]).strip()
        if not value:
            raise TraitError("bwrap_path must name the bubblewrap executable, got an empty string")
        return value

    @validate("shell")
    def _validate_shell(self, proposal: dict[str, object]) -> list[str]:
        value = list(proposal["value"])  # type: ignore[call-overload]
        if not value or not value[0].startswith("/"):
            raise TraitError(f"shell must start with an absolute interpreter path, got {value!r}")
        return value

    @validate("timeout", "background_timeout")
    def _validate_seconds(self, proposal: dict[str, object]) -> float:
        value = proposal["value"]
        if not isinstance(value, int | float) or value <= 0:
            name = proposal["trait"].name  # type: ignore[attr-defined]
            raise TraitError(f"{name} must be a positive number of seconds, got {value!r}")
        return float(value)

    @validate("max_output_bytes", "report_max_bytes", "max_log_bytes")
    def _validate_bytes(self, proposal: dict[str, object]) -> int:
        value = proposal["value"]
        if not isinstance(value, int) or value < 100:
            name = proposal["trait"].name  # type: ignore[attr-defined]
            raise TraitError(f"{name} must be at least 100 bytes, got {value!r}")
        return value

    @validate("workspace")
    def _validate_workspace(self, proposal: dict[str, object]) -> str:
        value = str(proposal["value"]).strip()
        unknown = [n for n in _PLACEHOLDER.findall(value) if n not in WORKSPACE_PLACEHOLDERS]
        parts = PurePosixPath(value).parts
        if not value or value in ("/", ".") or unknown or ".." in parts:
            raise TraitError(
                "workspace must be a directory path without '..', using only the placeholders "
                f"{{project}}, {{agent}} and {{user}}; got {value!r}"
            )
        return value

    @validate("hidden_paths", "ro_binds")
    def _validate_absolute(self, proposal: dict[str, object]) -> list[str]:
        value = list(proposal["value"])  # type: ignore[call-overload]
        bad = [p for p in value if not p.startswith("/") or p.rstrip("/") == ""]
        if bad:
            name = proposal["trait"].name  # type: ignore[attr-defined]
            raise TraitError(f"{name} must list absolute paths other than '/', got {bad!r}")
        return value


def workspace_dir(
    settings: ExecuteSettings, *, data_root: Path, session: SessionContext, default_agent: str
) -> Path:
    """The caller's workspace: ``settings.workspace`` filled in from ``session`` and resolved, made on
    first use (blocking). :class:`ValueError` when it is not a folder strictly inside the data root."""
    values = {
        "project": check_id("project", session.project_id),
        "agent": check_id("agent", session.agent_id or default_agent),
        "user": check_id("user", session.user_id),
    }
    template = settings.workspace
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    root = data_root.resolve()
    path = (root / template).resolve()  # an absolute template replaces the root
    if path == root or not path.is_relative_to(root):
        raise ValueError(
            f"c.ExecuteSettings.workspace resolves to {path}, which is not a folder inside the data root "
            f"{root}; use a path under it, such as the default {ExecuteSettings.workspace.default_value!r}"
        )
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path
