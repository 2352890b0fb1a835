"""Model providers behind one small seam, and the catalog of models and prices.

``build_model("anthropic:claude-sonnet-4-6")`` looks the model up in the catalog, resolves its key and
base URL (:mod:`.credentials`) and returns a :class:`Model`. Importing this package imports neither
SDK: each provider module imports its SDK on first use, so a kernel starts without paying for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .anthropic import AnthropicModel
from .base import (
    Message,
    Model,
    ModelEvent,
    ModelRequest,
    StopEvent,
    StopReason,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    ToolUseEvent,
    UsageEvent,
)
from .catalog import PRICING_BASIS, Catalog, ModelEntry, Prices, cost_usd, load_catalog, parse_model_ref
from .credentials import PROVIDER_KEYS, has_credentials, resolve_api_key, resolve_base_url, resolve_endpoint
from .errors import (
    CassetteMismatch,
    MissingCredentials,
    ModelCallFailed,
    ModelRequestBlocked,
    ProviderError,
    UnknownModel,
)
from .openai import OpenAIModel
from .scripted import Call, Reply, ScriptedModel, ScriptExhausted, estimate_tokens

if TYPE_CHECKING:
    from ..store.paths import DataRoot

__all__ = [
    "PRICING_BASIS",
    "AnthropicModel",
    "Call",
    "CassetteMismatch",
    "Catalog",
    "Message",
    "MissingCredentials",
    "Model",
    "ModelCallFailed",
    "ModelEntry",
    "ModelEvent",
    "ModelRequest",
    "ModelRequestBlocked",
    "OpenAIModel",
    "Prices",
    "ProviderError",
    "Reply",
    "ScriptExhausted",
    "ScriptedModel",
    "StopEvent",
    "StopReason",
    "TextBlock",
    "TextDelta",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "ToolUseEvent",
    "UnknownModel",
    "UsageEvent",
    "build_model",
    "cost_usd",
    "estimate_tokens",
    "has_credentials",
    "load_catalog",
    "parse_model_ref",
    "resolve_api_key",
    "resolve_base_url",
    "resolve_endpoint",
]


def build_model(
    ref: str,
    *,
    data_root: DataRoot | None = None,
    project_id: str | None = None,
    catalog: Catalog | None = None,
    base_urls: Mapping[str, str] | None = None,
) -> Model:
    """The model ``ref`` (``PROVIDER:MODEL``) names, ready to stream.

    The key comes from the environment, else the project's credential file (``data_root`` +
    ``project_id``). The base URL is ``base_urls[provider]`` (the host's setting, e.g.
    ``c.NeuralisSettings.openai_base_url``), else ``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL`` from the
    environment, else from the credential file, which only sends a key from the same file
    (:func:`~.credentials.resolve_endpoint`). An ``openai:`` model the catalog does not know is allowed
    (an OpenAI-compatible server's own model), priced at zero.
    """
    provider, model = parse_model_ref(ref)
    catalog = catalog or load_catalog()
    setting = (base_urls or {}).get(provider)
    if provider == "scripted":
        raise UnknownModel(
            ref,
            "scripted models are not built from a reference: construct ScriptedModel([...]) in code, "
            "or let the demo loader build one",
        )
    if provider == "anthropic":
        entry = catalog.get(provider, model)
        endpoint = resolve_endpoint(provider, setting=setting, data_root=data_root, project_id=project_id)
        return AnthropicModel(
            entry.api_model_id,
            api_key=endpoint.api_key,
            base_url=endpoint.base_url,
            catalog_id=entry.id,
        )
    if provider == "openai":
        endpoint = resolve_endpoint(provider, setting=setting, data_root=data_root, project_id=project_id)
        # A model the catalog cannot price is allowed only on another OpenAI-compatible server (a
        # local one, usually free): on OpenAI's own API it would run unmetered, past every spend limit.
        host = urlsplit(endpoint.base_url or OpenAIModel.DEFAULT_BASE_URL).hostname
        own = host in PROVIDER_KEYS[provider].own_hosts
        entry = catalog.get(provider, model) if own else catalog.lookup(provider, model, allow_unpriced=True)
        return OpenAIModel(
            entry.api_model_id,
            api_key=endpoint.api_key,
            base_url=endpoint.base_url,
            catalog_id=entry.id,
        )
    raise UnknownModel(ref, "the providers are anthropic, openai and scripted")
