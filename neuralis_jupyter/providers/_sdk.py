"""What the two SDK-backed models share: their settings and their per-loop SDK client."""

from __future__ import annotations

from typing import Any, ClassVar

from ._clients import loop_client
from .guard import build_http_client

__all__ = ["SDKModel"]


class SDKModel:
    """A model behind a provider SDK; ``model_id`` is the id sent on the wire.

    ``request.model`` is not sent: the model is fixed at construction, as its prices are.
    ``catalog_id`` is the id the catalog prices it under, when that differs from the API id.
    """

    PROVIDER: ClassVar[str]
    DEFAULT_BASE_URL: ClassVar[str]

    def __init__(
        self,
        model_id: str,
        *,
        api_key: str,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        catalog_id: str | None = None,
    ) -> None:
        self.api_model_id = model_id
        self._catalog_id = catalog_id or model_id
        self._api_key = api_key
        self.base_url = base_url
        self.max_retries = max_retries
        self.timeout = timeout

    @property
    def provider(self) -> str:
        return self.PROVIDER

    @property
    def model_id(self) -> str:
        return self._catalog_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.api_model_id!r}, base_url={self.base_url!r})"

    @property
    def _client_key(self) -> tuple[object, ...]:
        return (self.PROVIDER, self._api_key, self.base_url, self.max_retries, self.timeout)

    def _sdk_class(self) -> Any:
        """The SDK's async client class, imported on first use (a second of import time)."""
        raise NotImplementedError

    def _client(self) -> Any:
        return self._sdk_class()(
            api_key=self._api_key,
            base_url=self.base_url or self.DEFAULT_BASE_URL,
            max_retries=self.max_retries,
            timeout=self.timeout,
            http_client=build_http_client(timeout=self.timeout),
        )

    async def client(self) -> Any:
        """The shared SDK client of the running event loop."""
        return await loop_client(self._client_key, self._client)
