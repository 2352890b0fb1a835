"""Where a provider's API key and base URL come from.

The key, first match wins:

1. the environment (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``);
2. the project's credential file ``<data root>/projects/<project>/credentials.json``, a JSON object
   keyed by the same variable names (``{"ANTHROPIC_API_KEY": "sk-ant-..."}``). The file must be
   readable by its owner only; a group- or world-readable file is refused, not read, because a key
   that other accounts can read is already leaked;
3. an OpenAI-compatible server that is not OpenAI's own (the base URL set to a local or self-hosted
   endpoint) needs no key: a placeholder is sent, since the SDK insists on one.

The base URL, first match wins: the setting (``c.NeuralisSettings.anthropic_base_url`` /
``openai_base_url``, which the caller passes as ``setting``), the environment (``ANTHROPIC_BASE_URL`` /
``OPENAI_BASE_URL``), the same variable in the project's credential file, else the SDK's default. As
with every Jupyter setting, explicit configuration wins over the environment; the environment wins over
a file, as it does for the key.

Nothing here logs or returns a key except :func:`resolve_api_key`; :func:`has_credentials` names the
source only, for ``neuralis doctor``.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .errors import InsecureCredentials, MissingCredentials, ProviderError

if TYPE_CHECKING:
    from ..store.paths import DataRoot

__all__ = [
    "CREDENTIALS_FILE",
    "NO_KEY_PLACEHOLDER",
    "PROVIDER_KEYS",
    "Endpoint",
    "InsecureCredentials",
    "ProviderKeys",
    "has_credentials",
    "lookup_secret",
    "project_credentials",
    "resolve_api_key",
    "resolve_base_url",
    "resolve_endpoint",
]

CREDENTIALS_FILE = "credentials.json"
#: Sent to OpenAI-compatible servers that take no key; the SDK refuses to build a client without one.
NO_KEY_PLACEHOLDER = "neuralis-no-key"


@dataclass(frozen=True, kw_only=True)
class ProviderKeys:
    """The variables that configure one provider."""

    api_key_vars: tuple[str, ...]
    base_url_var: str
    #: Hosts of the provider's own API; any other base URL is a compatible server that may take no key.
    own_hosts: tuple[str, ...] = ()
    keyless_compatible: bool = False


PROVIDER_KEYS: dict[str, ProviderKeys] = {
    "anthropic": ProviderKeys(api_key_vars=("ANTHROPIC_API_KEY",), base_url_var="ANTHROPIC_BASE_URL"),
    "openai": ProviderKeys(
        api_key_vars=("OPENAI_API_KEY",),
        base_url_var="OPENAI_BASE_URL",
        own_hosts=("api.openai.com",),
        keyless_compatible=True,
    ),
}


def _keys(provider: str) -> ProviderKeys:
    try:
        return PROVIDER_KEYS[provider]
    except KeyError:
        raise ValueError(
            f"no credentials are known for provider {provider!r}; known: {', '.join(sorted(PROVIDER_KEYS))}"
        ) from None


def resolve_base_url(
    provider: str,
    *,
    setting: str | None = None,
    data_root: DataRoot | None = None,
    project_id: str | None = None,
) -> str | None:
    """The provider's base URL: ``setting``, else the environment, else the project's credential file
    (``data_root`` + ``project_id``); None for the SDK default."""
    if setting and setting.strip():
        return setting.strip()
    return lookup_secret(_keys(provider).base_url_var, data_root=data_root, project_id=project_id)


def _credentials_path(data_root: DataRoot | None, project_id: str | None) -> Path | None:
    if data_root is None or project_id is None:
        return None
    return data_root.project_dir(project_id) / CREDENTIALS_FILE


def _read_credentials(path: Path) -> dict[str, str]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}
    mode = stat.S_IMODE(st.st_mode)
    if os.name == "posix" and mode & 0o077:
        raise InsecureCredentials(str(path), mode)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ProviderError(f"cannot read the credential file {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ProviderError(f"the credential file {path} must hold a JSON object of NAME: key")
    return {k: v for k, v in doc.items() if isinstance(k, str) and isinstance(v, str) and v.strip()}


def project_credentials(data_root: DataRoot, project_id: str) -> dict[str, str]:
    """The project's stored credentials, ``NAME: value`` (``{}`` when it has none).

    Refused with :class:`InsecureCredentials` when other accounts can read the file.
    """
    path = _credentials_path(data_root, project_id)
    return _read_credentials(path) if path is not None else {}


def lookup_secret(name: str, *, data_root: DataRoot | None, project_id: str | None) -> str | None:
    """The secret ``name`` (an environment-variable-style name) from the environment, else the project's
    credential file; ``None`` when neither has it. Never logged, never returned to a model."""
    value = os.environ.get(name, "").strip()
    if value:
        return value
    if data_root is None or project_id is None:
        return None
    return project_credentials(data_root, project_id).get(name, "").strip() or None


def _find_key(provider: str, data_root: DataRoot | None, project_id: str | None) -> tuple[str, str] | None:
    """(source, key) of the first key found; the source is a variable name or a file path."""
    keys = _keys(provider)
    for var in keys.api_key_vars:
        value = os.environ.get(var, "").strip()
        if value:
            return var, value
    path = _credentials_path(data_root, project_id)
    if path is not None:
        stored = _read_credentials(path)
        for var in keys.api_key_vars:
            if var in stored:
                return f"{path} ({var})", stored[var].strip()
    return None


def _keyless(provider: str, base_url: str | None) -> bool:
    keys = _keys(provider)
    if not keys.keyless_compatible or not base_url:
        return False
    host = (urlsplit(base_url).hostname or "").lower()
    return bool(host) and host not in keys.own_hosts


def resolve_api_key(
    provider: str,
    *,
    data_root: DataRoot | None = None,
    project_id: str | None = None,
    base_url: str | None = None,
) -> str:
    """The API key for ``provider``, or :class:`MissingCredentials` naming the variables to set.

    ``base_url`` is the endpoint the key is for (default: :func:`resolve_base_url` without a setting); an
    OpenAI-compatible endpoint other than OpenAI's own gets :data:`NO_KEY_PLACEHOLDER` when no key is set.
    """
    found = _find_key(provider, data_root, project_id)
    if found is not None:
        return found[1]
    if _keyless(provider, base_url or resolve_base_url(provider, data_root=data_root, project_id=project_id)):
        return NO_KEY_PLACEHOLDER
    raise MissingCredentials(provider, _keys(provider).api_key_vars)


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where a model call goes and the key it carries: resolved together, so that they agree."""

    base_url: str | None
    api_key: str


def resolve_endpoint(
    provider: str,
    *,
    setting: str | None = None,
    data_root: DataRoot | None = None,
    project_id: str | None = None,
) -> Endpoint:
    """The base URL and the key of one model call.

    The base URL is ``setting``, else the environment's, else the project's credential file; the key
    is the environment's, else the file's. A base URL from the file is used only with a key from that
    same file (or with no key): whoever can write a project's file must not be able to point the
    operator's key from the environment at a server of their own.
    """
    keys = _keys(provider)
    found = _find_key(provider, data_root, project_id)
    operator_url = (setting or "").strip() or os.environ.get(keys.base_url_var, "").strip() or None
    key_from_environment = found is not None and found[0] in keys.api_key_vars
    if operator_url is not None or key_from_environment:
        base_url = operator_url
    else:
        base_url = resolve_base_url(provider, data_root=data_root, project_id=project_id)
    if found is not None:
        return Endpoint(base_url=base_url, api_key=found[1])
    if _keyless(provider, base_url):
        return Endpoint(base_url=base_url, api_key=NO_KEY_PLACEHOLDER)
    raise MissingCredentials(provider, keys.api_key_vars)


def has_credentials(
    provider: str,
    *,
    data_root: DataRoot | None = None,
    project_id: str | None = None,
    base_url: str | None = None,
) -> str | None:
    """Where the key would come from (a variable name or the credential file), never the key itself.

    None when there is none. An insecure credential file still raises :class:`InsecureCredentials`,
    so that ``neuralis doctor`` can say how to fix it.
    """
    found = _find_key(provider, data_root, project_id)
    if found is not None:
        return found[0]
    url = base_url or resolve_base_url(provider, data_root=data_root, project_id=project_id)
    if _keyless(provider, url):
        return f"{_keys(provider).base_url_var}={url} (no key needed)"
    return None
