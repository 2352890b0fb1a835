"""The package manifest ``neuralis.json``: schema validation, trust clamp and reserved ids.

The manifest says who a package is (``id``, ``version``), how far it is trusted (``trust``), and what
it documents (features with default grants, uri policies, credentials, config settings, data layout).
Authorization never reads a manifest: the feature taxonomy and role grants live in
``contracts.access``; a manifest's ``features`` are declarative documentation.

Trust. Only the builtin package (shipped inside the wheel) may be first-party. A package from an extra
root or an installed distribution that claims first-party is CLAMPED to trusted (logged, and noted in
``health()``); it is not refused, since its content may be fine, but it gets no first-party powers.
The reserved-id rules then apply to the clamped tier, so a clamped package declaring a reserved id is
refused.

Reserved ids, declarable only by a first-party manifest: package ids ``@neuralis/*`` and
``agent-core``; credential ids of the self-scope classes ``git.*``, ``mcp.*``, ``telegram.*`` and
``whatsapp.*``; and the platform's own feature ids (``contracts.access.FEATURES``).

``uriPolicies`` patterns stay inside the package's own namespace, ``data://<self>/...`` or
``packages://<self>/...``, where ``<self>`` is the placeholder or the package's literal slug.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

from ..contracts.access import FEATURES
from ._schemas import describe_errors
from .errors import ManifestError

__all__ = [
    "MANIFEST_FILE",
    "RESERVED_CREDENTIAL_PREFIXES",
    "ConfigSetting",
    "CredentialDecl",
    "DataLayout",
    "FeatureDecl",
    "Manifest",
    "Trust",
    "UriPolicy",
    "is_reserved_package_id",
    "load_manifest",
    "package_slug",
    "parse_manifest",
]

log = logging.getLogger(__name__)

MANIFEST_FILE = "neuralis.json"
Trust = Literal["first-party", "trusted", "untrusted"]
ConfigType = Literal["string", "integer", "number", "boolean", "json"]
RESERVED_CREDENTIAL_PREFIXES: tuple[str, ...] = ("git.", "mcp.", "telegram.", "whatsapp.")
_SELF = "<self>"


@dataclass(frozen=True, kw_only=True)
class FeatureDecl:
    id: str
    title: str
    description: str
    default_grants: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class UriPolicy:
    pattern: str
    read: bool
    write: bool
    exec: bool
    #: Roles the rule applies to; None applies it to every role.
    roles: tuple[str, ...] | None = None

    def resolve(self, slug: str) -> UriPolicy:
        """This policy with ``<self>`` replaced by ``slug``."""
        return replace(self, pattern=self.pattern.replace(_SELF, slug))


@dataclass(frozen=True, kw_only=True)
class CredentialDecl:
    id: str
    label: str
    category: str | None = None
    oauth: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class ConfigSetting:
    key: str
    type: ConfigType
    default: Any
    description: str


@dataclass(frozen=True, kw_only=True)
class DataLayout:
    package: tuple[str, ...] = ()
    per_agent: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Manifest:
    id: str
    version: str
    #: The effective tier, after the clamp.
    trust: Trust
    #: What the manifest claimed.
    declared_trust: Trust
    description: str
    features: tuple[FeatureDecl, ...] = ()
    uri_policies: tuple[UriPolicy, ...] = ()
    credentials: tuple[CredentialDecl, ...] = ()
    config_settings: tuple[ConfigSetting, ...] = ()
    data_layout: DataLayout = DataLayout()
    provides: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        return package_slug(self.id)

    @property
    def clamped(self) -> bool:
        return self.trust != self.declared_trust


def package_slug(package_id: str) -> str:
    """The package's namespace name: ``@neuralis/x`` -> ``x``, ``@scope/x`` -> ``scope_x``, ``x`` -> ``x``.

    Plain ids cannot contain ``_``, so a scoped slug never equals a plain one.
    """
    if package_id.startswith("@neuralis/"):
        return package_id.removeprefix("@neuralis/")
    if package_id.startswith("@") and "/" in package_id:
        scope, name = package_id[1:].split("/", 1)
        return f"{scope}_{name}"
    return package_id


def is_reserved_package_id(package_id: str) -> bool:
    return package_id.startswith("@neuralis/") or package_id == "agent-core"


def load_manifest(folder: Path, *, builtin: bool) -> Manifest:
    """Read and validate ``folder/neuralis.json``; ``builtin`` is True only for the shipped package."""
    path = folder / MANIFEST_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{MANIFEST_FILE} is missing from {folder}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{MANIFEST_FILE} is not valid JSON: {exc}") from None
    return parse_manifest(raw, builtin=builtin)


def parse_manifest(raw: object, *, builtin: bool) -> Manifest:
    """Validate a parsed manifest, clamp its trust, and apply the reserved-id rules."""
    problem = describe_errors("manifest", raw)
    if problem is not None:
        raise ManifestError(f"{MANIFEST_FILE}: {problem}")
    data = cast(dict[str, Any], raw)
    declared: Trust = data["trust"]
    trust: Trust = declared
    if declared == "first-party" and not builtin:
        trust = "trusted"
        log.warning("package %s claims first-party trust outside the builtin; clamped to trusted", data["id"])
    manifest = Manifest(
        id=data["id"],
        version=data["version"],
        trust=trust,
        declared_trust=declared,
        description=data["description"],
        features=tuple(
            FeatureDecl(
                id=f["id"],
                title=f["title"],
                description=f["description"],
                default_grants=tuple(f.get("defaultGrants", ())),
            )
            for f in data.get("features", ())
        ),
        uri_policies=tuple(
            UriPolicy(
                pattern=p["pattern"],
                read=p["read"],
                write=p["write"],
                exec=p["exec"],
                roles=tuple(p["roles"]) if "roles" in p else None,
            )
            for p in data.get("uriPolicies", ())
        ),
        credentials=tuple(
            CredentialDecl(id=c["id"], label=c["label"], category=c.get("category"), oauth=c.get("oauth"))
            for c in data.get("credentials", ())
        ),
        config_settings=tuple(
            ConfigSetting(key=s["key"], type=s["type"], default=s["default"], description=s["description"])
            for s in data.get("configSettings", ())
        ),
        data_layout=DataLayout(
            package=tuple(data.get("dataLayout", {}).get("package", ())),
            per_agent=tuple(data.get("dataLayout", {}).get("perAgent", ())),
        ),
        provides=tuple(data.get("provides", ())),
        requires=tuple(data.get("requires", ())),
    )
    _check_unique(manifest)
    _check_uri_policies(manifest)
    if manifest.trust != "first-party":
        _check_reserved(manifest)
    return manifest


def _check_unique(manifest: Manifest) -> None:
    for label, ids in (
        ("feature", [f.id for f in manifest.features]),
        ("credential", [c.id for c in manifest.credentials]),
        ("config setting", [s.key for s in manifest.config_settings]),
    ):
        seen: set[str] = set()
        for item in ids:
            if item in seen:
                raise ManifestError(f"{MANIFEST_FILE}: {label} {item!r} is declared twice")
            seen.add(item)


_URI = re.compile(r"^(data|packages)://([^/]+)(/.*)?$")


def _check_uri_policies(manifest: Manifest) -> None:
    own = {_SELF, manifest.slug}
    for policy in manifest.uri_policies:
        match = _URI.match(policy.pattern)
        if match is None or match.group(2) not in own:
            raise ManifestError(
                f"{MANIFEST_FILE}: uri policy {policy.pattern!r} is outside the package's own namespace; "
                f"use data://<self>/... or packages://<self>/..."
            )
        if ".." in (match.group(3) or "").split("/"):
            raise ManifestError(f"{MANIFEST_FILE}: uri policy {policy.pattern!r} climbs out with '..'")


def _check_reserved(manifest: Manifest) -> None:
    tier = manifest.trust
    if is_reserved_package_id(manifest.id):
        raise ManifestError(
            f"{MANIFEST_FILE}: package id {manifest.id!r} is reserved for first-party packages "
            f"(this package is {tier}); choose an id of your own"
        )
    for cred in manifest.credentials:
        prefix = next((p for p in RESERVED_CREDENTIAL_PREFIXES if cred.id.lower().startswith(p)), None)
        if prefix is not None:
            raise ManifestError(
                f"{MANIFEST_FILE}: credential id {cred.id!r} is in the reserved {prefix}* class, which only "
                f"a first-party package may declare (this package is {tier})"
            )
    for feature in manifest.features:
        if feature.id in FEATURES:
            raise ManifestError(
                f"{MANIFEST_FILE}: feature id {feature.id!r} is a platform feature, which only a "
                f"first-party package may declare (this package is {tier})"
            )
