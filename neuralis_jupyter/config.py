"""Settings shared by the kernel, the server extension and the CLI.

Every knob is a trait on :class:`NeuralisSettings`. Set one in any Jupyter config file
(``jupyter_neuralis_config.py``: ``c.NeuralisSettings.max_agents_per_project = 20``, or the JSON
form), on the server's own config when running under Jupyter Server, or through the environment
variables named in each help text.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from traitlets import Dict, Enum, Integer, List, TraitError, Unicode, default, validate
from traitlets.config import Config, Configurable

__all__ = ["CONFIG_FILE_STEM", "NeuralisSettings", "load_settings"]

CONFIG_FILE_STEM = "jupyter_neuralis_config"


class NeuralisSettings(Configurable):
    """Where Neuralis keeps its data and the limits it applies."""

    data_root = Unicode(
        help=(
            "The data root: conversations as files, the SQLite store, pending results. "
            "Default: $NEURALIS_HOME, else <jupyter data dir>/neuralis."
        ),
    ).tag(config=True)

    store_url = Unicode(
        help=(
            "SQLAlchemy URL of the SQL store (usage, audit, inbox, interactions, tickets). "
            "Default: $NEURALIS_STORE_URL, else a SQLite file neuralis.db in the data root. "
            "Use postgresql+psycopg://... when a team shares one store."
        ),
    ).tag(config=True)

    max_agents_per_project = Integer(
        100,
        help="Seat ceiling: the most agents one project may hold. Creating one more is refused.",
    ).tag(config=True)

    catalog_path = Unicode(
        "",
        help=(
            "A JSON model catalog (same shape as the shipped providers/catalog.json) whose entries "
            "replace or add models and prices by (provider, id). Empty: the shipped catalog only."
        ),
    ).tag(config=True)

    max_agent_steps = Integer(
        50,
        help="The most model calls one turn may make; a run's own budget can only lower it.",
    ).tag(config=True)

    default_agent = Unicode(
        "assistant",
        help="The agent a project's users chat with when they name none; provisioned on first use.",
    ).tag(config=True)

    package_roots = List(
        Unicode(),
        help=(
            "Extra package folders. Each is a package (it holds a neuralis.json) or a folder of packages. "
            "Their packages load after the builtin agent-core and are at most 'trusted': a claim of "
            "first-party is clamped. Default: none."
        ),
    ).tag(config=True)

    trusted_packages = List(
        Unicode(),
        help=(
            "Ids of installed or folder packages the operator trusts. A package's manifest may ask for "
            "'trusted'; it gets it only when listed here, else it loads 'untrusted' (no write, code "
            "execution or egress tools). The builtin agent-core is first-party regardless."
        ),
    ).tag(config=True)

    guard = Enum(
        ["safe", "balanced", "auto"],
        default_value=None,
        allow_none=True,
        help=(
            "The guard profile every project uses unless its project.json names one: safe asks before "
            "every write, balanced before code execution, outbound requests and third-party writes, auto "
            "never asks. None: each project's own setting (balanced by default)."
        ),
    ).tag(config=True)

    policy = Dict(
        help=(
            "Administrator policy for every project: {'blocklist': [tool globs], 'allowlist': [tool globs] "
            "or null, 'ceiling_allowlist': ['package/tool' globs]}. Project policy adds to it."
        ),
    ).tag(config=True)

    hooks = List(
        Dict(),
        help=(
            "Administrator PreToolUse hooks: [{'source': 'admin'|'managed', 'match': glob, "
            "'decision': 'allow'|'deny'|'ask', 'reason': text}]. They outrank project and user hooks."
        ),
    ).tag(config=True)

    approval_timeout = Integer(
        600,
        help=(
            "Seconds a tool call waits for the user's approval before it stays pending and the turn "
            "moves on without it."
        ),
    ).tag(config=True)

    background_wait = Integer(
        3600,
        help=(
            "Seconds a headless command (neuralis chat, neuralis run) waits at the end for background "
            "shells and sub-agents to report back before it exits and stops them."
        ),
    ).tag(config=True)

    anthropic_base_url = Unicode(
        "",
        help=(
            "The Anthropic API endpoint (a proxy or gateway). Empty: $ANTHROPIC_BASE_URL, else "
            "ANTHROPIC_BASE_URL in the project's credentials.json, else Anthropic's public API. Set here, "
            "it wins over both."
        ),
    ).tag(config=True)

    openai_base_url = Unicode(
        "",
        help=(
            "The OpenAI API endpoint, or any OpenAI-compatible server (Ollama, vLLM, llama.cpp server: "
            "e.g. http://127.0.0.1:11434/v1, which needs no key). Empty: $OPENAI_BASE_URL, else "
            "OPENAI_BASE_URL in the project's credentials.json, else OpenAI's public API. Set here, it "
            "wins over both."
        ),
    ).tag(config=True)

    @default("data_root")
    def _default_data_root(self) -> str:
        env = os.environ.get("NEURALIS_HOME")
        if env:
            return env
        from jupyter_core.paths import jupyter_data_dir

        return str(Path(jupyter_data_dir()) / "neuralis")

    @default("store_url")
    def _default_store_url(self) -> str:
        env = os.environ.get("NEURALIS_STORE_URL")
        if env:
            return env
        return f"sqlite:///{Path(self.data_root) / 'neuralis.db'}"

    @validate("data_root")
    def _validate_data_root(self, proposal: dict[str, object]) -> str:
        value = str(proposal["value"])
        if not value:
            raise TraitError("data_root must be a directory path, got an empty string")
        return str(Path(value).expanduser().resolve())

    @validate("store_url")
    def _validate_store_url(self, proposal: dict[str, object]) -> str:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        value = str(proposal["value"])
        try:
            make_url(value)
        except ArgumentError as exc:
            raise TraitError(
                f"store_url must be a SQLAlchemy URL such as sqlite:////path/neuralis.db or "
                f"postgresql+psycopg://user@host/db, got {value!r}: {exc}"
            ) from None
        return value

    @validate("max_agents_per_project", "max_agent_steps")
    def _validate_positive(self, proposal: dict[str, object]) -> int:
        value = proposal["value"]
        name = proposal["trait"].name  # type: ignore[attr-defined]
        if not isinstance(value, int) or value < 1:
            raise TraitError(f"{name} must be a positive integer, got {value!r}")
        return value

    @validate("anthropic_base_url", "openai_base_url")
    def _validate_base_url(self, proposal: dict[str, object]) -> str:
        value = str(proposal["value"]).strip()
        parts = urlsplit(value)
        if value and (parts.scheme not in ("http", "https") or not parts.hostname):
            name = proposal["trait"].name  # type: ignore[attr-defined]
            raise TraitError(
                f"{name} must be an http(s) URL such as http://127.0.0.1:11434/v1, got {value!r}"
            )
        return value

    @validate("catalog_path")
    def _validate_catalog_path(self, proposal: dict[str, object]) -> str:
        value = str(proposal["value"])
        if value and not Path(value).expanduser().is_file():
            raise TraitError(f"catalog_path names no file: {value!r}")
        return str(Path(value).expanduser()) if value else ""


def load_settings(config: Config | None = None) -> NeuralisSettings:
    """Settings from the Jupyter config path (``jupyter_neuralis_config.{json,py}``) plus ``config``."""
    merged = Config()
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config.loader import (
        ConfigFileNotFound,
        JSONFileConfigLoader,
        PyFileConfigLoader,
    )

    # jupyter_config_path() lists the most specific directory first; load the least specific first so
    # user settings override system ones.
    for directory in reversed(jupyter_config_path()):
        for loader_cls, suffix in ((JSONFileConfigLoader, ".json"), (PyFileConfigLoader, ".py")):
            loader = loader_cls(CONFIG_FILE_STEM + suffix, path=directory)
            try:
                merged.merge(loader.load_config())
            except ConfigFileNotFound:
                continue
    if config is not None:
        merged.merge(config)
    return NeuralisSettings(config=merged)
