"""A fetched body rendered for the model: HTML to Markdown, JSON pretty-printed, XML, text and PDF text.

:func:`render` picks the body's kind from its Content-Type (sniffing the first bytes when the type is
missing or generic) and renders it in one of four formats:

=========  ===========================================================================================
markdown   HTML as Markdown (scripts, styles, navigation, asides, footers and forms dropped; headings,
           links made absolute, lists, code, tables kept; ``<main>`` or a lone ``<article>`` preferred
           to the whole body); JSON and XML in fenced blocks; PDF as text by page; text as it is
text       the same content without markup: HTML's visible text, JSON pretty-printed, XML's text nodes
raw        the body decoded as text, as it came; a binary body (PDF, images) is described, not dumped
json       the body parsed as JSON and pretty-printed; any other body is a :class:`ConversionError`
=========  ===========================================================================================

A body cut at the byte cap (``truncated``) is rendered when its kind reads well in part (HTML, text,
XML); a truncated JSON or PDF body cannot be parsed and is refused instead. Everything here is
synchronous CPU work: callers run it in a worker thread. BeautifulSoup, markdownify and pypdf are
imported on first use.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import urljoin

if TYPE_CHECKING:
    from bs4 import BeautifulSoup, Tag

__all__ = ["ConversionError", "Format", "Kind", "Rendered", "render", "sniff"]

Format = Literal["markdown", "text", "raw", "json"]
Kind = Literal["html", "json", "xml", "markdown", "text", "pdf", "binary"]

_DROP_TAGS = (
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "canvas",
    "iframe",
    "object",
    "embed",
    "nav",
    "aside",
    "footer",
    "form",
    "button",
    "dialog",
)
_DROP_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "menu", "dialog"}
_BLANKS = re.compile(r"\n[ \t]*(?:\n[ \t]*){2,}")


class ConversionError(Exception):
    """The body cannot be rendered in the asked format; the message says what to do instead."""


@dataclass(frozen=True, kw_only=True)
class Rendered:
    text: str
    kind: Kind
    title: str | None = None


def _mime(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _charset(content_type: str) -> str | None:
    match = re.search(r"charset\s*=\s*\"?([\w.:-]+)", content_type, re.IGNORECASE)
    return match.group(1) if match else None


def sniff(content_type: str, body: bytes) -> Kind:
    """The body's kind from its Content-Type, or from its first bytes when the type says too little."""
    mime = _mime(content_type)
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime == "application/json" or mime.endswith("+json"):
        return "json"
    if mime in ("application/xml", "text/xml") or mime.endswith("+xml"):
        return "xml"
    if mime == "application/pdf":
        return "pdf"
    if mime in ("text/markdown", "text/x-markdown"):
        return "markdown"
    if mime.startswith("text/"):
        return "text"
    head = body[:512].lstrip().lower()
    if head.startswith(b"%pdf-"):
        return "pdf"
    if head.startswith((b"<!doctype html", b"<html")):
        return "html"
    if head.startswith(b"<?xml"):
        return "xml"
    if head[:1] in (b"{", b"["):
        return "json"
    if mime in ("", "application/octet-stream") and b"\0" not in body[:1024]:
        return "text"
    return "binary"


def _decode(body: bytes, content_type: str) -> str:
    charset = _charset(content_type) or "utf-8"
    try:
        return body.decode(charset, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def _tidy(text: str) -> str:
    lines = (line.rstrip() for line in text.replace("\r\n", "\n").split("\n"))
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


# -- HTML ------------------------------------------------------------------------------------------


def _soup(body: bytes, content_type: str) -> BeautifulSoup:
    from bs4 import BeautifulSoup

    return BeautifulSoup(body, "html.parser", from_encoding=_charset(content_type))


def _content_root(soup: BeautifulSoup, base_url: str) -> Tag | BeautifulSoup:
    """Drop what is not content, make links absolute, and pick the part of the page that is the text."""
    from bs4 import Tag

    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    for tag in soup.find_all(True):
        if isinstance(tag, Tag) and not tag.decomposed and _hidden(tag):
            tag.decompose()
    for link in soup.find_all("a", href=True):
        href = str(link["href"]).strip()
        if href.lower().startswith(("javascript:", "data:", "vbscript:")):
            link.unwrap()
        else:
            link["href"] = urljoin(base_url, href)
    for image in soup.find_all("img"):
        src = str(image.get("src") or "")
        if not src or src.startswith("data:"):
            image.replace_with(str(image.get("alt") or ""))
        else:
            image["src"] = urljoin(base_url, src)
    articles = soup.find_all("article")
    root = soup.find("main") or (articles[0] if len(articles) == 1 else None) or soup.body or soup
    return root


def _hidden(tag: Tag) -> bool:
    role = str(tag.get("role") or "").lower()
    return role in _DROP_ROLES or tag.has_attr("hidden") or str(tag.get("aria-hidden")).lower() == "true"


def _title(soup: BeautifulSoup) -> str | None:
    if soup.title is not None and soup.title.string:
        return " ".join(soup.title.string.split()) or None
    return None


def _html(body: bytes, content_type: str, fmt: Format, base_url: str) -> Rendered:
    soup = _soup(body, content_type)
    title = _title(soup)
    root = _content_root(soup, base_url)
    if fmt == "text":
        return Rendered(text=_tidy(root.get_text("\n")), kind="html", title=title)
    from markdownify import ATX, MarkdownConverter

    converter = MarkdownConverter(
        heading_style=ATX, bullets="-", escape_underscores=False, escape_asterisks=False
    )
    markdown = _tidy(converter.convert_soup(root))
    if title and not markdown.startswith("# "):
        markdown = f"# {title}\n\n{markdown}"
    return Rendered(text=markdown, kind="html", title=title)


# -- the other kinds -------------------------------------------------------------------------------


def _xml_text(text: str) -> str:
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return text
    return _tidy("\n".join(part.strip() for part in root.itertext() if part.strip()))


def _pdf(body: bytes, fmt: Format) -> Rendered:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(body))
        if reader.is_encrypted:
            raise ConversionError("the PDF is encrypted; its text cannot be extracted")
        pages = [page.extract_text() or "" for page in reader.pages]
        title = reader.metadata.title if reader.metadata is not None else None
    except (PdfReadError, ValueError, KeyError) as exc:
        raise ConversionError(f"the PDF cannot be read: {exc}") from None
    mark = "## Page {}" if fmt == "markdown" else "--- page {} ---"
    text = "\n\n".join(f"{mark.format(n)}\n\n{_tidy(page)}" for n, page in enumerate(pages, start=1))
    return Rendered(text=text, kind="pdf", title=str(title) if title else None)


def _pretty_json(text: str) -> str:
    return json.dumps(json.loads(text), indent=2, ensure_ascii=False)


def render(
    body: bytes, *, content_type: str, fmt: Format, base_url: str, truncated: bool = False
) -> Rendered:
    """``body`` rendered as ``fmt``; :class:`ConversionError` when that cannot be done."""
    kind = sniff(content_type, body)
    if truncated and kind in ("json", "pdf", "binary"):
        raise ConversionError(
            f"the {kind.upper()} body is larger than the byte cap and cannot be read in part"
        )
    if fmt == "json":
        if kind != "json":
            raise ConversionError(
                f"format json needs a JSON response; this one is {kind}: use markdown or text"
            )
        try:
            return Rendered(text=_pretty_json(_decode(body, content_type)), kind=kind)
        except ValueError as exc:
            raise ConversionError(f"the body is not valid JSON: {exc}") from None
    if kind in ("pdf", "binary"):
        if fmt == "raw":
            what = "a PDF" if kind == "pdf" else f"a binary ({_mime(content_type) or 'unknown'}) body"
            return Rendered(
                text=f"({what} of {len(body)} bytes: not shown raw; use format markdown or text, or save_to)",
                kind=kind,
            )
        if kind == "binary":
            raise ConversionError(f"the response is binary ({_mime(content_type) or 'of unknown type'})")
        return _pdf(body, fmt)
    if fmt == "raw":
        return Rendered(text=_decode(body, content_type), kind=kind)
    if kind == "html":
        return _html(body, content_type, fmt, base_url)
    text = _decode(body, content_type)
    if kind == "json":
        try:
            pretty = _pretty_json(text)
        except ValueError:
            return Rendered(text=text, kind="text")
        return Rendered(text=f"```json\n{pretty}\n```" if fmt == "markdown" else pretty, kind=kind)
    if kind == "xml":
        return Rendered(
            text=f"```xml\n{text.strip()}\n```" if fmt == "markdown" else _xml_text(text), kind=kind
        )
    return Rendered(text=text, kind=kind)
