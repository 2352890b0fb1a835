"""The public names of ``neuralis_jupyter.packages``: a name that leaks or disappears fails here."""

from __future__ import annotations

import subprocess
import sys

import neuralis_jupyter.packages as packages

EXPECTED = {
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
}


def test_all_is_pinned():
    assert set(packages.__all__) == EXPECTED
    assert len(packages.__all__) == len(EXPECTED)


def test_every_exported_name_resolves():
    for name in packages.__all__:
        assert getattr(packages, name) is not None, name


def test_importing_has_no_side_effects():
    code = (
        "import logging, neuralis_jupyter.packages as p;"
        "from neuralis_jupyter.packages import _schemas;"
        "print(_schemas.load_schema.cache_info().currsize, _schemas.validator.cache_info().currsize)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "0"]
    assert out.stderr == ""
