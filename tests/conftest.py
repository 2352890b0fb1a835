"""Shared fixtures. Every test runs against its own data root; nothing touches the real home or network."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from neuralis_jupyter.store.sql import dispose_engines
from neuralis_jupyter.testing.fixtures import fake_llm  # noqa: F401

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _loopback_only(sock: socket.socket, address: object) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
        host = str(address[0])
        try:
            loopback = ipaddress.ip_address(host.split("%")[0]).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise OSError(f"the test suite refuses to reach {host}: tests never use the network")


def _guarded_connect(self: socket.socket, address: object) -> None:
    _loopback_only(self, address)
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: object) -> int:
    _loopback_only(self, address)
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True, scope="session")
def no_network():
    """Any connection to a non-loopback address fails, whatever library opens it."""
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
    yield
    socket.socket.connect = _real_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _real_connect_ex  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def neuralis_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """A private data root and Jupyter config path for each test."""
    home = tmp_path_factory.mktemp("neuralis-home")
    monkeypatch.setenv("NEURALIS_HOME", str(home))
    monkeypatch.delenv("NEURALIS_STORE_URL", raising=False)
    monkeypatch.setenv("NEURALIS_USER", "alice")
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(home / ".jupyter-config"))
    monkeypatch.setenv("JUPYTER_NO_CONFIG", "1")
    monkeypatch.setenv("NEURALIS_MODEL_REQUESTS", "loopback")
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    yield home
    dispose_engines()
