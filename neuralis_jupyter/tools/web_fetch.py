"""``web_fetch``: one public URL, fetched through the DNS-pinned, private-address-refusing pipeline.

The fetching is :func:`~.pinned_http.fetch` (every hop vetted by :mod:`.netguard`, resolved once,
pinned; bodies capped on the wire and after decompression); the settings are :class:`WebSettings`.
The result is rendered by :mod:`.convert`, cut at ``max_chars`` with a marker, and headed by one line
naming the final URL, status, content type and size; ``ToolOutput.data`` carries the same for cards.
A refusal (an address that is not public, a bad URL, a bomb) has outcome ``refused``; a failure (no
such name, connection refused, a timeout, an unreadable body) has outcome ``error``.

``save_to`` stores the whole rendering (the body's bytes for format raw): ``"tmp"`` is the
conversation's scratch folder ``<conversation>/tmp/``; a relative path lands inside the caller's
workspace, the shell's working directory (``c.ExecuteSettings.workspace``, :func:`.workspace_dir`).
``data://`` paths (the drive) do not exist in this host and are refused.

``save_to`` is a write although web_fetch is declared a read, so the handler gates it itself, before
any fetch: it is refused in shadow mode (no effects), in a sub-agent (``depth > 0``: children only
read), and when the run's envelope admits no write by web_fetch.

The file is written without following any symlink, even one that stays inside: a background shell
shares the workspace and could swap a folder for a link at any moment. Each folder is opened relative
to the one above it (``O_NOFOLLOW | O_DIRECTORY``, made with ``mkdir(dir_fd=...)`` when missing), and
the file relative to the last one. An existing regular file of that name is replaced (fetching the same
page again refreshes it); a symlink, a hard-linked file or anything that is not a regular file is
refused, never written through.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import re
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from traitlets import Float, Integer, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from ..contracts.envelope import EGRESS_EXTERNAL, ToolFacts, authorize_tool_invocation
from ..runtime import ToolContext, ToolOutput
from ._exec_settings import ExecuteSettings, workspace_dir
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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: No O_TRUNC before the file is known to be a regular one; O_NONBLOCK so a FIFO cannot hang the host.
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _open_dir(name: str, dir_fd: int, relative: PurePosixPath) -> int:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ValueError(
                f"{relative}: {name!r} is a symlink or not a folder; links are never followed"
            ) from None
        raise


def _write(base: Path, relative: PurePosixPath, data: bytes) -> Path:
    """Write ``data`` at ``base/relative`` without following any symlink below ``base``."""
    fd = os.open(base, _DIR_FLAGS)
    try:
        for name in relative.parts[:-1]:
            inner = _open_dir(name, fd, relative)
            os.close(fd)
            fd = inner
        try:
            out = os.open(relative.name, _FILE_FLAGS, 0o644, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                raise ValueError(
                    f"{relative} is a symlink or not a regular file; it is never written through"
                ) from None
            raise
    finally:
        os.close(fd)
    with os.fdopen(out, "wb") as fh:
        st = os.fstat(out)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise ValueError(f"{relative} is not a regular file of its own (a hard link or a special file)")
        os.set_blocking(out, True)
        os.ftruncate(out, 0)
        fh.write(data)
    return base.joinpath(*relative.parts)


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


#: What the envelope is asked about ``save_to``: web_fetch as the write it then is.
_SAVING = ToolFacts(name="web_fetch", access="write", effects=frozenset({EGRESS_EXTERNAL}))


def _save_refusal(ctx: ToolContext) -> str | None:
    """Why this call may not write a file, or ``None`` when it may."""
    if ctx.request.mode.kind == "shadow":
        return "writes a file, and this run is in shadow mode, which performs no effects"
    if ctx.request.depth > 0:
        return "writes a file, and a sub-agent only reads; return the content to the agent that asked"
    auth = authorize_tool_invocation(_SAVING, ctx.request.envelope)
    if not auth.allowed:
        return f"writes a file, and this run's envelope does not admit it: {auth.reason}"
    return None


def _refused_save(why: object) -> ToolOutput:
    return ToolOutput(
        content=f"Refused: save_to {why}. Nothing was fetched.", is_error=True, outcome="refused"
    )


def handlers(env: ToolEnvironment) -> dict[str, Any]:
    options = WebSettings(config=env.config).options()
    workspace = ExecuteSettings(config=env.config)
    data_root = env.store.data_root.root
    default_agent = env.settings.default_agent

    async def web_fetch(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        url: str = args["url"]
        fmt: Format = args.get("format", "markdown")
        max_chars = int(args.get("max_chars", 20000))
        save_to: str | None = args.get("save_to")
        base: Path | None = None
        relative: PurePosixPath | None = None
        if save_to is not None:
            why = _save_refusal(ctx)
            if why is not None:
                return _refused_save(why)
            if save_to == "tmp":
                base = ctx.request.conversation.path
            else:
                try:
                    relative = _workspace_path(save_to)
                    base = await asyncio.to_thread(
                        workspace_dir,
                        workspace,
                        data_root=data_root,
                        session=ctx.session,
                        default_agent=default_agent,
                    )
                except ValueError as exc:
                    return _refused_save(exc)
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
        if base is not None:
            payload = fetched.body if fmt == "raw" else rendered.text.encode("utf-8")
            if relative is None:
                relative = PurePosixPath("tmp") / _tmp_name(fetched.url, fmt, rendered)
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
