"""The model catalog: which models exist, their context windows and their list prices.

The data lives in ``catalog.json`` beside this module; ``c.NeuralisSettings.catalog_path`` names a JSON
file of the same shape whose entries replace or extend the shipped ones by (provider, id). Every cost
in Neuralis comes from :func:`cost_usd`, and every figure derived from it carries
:data:`PRICING_BASIS`: they are list-price estimates, not invoices.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from .errors import UnknownModel

__all__ = ["PRICING_BASIS", "Catalog", "ModelEntry", "Prices", "cost_usd", "load_catalog", "parse_model_ref"]

log = logging.getLogger(__name__)
_SHIPPED = Path(__file__).with_name("catalog.json")
#: The one sentence every figure derived from :func:`cost_usd` carries (frames, events, cards, the CLI).
PRICING_BASIS = "Costs are estimates at catalog list prices per million tokens, not invoiced amounts."


@dataclass(frozen=True, kw_only=True)
class Prices:
    """USD per million tokens, and USD per use of a provider-side tool (e.g. a native web search)."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    per_use: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ModelEntry:
    provider: str
    id: str
    api_model_id: str
    context_window: int
    prices: Prices
    default: bool = False
    #: False for a model the catalog does not know (e.g. a local OpenAI-compatible server's).
    priced: bool = True

    @property
    def ref(self) -> str:
        return f"{self.provider}:{self.id}"


def cost_usd(
    prices: Prices,
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    server_tool_uses: Mapping[str, int] | None = None,
) -> float:
    """The one cost formula: tokens times list price per million, plus per-use tool fees."""
    tokens = (
        input_tokens * prices.input
        + output_tokens * prices.output
        + cache_read_tokens * prices.cache_read
        + cache_write_tokens * prices.cache_write
    ) / 1_000_000
    fees = sum(prices.per_use.get(tool, 0.0) * n for tool, n in (server_tool_uses or {}).items())
    return tokens + fees


def parse_model_ref(ref: str) -> tuple[str, str]:
    """``"anthropic:claude-sonnet-4-6"`` -> ``("anthropic", "claude-sonnet-4-6")``."""
    provider, sep, model = ref.partition(":")
    if not sep or not provider or not model:
        raise UnknownModel(ref, f"write it as PROVIDER:MODEL, e.g. {_example()!r}")
    return provider, model


def _example() -> str:
    return "anthropic:claude-sonnet-4-6"


def _entry(doc: Mapping[str, Any], source: str) -> ModelEntry:
    try:
        prices = dict(doc.get("prices", {}))
        per_use = {str(k): float(v) for k, v in (prices.pop("per_use", None) or {}).items()}
        return ModelEntry(
            provider=str(doc["provider"]),
            id=str(doc["id"]),
            api_model_id=str(doc.get("api_model_id") or doc["id"]),
            context_window=int(doc.get("context_window", 0)),
            prices=Prices(**{k: float(v) for k, v in prices.items()}, per_use=per_use),
            default=bool(doc.get("default", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{source}: bad catalog entry {doc!r}: {exc}") from exc


class Catalog:
    def __init__(self, entries: Iterable[ModelEntry]) -> None:
        self._entries: dict[tuple[str, str], ModelEntry] = {}
        for e in entries:
            self._entries[(e.provider, e.id)] = e

    def __iter__(self):
        return iter(self._entries.values())

    def providers(self) -> list[str]:
        return sorted({p for p, _ in self._entries})

    def get(self, provider: str, model: str) -> ModelEntry:
        try:
            return self._entries[(provider, model)]
        except KeyError:
            known = ", ".join(sorted(e.ref for e in self if e.provider == provider)) or "none"
            raise UnknownModel(f"{provider}:{model}", f"known {provider} models: {known}") from None

    def lookup(self, provider: str, model: str, *, allow_unpriced: bool = False) -> ModelEntry:
        """Like :meth:`get`; with ``allow_unpriced`` an unknown model is served at zero prices."""
        try:
            return self.get(provider, model)
        except UnknownModel:
            if not allow_unpriced:
                raise
            log.warning("model %s:%s is not in the catalog; its cost is recorded as 0", provider, model)
            return ModelEntry(
                provider=provider,
                id=model,
                api_model_id=model,
                context_window=0,
                prices=Prices(),
                priced=False,
            )

    def default_for(self, provider: str) -> ModelEntry:
        candidates = [e for e in self if e.provider == provider]
        if not candidates:
            raise UnknownModel(f"{provider}:", f"the catalog has no {provider} models")
        return next((e for e in candidates if e.default), candidates[0])


@cache
def _load(path: str | None) -> Catalog:
    docs = json.loads(_SHIPPED.read_text(encoding="utf-8"))["models"]
    entries = {(d["provider"], d["id"]): _entry(d, str(_SHIPPED)) for d in docs}
    if path:
        try:
            override = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(
                f"cannot read the model catalog override {path!r}: {exc}; "
                "fix the file or unset c.NeuralisSettings.catalog_path"
            ) from exc
        for d in override.get("models", []):
            e = _entry(d, path)
            entries[(e.provider, e.id)] = e
    return Catalog(entries.values())


def load_catalog(path: str | None = None) -> Catalog:
    """The shipped catalog, with the entries of ``path`` (if any) replacing or adding models."""
    return _load(path or None)
