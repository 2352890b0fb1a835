from __future__ import annotations

import pytest

from neuralis_jupyter._resources import builtin_package_dir
from neuralis_jupyter.contracts import create_system_session
from neuralis_jupyter.packages import (
    AGENT_CORE_ID,
    CrossPackageSessionRequired,
    HandlerBindingError,
    PackageApiUnavailable,
    PackageLoader,
    UnknownPackage,
)

from .builders import cross_session, session_for, write_package


@pytest.fixture
def packages(tmp_path):
    write_package(tmp_path / "acme", "acme-tools")
    return PackageLoader(
        builtin_root=builtin_package_dir("agent-core"), roots=[tmp_path / "acme"], entry_points=False
    ).load()


def test_get_package_api_refuses_a_plain_session(packages):
    with pytest.raises(
        CrossPackageSessionRequired, match="get_package_api\\(\\) of package '@neuralis/agent-core'"
    ):
        packages.get_package_api(AGENT_CORE_ID, session_for("owner"))
    assert issubclass(CrossPackageSessionRequired, PermissionError)


def test_get_package_api_accepts_a_cross_package_or_system_session(packages):
    assert (
        repr(packages.get_package_api(AGENT_CORE_ID, cross_session())) == "<PackageApi @neuralis/agent-core>"
    )
    assert packages.get_package_api("agent-core", create_system_session("bootstrap", AGENT_CORE_ID))


def test_every_call_must_carry_a_cross_package_session(packages):
    api = packages.get_package_api(AGENT_CORE_ID, cross_session())
    with pytest.raises(CrossPackageSessionRequired, match="a plain SessionContext"):
        api.package_health(session_for("owner"))
    with pytest.raises(CrossPackageSessionRequired, match="no session"):
        api.package_health()
    with pytest.raises(CrossPackageSessionRequired, match="a str where the session belongs"):
        api.package_health("alice")
    health = api.package_health(cross_session())
    assert [e["id"] for e in health] == [AGENT_CORE_ID, "acme-tools"]
    assert api.package_health(session=cross_session()) == health


def test_the_guard_exposes_public_methods_only(packages):
    api = packages.get_package_api(AGENT_CORE_ID, cross_session())
    with pytest.raises(AttributeError, match="private"):
        api._bind_directory(lambda s: [])
    with pytest.raises(AttributeError, match="private"):
        _ = api._health
    with pytest.raises(AttributeError, match="read-only"):
        api.list_agents = None


def test_list_agents_delegates_to_the_directory_bound_later(packages):
    api = packages.get_package_api(AGENT_CORE_ID, cross_session())
    with pytest.raises(PackageApiUnavailable, match="no agent directory yet"):
        api.list_agents(cross_session())
    seen = []

    def directory(session):
        seen.append(session.caller_package_id)
        return [{"id": "assistant"}]

    packages.bind_agent_directory(directory)
    assert api.list_agents(cross_session("acme-tools")) == [{"id": "assistant"}]
    assert seen == ["acme-tools"]


def test_registered_apis_and_their_errors(packages):
    with pytest.raises(PackageApiUnavailable, match="registered no in-process API"):
        packages.get_package_api("acme-tools", cross_session())

    class AcmeApi:
        def count(self, session, n):
            return n + 1

    packages.register_api("acme-tools", AcmeApi())
    assert packages.get_package_api("acme-tools", cross_session()).count(cross_session(), 1) == 2
    with pytest.raises(HandlerBindingError, match="already registered"):
        packages.register_api("acme-tools", AcmeApi())
    with pytest.raises(UnknownPackage):
        packages.get_package_api("nobody", cross_session())
    with pytest.raises(UnknownPackage):
        packages.register_api("nobody", AcmeApi())
