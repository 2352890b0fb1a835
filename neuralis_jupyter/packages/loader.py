"""Find and load packages; refuse a bad one alone and go on.

Sources, in load order:

1. the builtin ``agent-core`` folder shipped in the wheel (the only package that may be first-party);
2. each folder in ``NeuralisSettings.package_roots``, in the order given: a root holding a
   ``neuralis.json`` is a package itself, otherwise each sub-folder holding one is (by name);
3. installed distributions through the entry-point group ``neuralis.packages`` (by distribution, then
   entry-point name). An entry point loads to a module or object with ``PACKAGE_ROOT`` (the package
   folder), and optionally ``TOOL_HANDLERS`` (``{tool name: async handler}``), ``API`` (its in-process
   API object) and ``start()`` (a synchronous hook run once the package passed every check).

A package is refused, with one closed code and a one-line reason in ``health()``, when:

- ``load_failed``: its manifest, a tool file or a markdown file is invalid, a reserved id is claimed
  without first-party trust, its entry point does not import, or ``TOOL_HANDLERS`` names an
  undeclared tool;
- ``conflict``: an earlier package already has its id or slug, or one of its tool, agent or skill names;
- ``start_failed``: its ``start()`` raised (or returned an awaitable instead of running).

A refused package contributes nothing; the packages after it load normally.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._resources import builtin_package_dir
from ..runtime.tools import Handler
from .discovery import discover
from .errors import PackageContentError, RefusalCode
from .manifest import MANIFEST_FILE, load_manifest
from .packageset import PackageSet
from .visibility import LoadedPackage, RefusedPackage

if TYPE_CHECKING:
    from ..config import NeuralisSettings

__all__ = ["ENTRY_POINT_GROUP", "PackageLoader"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "neuralis.packages"
_MAX_REASON = 300


@dataclass(frozen=True, kw_only=True)
class _Plugin:
    """What an entry point exposes."""

    root: Path
    handlers: Mapping[str, Handler] = field(default_factory=dict)
    api: object | None = None
    start: Callable[[], object] | None = None


class PackageLoader:
    """Loads the builtin package, extra roots and entry-point packages into a :class:`PackageSet`."""

    def __init__(
        self,
        *,
        builtin_root: Path | None,
        roots: Sequence[Path | str] = (),
        entry_points: bool = True,
        entry_point_group: str = ENTRY_POINT_GROUP,
        trusted: Collection[str] = (),
    ) -> None:
        """``builtin_root=None`` loads no builtin package (the shipped one: ``builtin_package_dir``).

        A package's manifest may ask for ``trusted``; it gets it only when the operator lists its id in
        ``trusted``. Otherwise it loads as ``untrusted``: the trust ceiling keeps writes, code execution
        and egress from it. A package cannot grant itself authority.
        """
        self.builtin_root = builtin_root
        self.roots = tuple(Path(r).expanduser() for r in roots)
        self.entry_points = entry_points
        self.entry_point_group = entry_point_group
        self.trusted = frozenset(trusted)

    @classmethod
    def from_settings(cls, settings: NeuralisSettings, *, entry_points: bool = True) -> PackageLoader:
        """The shipped agent-core plus ``settings.package_roots`` (plus entry points unless turned off)."""
        return cls(
            builtin_root=builtin_package_dir("agent-core"),
            roots=list(settings.package_roots),
            entry_points=entry_points,
            trusted=list(settings.trusted_packages),
        )

    def load(self) -> PackageSet:
        run = _LoadRun(self.trusted)
        if self.builtin_root is not None:
            run.add(self.builtin_root, source="builtin", builtin=True)
        for root in self.roots:
            if not root.is_dir():
                run.refuse(
                    str(root), "load_failed", "package root does not exist or is not a folder", f"root:{root}"
                )
                continue
            if (root / MANIFEST_FILE).is_file():
                folders = [root]
            else:
                folders = sorted(p for p in root.iterdir() if p.is_dir() and (p / MANIFEST_FILE).is_file())
            for folder in folders:
                run.add(folder, source=f"root:{folder}", builtin=False)
        if self.entry_points:
            eps = importlib.metadata.entry_points(group=self.entry_point_group)
            for ep in sorted(eps, key=lambda e: (e.dist.name if e.dist else "", e.name)):
                source = f"entry-point:{ep.dist.name if ep.dist else '?'}:{ep.name}"
                try:
                    plugin = _plugin(ep.load())
                except Exception as exc:
                    run.refuse(ep.name, "load_failed", f"entry point {ep.value!r}: {_say(exc)}", source)
                    continue
                run.add(plugin.root, source=source, builtin=False, plugin=plugin)
        packages = PackageSet(run.outcomes)
        for package_id, plugin in run.plugins:
            if plugin.handlers:
                packages.bind_handlers(package_id, plugin.handlers)
            if plugin.api is not None:
                packages.register_api(package_id, plugin.api)
        return packages


class _LoadRun:
    """The state of one ``load()``: outcomes so far and the names they took."""

    def __init__(self, trusted: frozenset[str]) -> None:
        self.trusted = trusted
        self.outcomes: list[LoadedPackage | RefusedPackage] = []
        self.plugins: list[tuple[str, _Plugin]] = []
        self._taken: dict[tuple[str, str], str] = {}

    def refuse(self, package_id: str, code: RefusalCode, reason: str, source: str) -> None:
        line = " ".join(reason.split())
        if len(line) > _MAX_REASON:
            line = line[: _MAX_REASON - 3] + "..."
        log.warning("package %s refused (%s): %s [%s]", package_id, code, line, source)
        self.outcomes.append(RefusedPackage(id=package_id, code=code, reason=line, source=source))

    def add(self, folder: Path, *, source: str, builtin: bool, plugin: _Plugin | None = None) -> None:
        try:
            package = _read(folder, source=source, builtin=builtin, trusted=self.trusted)
            if plugin is not None:
                declared = {t.name for t in package.contributions.tools}
                stray = sorted(set(plugin.handlers) - declared)
                if stray:
                    raise PackageContentError(f"TOOL_HANDLERS names undeclared tool(s) {stray}")
        except Exception as exc:
            self.refuse(_raw_id(folder) or folder.name, "load_failed", _say(exc), source)
            return
        clash = self._clash(package)
        if clash is not None:
            self.refuse(package.id, "conflict", clash, source)
            return
        if plugin is not None and plugin.start is not None:
            try:
                result = plugin.start()
                if inspect.isawaitable(result):
                    if inspect.iscoroutine(result):
                        result.close()
                    raise TypeError("start() returned an awaitable; it must run synchronously")
            except Exception as exc:
                self.refuse(package.id, "start_failed", f"start(): {_say(exc)}", source)
                return
        for key in self._names(package):
            self._taken[key] = package.id
        self.outcomes.append(package)
        if plugin is not None:
            self.plugins.append((package.id, plugin))
        log.info("package %s %s loaded (%s, %s)", package.id, package.manifest.version, package.trust, source)

    @staticmethod
    def _names(package: LoadedPackage) -> list[tuple[str, str]]:
        c = package.contributions
        return [
            ("package id", package.id),
            ("package slug", package.manifest.slug),
            *(("tool", t.name) for t in c.tools),
            *(("agent", a.name) for a in c.agents),
            *(("skill", s.name) for s in c.skills),
        ]

    def _clash(self, package: LoadedPackage) -> str | None:
        for kind, name in self._names(package):
            owner = self._taken.get((kind, name))
            if owner is not None:
                return f"{kind} {name!r} is already taken by package {owner!r}, loaded earlier"
        return None


def _read(folder: Path, *, source: str, builtin: bool, trusted: frozenset[str]) -> LoadedPackage:
    manifest = load_manifest(folder, builtin=builtin)
    if not builtin and manifest.trust == "trusted" and manifest.id not in trusted:
        manifest = replace(manifest, trust="untrusted")
    contributions = discover(
        folder,
        package_id=manifest.id,
        first_party=manifest.trust == "first-party",
        declared_features=frozenset(f.id for f in manifest.features),
    )
    notes = list(contributions.warnings)
    if manifest.clamped:
        why = (
            "not the builtin"
            if manifest.trust == "trusted"
            else "not listed in c.NeuralisSettings.trusted_packages"
        )
        notes.insert(0, f"claims {manifest.declared_trust} trust; clamped to {manifest.trust} ({why})")
    return LoadedPackage(
        manifest=manifest, contributions=contributions, root=folder, source=source, notes=tuple(notes)
    )


def _plugin(obj: Any) -> _Plugin:
    root = getattr(obj, "PACKAGE_ROOT", None)
    if not isinstance(root, str | Path) or not Path(root).is_dir():
        raise PackageContentError(f"PACKAGE_ROOT must name the package folder, got {root!r}")
    handlers = getattr(obj, "TOOL_HANDLERS", None) or {}
    if not isinstance(handlers, Mapping) or not all(callable(h) for h in handlers.values()):
        raise PackageContentError("TOOL_HANDLERS must map tool names to async handlers")
    start = getattr(obj, "start", None)
    if start is not None and not callable(start):
        raise PackageContentError("start must be a callable")
    return _Plugin(root=Path(root), handlers=dict(handlers), api=getattr(obj, "API", None), start=start)


def _raw_id(folder: Path) -> str | None:
    """The manifest's id when it can be read at all, for naming a refused package."""
    try:
        raw = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    value = raw.get("id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and value else None


def _say(exc: BaseException) -> str:
    if isinstance(exc, PackageContentError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
