"""Package errors.

PackageError
├── PackageContentError        a manifest, tool file or markdown file is invalid (refuses its package)
│   ├── ManifestError          neuralis.json fails the schema or a trust rule
│   └── FrontmatterError       a markdown file's ``---`` block cannot be read
├── UnknownPackage             no loaded package has that id (also a LookupError)
├── HandlerBindingError        a handler names a tool the package does not declare, or is bound twice
└── PackageApiUnavailable      a package registered no in-process API, or a late binding is missing

CrossPackageSessionRequired    an in-process API call without a CrossPackageSession (a PermissionError)

A content error never escapes the loader: it becomes that package's ``load_failed`` refusal in
``PackageSet.health()`` and the other packages load on.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "REFUSAL_CODES",
    "CrossPackageSessionRequired",
    "FrontmatterError",
    "HandlerBindingError",
    "ManifestError",
    "PackageApiUnavailable",
    "PackageContentError",
    "PackageError",
    "RefusalCode",
    "UnknownPackage",
]

RefusalCode = Literal["load_failed", "start_failed", "conflict"]
REFUSAL_CODES: tuple[RefusalCode, ...] = ("load_failed", "start_failed", "conflict")


class PackageError(Exception):
    """Base of every package error."""


class PackageContentError(PackageError, ValueError):
    """A package file is invalid; the message names the file and what to fix."""


class ManifestError(PackageContentError):
    """``neuralis.json`` fails its schema or a trust rule."""


class FrontmatterError(PackageContentError):
    """A markdown file's frontmatter block cannot be parsed."""


class UnknownPackage(PackageError, LookupError):
    def __init__(self, package_id: str) -> None:
        self.package_id = package_id
        super().__init__(
            f"no loaded package has id {package_id!r}; see PackageSet.health() for refused packages"
        )

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.package_id,))


class HandlerBindingError(PackageError, ValueError):
    """A handler binding that does not match the package's declared tools."""


class PackageApiUnavailable(PackageError):
    """The package registered no in-process API, or the API's late binding has not happened yet."""


class CrossPackageSessionRequired(PermissionError):
    """An in-process package API call that carries no CrossPackageSession."""

    def __init__(self, package_id: str, what: str, got: str) -> None:
        self.package_id = package_id
        self.what = what
        self.got = got
        super().__init__(
            f"{what} of package {package_id!r} needs a CrossPackageSession (build one with "
            f"CrossPackageSession(..., caller_package_id=<your package id>) or create_system_session()); "
            f"got {got}"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.package_id, self.what, self.got))
