"""One SDK client per event loop, shared by every model with the same settings.

An SDK client owns an HTTP connection pool bound to the event loop that opened it, and the runtime runs
on several loops (a kernel's, the server's, ``asyncio.run`` in the CLI and tests). A client per call is
always safe but pays a new connection every step (a TLS handshake against a real API). So clients are
kept per (loop, settings) and reused; each is closed when its loop shuts down: a started async
generator is registered with the loop, and ``loop.shutdown_asyncgens()`` (which ``asyncio.run`` and
our hosts call) closes it, running the client's ``close()`` on that same loop.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Callable, Hashable
from typing import Any

__all__ = ["loop_client"]

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, Any]] = (
    weakref.WeakKeyDictionary()
)
_keepers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[AsyncGenerator[None, None]]] = (
    weakref.WeakKeyDictionary()
)


async def _keeper(client: Any) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await client.close()


async def loop_client(key: Hashable, factory: Callable[[], Any]) -> Any:
    """The client for ``key`` on the running loop, created by ``factory`` the first time."""
    loop = asyncio.get_running_loop()
    by_key = _clients.setdefault(loop, {})
    client = by_key.get(key)
    if client is None:
        client = factory()
        keeper = _keeper(client)
        await keeper.__anext__()  # started: the loop now closes it at shutdown_asyncgens()
        _keepers.setdefault(loop, []).append(keeper)
        by_key[key] = client
    return client
