"""The model catalog: prices, the override file, lookups and defaults."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from neuralis_jupyter.providers import (
    PRICING_BASIS,
    Prices,
    UnknownModel,
    cost_usd,
    load_catalog,
    parse_model_ref,
)

SONNET = Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75, per_use={"web_search": 0.01})


def test_per_use_fees_are_added() -> None:
    assert cost_usd(SONNET, server_tool_uses={"web_search": 3}) == pytest.approx(0.03)
    assert cost_usd(SONNET, input_tokens=1_000_000, server_tool_uses={"web_search": 1}) == pytest.approx(3.01)
    assert cost_usd(SONNET, server_tool_uses={"code_execution": 5}) == 0.0  # unpriced tools cost nothing


def test_cost_is_tokens_times_price_per_million() -> None:
    assert cost_usd(SONNET, input_tokens=1_000_000) == 3.0
    assert cost_usd(SONNET, output_tokens=1_000_000) == 15.0
    assert cost_usd(
        SONNET, input_tokens=1000, output_tokens=500, cache_read_tokens=2000, cache_write_tokens=400
    ) == (pytest.approx(0.0126, abs=1e-15))
    assert cost_usd(SONNET) == 0.0
    assert cost_usd(Prices(), input_tokens=10**9, output_tokens=10**9) == 0.0


def test_shipped_prices() -> None:
    catalog = load_catalog()
    entry = catalog.get("anthropic", "claude-sonnet-4-6")
    assert entry.prices == SONNET
    assert entry.ref == "anthropic:claude-sonnet-4-6"
    assert entry.priced
    assert cost_usd(entry.prices, input_tokens=1_000_000, output_tokens=1_000_000) == 18.0
    assert "estimates" in PRICING_BASIS


def test_default_for_each_provider() -> None:
    catalog = load_catalog()
    assert catalog.default_for("anthropic").id == "claude-sonnet-4-6"
    assert catalog.default_for("openai").id == "gpt-5.4"
    assert catalog.default_for("scripted").id == "demo"
    with pytest.raises(UnknownModel, match="no mistral models"):
        catalog.default_for("mistral")


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(UnknownModel) as info:
        load_catalog().get("anthropic", "claude-9")
    message = str(info.value)
    assert "'anthropic:claude-9'" in message
    for ref in ("anthropic:claude-haiku-4-5", "anthropic:claude-opus-4-8", "anthropic:claude-sonnet-4-6"):
        assert ref in message
    assert "openai:" not in message


def test_unpriced_lookup(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        entry = load_catalog().lookup("openai", "llama3.2", allow_unpriced=True)
    assert (entry.api_model_id, entry.priced, entry.prices) == ("llama3.2", False, Prices())
    assert "not in the catalog" in caplog.text
    with pytest.raises(UnknownModel):
        load_catalog().lookup("openai", "llama3.2")


def test_override_file_replaces_and_extends(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(
        json.dumps(
            {
                "models": [
                    {"provider": "openai", "id": "gpt-5.4", "prices": {"input": 1.0, "output": 4.0}},
                    {
                        "provider": "openai",
                        "id": "local-llama",
                        "api_model_id": "llama3.2:3b",
                        "context_window": 8192,
                        "prices": {"input": 0.0, "output": 0.0},
                    },
                ]
            }
        )
    )
    catalog = load_catalog(str(path))
    assert catalog.get("openai", "gpt-5.4").prices == Prices(input=1.0, output=4.0)
    assert catalog.get("openai", "local-llama").api_model_id == "llama3.2:3b"
    assert catalog.get("anthropic", "claude-haiku-4-5").prices.input == 1.0  # untouched
    assert load_catalog().get("openai", "gpt-5.4").prices.input == 1.25  # the shipped one is unchanged


def test_bad_override_file_says_how_to_fix(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(ValueError, match="catalog_path"):
        load_catalog(str(path))
    path = tmp_path / "bad-entry.json"
    path.write_text(json.dumps({"models": [{"provider": "openai"}]}))
    with pytest.raises(ValueError, match="bad catalog entry"):
        load_catalog(str(path))


@pytest.mark.parametrize("ref", ["claude", "anthropic:", ":gpt-4.1", ""])
def test_model_refs_need_provider_and_model(ref: str) -> None:
    with pytest.raises(UnknownModel, match="PROVIDER:MODEL"):
        parse_model_ref(ref)


def test_parse_model_ref() -> None:
    assert parse_model_ref("openai:llama3.2:3b") == ("openai", "llama3.2:3b")
