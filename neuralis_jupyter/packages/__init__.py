"""Packages: manifests, discovery, the loader, per-caller views and in-process package APIs.

Typical use::

    packages = PackageLoader.from_settings(settings).load()
    packages.bind_handlers(AGENT_CORE_ID, {"execute": execute_handler, ...})
    registry = packages.tool_registry(session)          # runtime Tools the caller may use
    prompt = [render_placeholders(f.body, session) for f in packages.prompt_files(session)]
    overview = packages.overview(session)
    packages.health()                                   # every package, refused ones with their code
"""

from .api import AgentCoreApi, AgentDirectory, PackageApi
from .discovery import (
    MAX_AGENT_DESCRIPTION_CHARS,
    AgentDecl,
    Contributions,
    PromptCategory,
    PromptFile,
    SkillDecl,
    ToolDecl,
    discover,
)
from .errors import (
    REFUSAL_CODES,
    CrossPackageSessionRequired,
    FrontmatterError,
    HandlerBindingError,
    ManifestError,
    PackageApiUnavailable,
    PackageContentError,
    PackageError,
    RefusalCode,
    UnknownPackage,
)
from .frontmatter import Frontmatter, parse_frontmatter
from .loader import ENTRY_POINT_GROUP, PackageLoader
from .manifest import (
    MANIFEST_FILE,
    ConfigSetting,
    CredentialDecl,
    DataLayout,
    FeatureDecl,
    Manifest,
    Trust,
    UriPolicy,
    load_manifest,
    package_slug,
    parse_manifest,
)
from .packageset import AGENT_CORE_ID, PackageSet
from .prompt import PLACEHOLDERS, render_overview, render_placeholders
from .visibility import HealthEntry, LoadedPackage, RefusedPackage, VisiblePackage

__all__ = [
    "AGENT_CORE_ID",
    "ENTRY_POINT_GROUP",
    "MANIFEST_FILE",
    "MAX_AGENT_DESCRIPTION_CHARS",
    "PLACEHOLDERS",
    "REFUSAL_CODES",
    "AgentCoreApi",
    "AgentDecl",
    "AgentDirectory",
    "ConfigSetting",
    "Contributions",
    "CredentialDecl",
    "CrossPackageSessionRequired",
    "DataLayout",
    "FeatureDecl",
    "Frontmatter",
    "FrontmatterError",
    "HandlerBindingError",
    "HealthEntry",
    "LoadedPackage",
    "Manifest",
    "ManifestError",
    "PackageApi",
    "PackageApiUnavailable",
    "PackageContentError",
    "PackageError",
    "PackageLoader",
    "PackageSet",
    "PromptCategory",
    "PromptFile",
    "RefusalCode",
    "RefusedPackage",
    "SkillDecl",
    "ToolDecl",
    "Trust",
    "UnknownPackage",
    "UriPolicy",
    "VisiblePackage",
    "discover",
    "load_manifest",
    "package_slug",
    "parse_frontmatter",
    "parse_manifest",
    "render_overview",
    "render_placeholders",
]
