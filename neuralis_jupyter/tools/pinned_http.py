"""The pinned HTTP client under ``web_fetch``: every hop vetted, one address per hop, bounded bodies.

:func:`fetch` follows at most ``max_redirects`` redirects; each hop goes through
:func:`~.netguard.vet_url` (checked, resolved once, pinned) and then one ``httpcore`` request whose
only way to open a socket is :class:`PinnedBackend`: the TCP connection reaches the pinned address and
nothing else, while ``httpcore`` does TLS with the origin's host as SNI and ``server_hostname``, so the
certificate is verified against the name. The Host header is the URL's authority. No proxy is used (a
proxy would resolve the name itself and void the pinning).

The body is read up to ``max_bytes``, counted as received and again after decompression; gzip and
deflate are the only encodings asked for or accepted. A body that inflates more than
``max_compression_ratio`` times (once past 64 KiB) is refused as a decompression bomb; decoding never
holds more than the cap. One deadline (``timeout``) covers the whole fetch, every hop included.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import zlib
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from .netguard import AddressPolicy, Destination, Refused, ResolveFailed, Resolver, vet_url

if TYPE_CHECKING:
    import httpcore

__all__ = ["FetchFailed", "FetchOptions", "Fetched", "PinnedBackend", "fetch"]

log = logging.getLogger(__name__)

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_ACCEPT = (
    b"text/html,application/xhtml+xml,application/json;q=0.9,application/pdf;q=0.9,text/*;q=0.8,*/*;q=0.5"
)
_BOMB_FLOOR = 64 * 1024


class FetchFailed(Exception):
    """The fetch was allowed but did not succeed (no such name, connection refused, a timeout)."""


@dataclass(frozen=True, kw_only=True)
class FetchOptions:
    policy: AddressPolicy = field(default_factory=AddressPolicy)
    resolver: Resolver = field(default_factory=Resolver)
    max_bytes: int = 5 * 1024 * 1024
    max_compression_ratio: int = 100
    max_redirects: int = 5
    timeout: float = 30.0
    user_agent: str = "Mozilla/5.0 (compatible; Neuralis-web_fetch/0.1)"


@dataclass(frozen=True, kw_only=True)
class Fetched:
    url: str
    status: int
    content_type: str
    body: bytes
    wire_bytes: int
    #: The body reached ``max_bytes`` and was cut there.
    truncated: bool
    #: The pinned address the final hop connected to.
    address: str
    redirects: tuple[str, ...] = ()


@cache
def _ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


class _Inflater:
    def __init__(self, encoding: str) -> None:
        self._raw_fallback = encoding == "deflate"
        self._zlib = zlib.decompressobj(31 if encoding in ("gzip", "x-gzip") else 15)

    @property
    def pending(self) -> int:
        """Input bytes received but not yet decoded (held back when the output limit was reached)."""
        return len(self._zlib.unconsumed_tail)

    def feed(self, chunk: bytes, room: int) -> bytes:
        """At most ``room + 1`` decoded bytes: one more than fits tells the caller the cap was reached."""
        try:
            return self._zlib.decompress(chunk, room + 1)
        except zlib.error:
            if not self._raw_fallback:
                raise
            self._raw_fallback = False  # some servers send raw deflate without the zlib header
            self._zlib = zlib.decompressobj(-15)
            return self._zlib.decompress(chunk, room + 1)


async def _read_body(
    chunks: AsyncIterable[bytes], encoding: str, options: FetchOptions
) -> tuple[bytes, int, bool]:
    """(body, wire bytes, truncated), decoding on the fly and never holding more than the cap."""
    if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
        raise FetchFailed(f"the server answered with an unsupported content-encoding {encoding!r}")
    inflater = _Inflater(encoding) if encoding not in ("", "identity") else None
    body = bytearray()
    wire = 0
    async for chunk in chunks:
        wire += len(chunk)
        if inflater is None:
            body += chunk[: options.max_bytes - len(body) + 1]
        elif wire > options.max_bytes:
            return bytes(body), wire, True  # compressed input that decodes to little is capped too
        else:
            try:
                body += inflater.feed(chunk, options.max_bytes - len(body))
            except zlib.error as exc:
                raise FetchFailed(f"the {encoding} body is corrupt: {exc}") from None
            decoded_from = wire - inflater.pending
            if len(body) > _BOMB_FLOOR and len(body) > options.max_compression_ratio * decoded_from:
                raise Refused(_bomb(len(body), decoded_from, options))
        if len(body) > options.max_bytes:
            return bytes(body[: options.max_bytes]), wire, True
    return bytes(body), wire, False


def _bomb(decoded: int, wire: int, options: FetchOptions) -> str:
    return (
        f"the response inflates from {wire} to over {decoded} bytes, more than "
        f"{options.max_compression_ratio} times: refused as a decompression bomb"
    )


@dataclass(frozen=True, kw_only=True)
class PinnedBackend:
    """An ``httpcore`` network backend that connects only to the pinned address of one host.

    ``httpcore`` asks it for the origin's (host, port) and does TLS itself with the origin's host as
    SNI and ``server_hostname``: the certificate is checked against the name, the socket goes to the
    pinned address, and no name is ever resolved again. Any other host is refused.
    """

    destination: Destination

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        import httpcore

        pinned = self.destination
        if host != pinned.host or port != pinned.port:
            raise httpcore.ConnectError(f"{host}:{port} is not the pinned destination {pinned.authority}")
        try:
            return await httpcore.AnyIOBackend().connect_tcp(
                str(pinned.address), port, timeout=timeout, socket_options=socket_options
            )
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
            raise type(exc)(f"connecting to {pinned.address} port {port} (pinned for {host}): {exc}") from exc

    async def connect_unix_socket(self, path: str, **kwargs: Any) -> Any:
        raise OSError("web_fetch connects to pinned TCP addresses only")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _get(dest: Destination, options: FetchOptions) -> Fetched | str:
    """One request to the pinned address: the response, or a redirect's Location."""
    import httpcore

    url = httpcore.URL(
        scheme=dest.scheme.encode(), host=dest.host.encode(), port=dest.port, target=dest.target.encode()
    )
    headers = [
        (b"Host", dest.authority.encode()),
        (b"User-Agent", options.user_agent.encode()),
        (b"Accept", _ACCEPT),
        (b"Accept-Encoding", b"gzip, deflate"),
        (b"Connection", b"close"),
    ]
    t = options.timeout
    extensions = {"timeout": {"connect": t, "read": t, "write": t, "pool": t}}
    backend = PinnedBackend(destination=dest)
    context = _ssl_context() if dest.scheme == "https" else None
    try:
        async with (
            httpcore.AsyncConnectionPool(ssl_context=context, network_backend=backend, retries=0) as pool,
            pool.stream("GET", url, headers=headers, extensions=extensions) as response,
        ):
            found = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
            if response.status in _REDIRECTS and found.get("location"):
                return found["location"]
            encoding = found.get("content-encoding", "").strip().lower()
            body, wire, truncated = await _read_body(response.aiter_stream(), encoding, options)
    except httpcore.TimeoutException as exc:
        raise FetchFailed(f"{dest.url} timed out ({exc or type(exc).__name__})") from None
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
        raise FetchFailed(f"{dest.url}: {exc}") from None
    return Fetched(
        url=dest.url,
        status=response.status,
        content_type=found.get("content-type", ""),
        body=body,
        wire_bytes=wire,
        truncated=truncated,
        address=str(dest.address),
    )


async def fetch(url: str, options: FetchOptions) -> Fetched:
    """Fetch ``url``; :class:`~.netguard.Refused` when a hop may not be fetched, else :class:`FetchFailed`."""
    hops: list[str] = []
    current = url
    try:
        async with asyncio.timeout(options.timeout):
            for _ in range(options.max_redirects + 1):
                try:
                    dest = await vet_url(current, policy=options.policy, resolver=options.resolver)
                except Refused as exc:
                    raise Refused(
                        f"{exc} (redirected to {current} from {hops[-1]})" if hops else str(exc)
                    ) from None
                result = await _get(dest, options)
                if isinstance(result, Fetched):
                    return replace(result, redirects=tuple(hops))
                hops.append(dest.url)
                current = urljoin(dest.url, result)
                log.debug("web_fetch: %s redirects to %s", dest.url, current)
    except TimeoutError:
        raise FetchFailed(f"fetching {url} took longer than {options.timeout:g} s") from None
    except ResolveFailed as exc:
        raise FetchFailed(str(exc)) from None
    raise Refused(f"more than {options.max_redirects} redirects (last: {current})")
