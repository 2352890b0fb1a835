"""The "no real model request in tests" guard, and the one HTTP client both providers use.

With ``NEURALIS_MODEL_REQUESTS=loopback`` in the environment, a model request to any host that is not
a loopback address (``127.0.0.0/8``, ``::1``, ``localhost``) raises :class:`ModelRequestBlocked`
before a connection is opened. The check runs twice:

* :func:`check_url` up front, on the provider's base URL, so a misconfigured test fails at once
  (the Anthropic SDK would otherwise wrap the error in ``APIConnectionError`` and retry it);
* a request event hook on the ``httpx2.AsyncClient`` from :func:`build_http_client`, which sees
  every request the SDK actually sends, redirects included.

The hook reads the environment on every request rather than once at client construction, so a test
that sets the variable after building a model is still guarded. Both SDKs (anthropic 2.x, openai 3.x)
are built on ``httpx2``, not ``httpx``; the Anthropic SDK refuses an ``httpx`` client outright.
"""

from __future__ import annotations

import ipaddress
import os
from functools import cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .errors import ModelRequestBlocked

if TYPE_CHECKING:
    import ssl

    import httpx2

__all__ = ["GUARD_ENV", "blocked_cause", "build_http_client", "check_url", "guard_active", "is_loopback_host"]

GUARD_ENV = "NEURALIS_MODEL_REQUESTS"
#: The SDKs' own connect timeout; the read timeout is the caller's.
_CONNECT_TIMEOUT = 5.0


def guard_active() -> bool:
    """True when model requests are restricted to loopback hosts."""
    return os.environ.get(GUARD_ENV, "").strip().lower() == "loopback"


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a literal loopback address; a name that merely resolves to one is not enough."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def check_url(url: str) -> None:
    """Raise :class:`ModelRequestBlocked` if the guard is on and ``url`` is not on a loopback host."""
    if guard_active() and not is_loopback_host(urlsplit(url).hostname or ""):
        raise ModelRequestBlocked(url)


async def _guard_request(request: httpx2.Request) -> None:
    if guard_active() and not is_loopback_host(request.url.host):
        raise ModelRequestBlocked(str(request.url))


@cache
def _ssl_context() -> ssl.SSLContext:
    # Building the default context (loading the CA bundle) takes ~15 ms of blocked event loop; the
    # providers build a client per call, so they share one context, made on first use.
    import httpx2

    return httpx2.create_ssl_context()


def build_http_client(*, timeout: float = 600.0) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` with the SDKs' defaults plus the loopback guard.

    The guard is a request hook, not a transport wrapper: passing ``transport=`` would make httpx2
    ignore the proxy environment variables, which real deployments behind a proxy rely on.
    """
    import httpx2  # the kernel must start without paying for the HTTP stack

    return httpx2.AsyncClient(
        verify=_ssl_context(),
        timeout=httpx2.Timeout(timeout, connect=_CONNECT_TIMEOUT),
        limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100),
        follow_redirects=True,
        event_hooks={"request": [_guard_request]},
    )


def blocked_cause(exc: BaseException) -> ModelRequestBlocked | None:
    """The guard's refusal behind an SDK error (the Anthropic SDK wraps it in ``APIConnectionError``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ModelRequestBlocked):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
