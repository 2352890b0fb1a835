"""``web_fetch``: one public URL, fetched through the DNS-pinned, private-address-refusing pipeline.

The fetching is :func:`~.pinned_http.fetch` (every hop vetted by :mod:`.netguard`, resolved once,
pinned; bodies capped on the wire and after decompression); the settings are :class:`WebSettings`.
The result is rendered by :mod:`.convert`, cut at ``max_chars`` with a marker, and headed by one line
naming the final URL, status, content type and size; ``ToolOutput.data`` carries the same for cards.
A refusal (an address that is not public, a bad URL, a bomb) has outcome ``refused``; a failure (no
such name, connection refused, a timeout, an unreadable body) has outcome ``error``.

``save_to`` stores the whole rendering (the body's bytes for format raw): ``"tmp"`` is the
conversation's scratch folder ``<conversation>/tmp/``; a relative path lands inside the agent's
workspace ``projects/<p>/agents/<a>/workspace/``, never outside it (``..``, absolute paths and symlinks
that lead out are refused). ``data://`` paths (the drive) do not exist in this host and are refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

from traitlets import Float, Integer, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from ..runtime import ToolContext, ToolOutput
from .convert import ConversionError, Format, Rendered, render
from .environment import ToolEnvironment
from .netguard import AddressPolicy, Refused, Resolver
from .pinned_http import FetchFailed, FetchOptions, fetch

__all__ = ["WebSettings", "handlers"]

_EXTENSIONS = {"markdown": ".md", "text": ".txt", "json": ".json"}
_RAW_EXTENSIONS = {"html": ".html", "json": ".json", "xml": ".xml", "pdf": ".pdf", "markdown": ".md"}


def _dns_server(entry: str) -> tuple[str, int]:
    match = re.fullmatch(r"\[([0-9a-fA-F:.]+)\](?::(\d+))?|([0-9.]+)(?::(\d+))?", entry.strip())
    if match is None:
        raise ValueError(f"{entry!r} is not 'IP', 'IP:PORT' or '[IPv6]:PORT'")
    host = match.group(1) or match.group(3)
    return host, int(match.group(2) or match.group(4) or 53)


class WebSettings(Configurable):
    """``c.WebSettings.*``: how web_fetch (and web_search's page contents) reach the web."""

    allowed_hosts = List(
        Unicode(),
        help="Host names, IP addresses or CIDRs that may be fetched although they are not public "
        "(a loopback fixture, an intranet mirror). Cloud metadata addresses stay refused. "
        "Empty: public addresses only.",
    ).tag(config=True)
    dns_servers = List(
        Unicode(),
        help="DNS servers asked directly ('IP', 'IP:PORT' or '[IPv6]:PORT') instead of the system "
        "resolver. Empty: the system resolver (getaddrinfo).",
    ).tag(config=True)
    max_bytes = Integer(
        5 * 1024 * 1024,
        help="Largest response body read, in bytes, counted as received and again after decompression.",
    ).tag(config=True)
    max_compression_ratio = Integer(
        100, help="A compressed body that inflates more than this many times is refused as a bomb."
    ).tag(config=True)
    max_redirects = Integer(5, help="Redirects followed, each re-vetted; 0 follows none.").tag(config=True)
    timeout = Float(30.0, help="Seconds for a whole fetch, every redirect hop included.").tag(config=True)
    dns_timeout = Float(5.0, help="Seconds to resolve one host name.").tag(config=True)
    user_agent = Unicode("Mozilla/5.0 (compatible; Neuralis-web_fetch/0.1)", help="The User-Agent sent.").tag(
        config=True
    )

    @validate("allowed_hosts")
    def _check_hosts(self, proposal: dict[str, Any]) -> list[str]:
        try:
            AddressPolicy.from_entries(proposal["value"])
        except ValueError as exc:
            raise TraitError(f"allowed_hosts: {exc}") from None
        return list(proposal["value"])

    @validate("dns_servers")
    def _check_dns(self, proposal: dict[str, Any]) -> list[str]:
        try:
            [_dns_server(e) for e in proposal["value"]]
        except ValueError as exc:
            raise TraitError(f"dns_servers: {exc}") from None
        return list(proposal["value"])

    @validate("max_bytes", "max_compression_ratio", "timeout", "dns_timeout")
    def _positive(self, proposal: dict[str, Any]) -> Any:
        if proposal["value"] <= 0:
            raise TraitError(f"{proposal['trait'].name} must be positive, got {proposal['value']!r}")
        return proposal["value"]

    def options(self) -> FetchOptions:
        return FetchOptions(
            policy=AddressPolicy.from_entries(self.allowed_hosts),
            resolver=Resolver(
                nameservers=tuple(_dns_server(e) for e in self.dns_servers), timeout=self.dns_timeout
            ),
            max_bytes=self.max_bytes,
            max_compression_ratio=self.max_compression_ratio,
            max_redirects=max(0, self.max_redirects),
            timeout=self.timeout,
            user_agent=self.user_agent,
        )


# -- the tool ------------------------------------------------------------------------------------


def _workspace_path(save_to: str) -> PurePosixPath:
    """A relative path inside the workspace, checked lexically; :class:`ValueError` says why not."""
    if "://" in save_to:
        raise ValueError(
            f"{save_to!r}: data:// and other URL targets are not available here; "
            'use "tmp" or a path relative to the agent workspace'
        )
    path = PurePosixPath(save_to)
    if "\\" in save_to or save_to.startswith("~") or path.is_absolute():
        raise ValueError(f"{save_to!r} is not a relative path inside the agent workspace")
    if any(part in ("..", ".") for part in path.parts) or not path.parts:
        raise ValueError(f"{save_to!r} may not contain '..' or '.' segments")
    return path


def _write(base: Path, relative: PurePosixPath, data: bytes) -> Path:
    """Write ``data`` at ``base/relative``, refusing any symlink that leads out of ``base``."""
    base.mkdir(parents=True, exist_ok=True)
    target = base.joinpath(*relative.parts)
    # Checked before any folder is made (resolve() follows the symlinks of the part that exists) and
    # again after, so neither a folder nor the file is created through a link that leads out.
    for _ in range(2):
        if not target.parent.resolve().is_relative_to(base.resolve()):
            raise ValueError(f"{relative} leads outside its folder through a symlink")
        target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return target


def _tmp_name(url: str, fmt: Format, rendered: Rendered) -> PurePosixPath:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", url.split("://", 1)[-1]).strip("-.")[:60] or "page"
    digest = hashlib.sha256(url.encode()).hexdigest()[:8]
    ext = _RAW_EXTENSIONS.get(rendered.kind, ".txt") if fmt == "raw" else _EXTENSIONS[fmt]
    return PurePosixPath(f"{slug}-{digest}{ext}")


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return (
        f"{text[:max_chars]}\n\n[… truncated: {max_chars} of {len(text)} characters shown; "
        "fetch again with a larger max_chars, or use save_to to keep the whole page]"
    )


def handlers(env: ToolEnvironment) -> dict[str, Any]:
    options = WebSettings(config=env.config).options()
    data_root = env.store.data_root

    async def web_fetch(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        url: str = args["url"]
        fmt: Format = args.get("format", "markdown")
        max_chars = int(args.get("max_chars", 20000))
        save_to: str | None = args.get("save_to")
        relative: PurePosixPath | None = None
        if save_to is not None and save_to != "tmp":
            try:
                relative = _workspace_path(save_to)
                if ctx.session.agent_id is None:
                    raise ValueError("this session has no agent, so no workspace")
            except ValueError as exc:
                return ToolOutput(content=f"Refused: save_to {exc}.", is_error=True, outcome="refused")
        try:
            fetched = await fetch(url, options)
            rendered = await asyncio.to_thread(
                render,
                fetched.body,
                content_type=fetched.content_type,
                fmt=fmt,
                base_url=fetched.url,
                truncated=fetched.truncated,
            )
        except Refused as exc:
            return ToolOutput(content=f"Refused: {exc}.", is_error=True, outcome="refused", data={"url": url})
        except (FetchFailed, ConversionError) as exc:
            return ToolOutput(
                content=f"web_fetch failed: {exc}.", is_error=True, outcome="error", data={"url": url}
            )
        data: dict[str, Any] = {
            "url": url,
            "finalUrl": fetched.url,
            "status": fetched.status,
            "contentType": fetched.content_type,
            "bytes": len(fetched.body),
            "truncated": fetched.truncated,
            "address": fetched.address,
            "redirects": list(fetched.redirects),
            "title": rendered.title,
            "format": fmt,
        }
        notes = [fetched.url, f"HTTP {fetched.status}", fetched.content_type or "no content type"]
        notes.append(f"{len(fetched.body)} bytes" + (" (cut at the byte cap)" if fetched.truncated else ""))
        if save_to is not None:
            payload = fetched.body if fmt == "raw" else rendered.text.encode("utf-8")
            if relative is None:
                base, relative = ctx.request.conversation.path / "tmp", _tmp_name(fetched.url, fmt, rendered)
            else:
                base = data_root.agent_dir(ctx.session.project_id, ctx.session.agent_id or "") / "workspace"
            try:
                saved = await asyncio.to_thread(_write, base, relative, payload)
            except (ValueError, OSError) as exc:
                return ToolOutput(
                    content=f"Refused: save_to {exc}.", is_error=True, outcome="refused", data=data
                )
            data["savedTo"] = str(saved)
            notes.append(f"saved to {saved}")
        header = " · ".join(notes)
        failed = fetched.status >= 400
        return ToolOutput(
            content=f"{header}\n\n{_cut(rendered.text, max_chars)}",
            is_error=failed,
            outcome="error" if failed else "ok",
            data=data,
        )

    return {"web_fetch": web_fetch}
