from __future__ import annotations

import json
import re

import pytest
from traitlets import TraitType

from neuralis_jupyter._resources import builtin_package_dir
from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.contracts import DEFAULT_ROLES, FEATURES
from neuralis_jupyter.packages import ManifestError, load_manifest, package_slug, parse_manifest
from neuralis_jupyter.packages._schemas import load_schema

from .builders import manifest


def shipped():
    return load_manifest(builtin_package_dir("agent-core"), builtin=True)


def test_the_shipped_manifest_validates_as_first_party():
    m = shipped()
    assert m.id == "@neuralis/agent-core"
    assert m.trust == m.declared_trust == "first-party"
    assert m.slug == "agent-core"
    assert len(m.description) <= 80


def test_the_shipped_features_are_the_platform_taxonomy_with_its_default_grants():
    m = shipped()
    assert [f.id for f in m.features] == list(FEATURES)
    for feature in m.features:
        assert (feature.title, feature.description) == (
            FEATURES[feature.id].title,
            FEATURES[feature.id].description,
        )
        holders = {name for name, r in DEFAULT_ROLES.items() if {"*", feature.id} & set(r.granted_features)}
        assert set(feature.default_grants) == holders, feature.id


def test_the_schema_role_names_are_the_default_roles():
    assert load_schema("manifest")["$defs"]["roleName"]["enum"] == list(DEFAULT_ROLES)


def test_declared_config_settings_name_real_traits_with_their_defaults():
    settings = NeuralisSettings()
    traits = NeuralisSettings.class_traits(config=True)
    for setting in shipped().config_settings:
        assert setting.key in traits, setting.key
        assert isinstance(traits[setting.key], TraitType)
        assert getattr(settings, setting.key) == setting.default


def test_shipped_uri_policies_resolve_into_the_own_zone():
    resolved = [p.resolve("agent-core").pattern for p in shipped().uri_policies]
    assert resolved
    assert all(p.startswith(("data://agent-core/", "packages://agent-core/")) for p in resolved)


@pytest.mark.parametrize("package_id", ["@neuralis/brain-core", "@neuralis/agent-core", "agent-core"])
@pytest.mark.parametrize("trust", ["trusted", "untrusted"])
def test_a_reserved_package_id_is_refused_below_first_party(package_id, trust):
    with pytest.raises(ManifestError, match=f"package id '{package_id}' is reserved"):
        parse_manifest(manifest(package_id, trust=trust), builtin=False)


@pytest.mark.parametrize("cred", ["git.github.pat", "mcp.github.token", "telegram.bot", "WhatsApp.token"])
def test_a_reserved_credential_class_is_refused_below_first_party(cred):
    raw = manifest("acme-tools", credentials=[{"id": cred, "label": "x"}])
    with pytest.raises(ManifestError, match=f"credential id '{cred}'"):
        parse_manifest(raw, builtin=False)
    # The same declaration is the builtin's to make.
    ok = parse_manifest(
        manifest("@neuralis/agent-core", trust="first-party", credentials=[{"id": cred, "label": "x"}]),
        builtin=True,
    )
    assert ok.credentials[0].id == cred


def test_a_platform_feature_id_is_refused_below_first_party():
    raw = manifest("acme-tools", features=[{"id": "core.execute", "title": "t", "description": "d"}])
    with pytest.raises(ManifestError, match=re.escape("feature id 'core.execute' is a platform feature")):
        parse_manifest(raw, builtin=False)
    own = parse_manifest(
        manifest("acme-tools", features=[{"id": "acme.use", "title": "t", "description": "d"}]), builtin=False
    )
    assert own.features[0].id == "acme.use"


def test_first_party_outside_the_builtin_is_clamped_to_trusted():
    m = parse_manifest(manifest("acme-tools", trust="first-party"), builtin=False)
    assert (m.declared_trust, m.trust, m.clamped) == ("first-party", "trusted", True)
    assert parse_manifest(manifest("acme-tools", trust="untrusted"), builtin=False).trust == "untrusted"
    assert parse_manifest(manifest("acme-tools", trust="first-party"), builtin=True).trust == "first-party"


def test_the_clamp_happens_before_the_reserved_check():
    with pytest.raises(
        ManifestError, match="reserved for first-party packages \\(this package is trusted\\)"
    ):
        parse_manifest(manifest("@neuralis/agent-core", trust="first-party"), builtin=False)


@pytest.mark.parametrize(
    "pattern",
    ["data://<self>/**", "packages://<self>/src/**", "data://acme-tools/$self/**", "data://<self>"],
)
def test_uri_policies_in_the_own_namespace_are_accepted(pattern):
    raw = manifest(
        "acme-tools", uriPolicies=[{"pattern": pattern, "read": True, "write": False, "exec": False}]
    )
    assert parse_manifest(raw, builtin=False).uri_policies[0].pattern == pattern


@pytest.mark.parametrize(
    "pattern",
    [
        "data://agent-core/**",
        "data://**",
        "file:///etc/**",
        "packages://other/**",
        "data://<self>/../agent-core/**",
    ],
)
def test_a_foreign_uri_namespace_is_refused(pattern):
    raw = manifest(
        "acme-tools", uriPolicies=[{"pattern": pattern, "read": True, "write": True, "exec": False}]
    )
    with pytest.raises(ManifestError, match="uri policy"):
        parse_manifest(raw, builtin=False)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"version": "1.0"}, "version"),
        ({"version": "01.0.0"}, "version"),
        ({"trust": "root"}, "trust"),
        ({"id": "Acme Tools"}, "id"),
        ({"surprise": 1}, "(root)"),
        (
            {"features": [{"id": "x", "title": "t", "description": "d", "defaultGrants": ["superuser"]}]},
            "features/0/defaultGrants/0",
        ),
        ({"dataLayout": {"package": ["../escape"]}}, "dataLayout/package/0"),
    ],
)
def test_schema_violations_name_the_field(change, where):
    with pytest.raises(ManifestError, match=re.escape(f"neuralis.json: {where}:")):
        parse_manifest({**manifest("acme-tools"), **change}, builtin=False)


def test_semver_with_prerelease_and_build_is_accepted():
    assert parse_manifest({**manifest("acme-tools"), "version": "2.1.0-rc.1+build.5"}, builtin=False).version


def test_a_duplicate_declaration_is_refused():
    raw = manifest("acme-tools", credentials=[{"id": "A_KEY", "label": "a"}, {"id": "A_KEY", "label": "b"}])
    with pytest.raises(ManifestError, match="credential 'A_KEY' is declared twice"):
        parse_manifest(raw, builtin=False)


def test_load_manifest_reports_a_missing_or_broken_file(tmp_path):
    with pytest.raises(ManifestError, match="missing"):
        load_manifest(tmp_path, builtin=False)
    (tmp_path / "neuralis.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(tmp_path, builtin=False)
    (tmp_path / "neuralis.json").write_text(json.dumps(manifest("acme-tools")), encoding="utf-8")
    assert load_manifest(tmp_path, builtin=False).id == "acme-tools"


def test_package_slugs_never_collide_across_forms():
    assert package_slug("@neuralis/agent-core") == "agent-core"
    assert package_slug("@acme/tools") == "acme_tools"
    assert package_slug("acme-tools") == "acme-tools"
