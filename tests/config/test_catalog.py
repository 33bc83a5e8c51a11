"""Model resolution and cost."""

from __future__ import annotations

import pytest

from trunkline.config.catalog import Catalog, UnknownModel, compute_cost, load_catalog_file
from trunkline.config.loader import ModelEntry
from trunkline.protocol.messages import Price, Usage


@pytest.fixture
def catalog() -> Catalog:
    return Catalog.load(
        {"local:llama3.2:3b": ModelEntry(wire_name="llama3.2:3b", aliases=["llama"]),
         "other:echo": ModelEntry(wire_name="echo")},
        providers={"mock", "local", "other", "anthropic"}, configured={"mock", "local", "other"},
    )


def test_shipped_catalog_is_valid_and_aliases_are_unique():
    shipped = load_catalog_file()
    seen: dict[str, str] = {}
    for model_id, entry in shipped.models.items():
        provider, sep, name = model_id.partition(":")
        assert sep and provider and name, model_id
        for alias in entry.aliases:
            assert alias not in seen, f"alias {alias} of {model_id} also names {seen[alias]}"
            assert alias not in shipped.models, alias
            seen[alias] = model_id
        if entry.price.input is not None:
            assert entry.price.output is not None, model_id
    assert {"mock:echo", "mock:basic"} <= set(shipped.models)


def test_resolution_rules(catalog):
    assert catalog.resolve("mock:echo").id == "mock:echo"
    assert catalog.resolve("echo", "mock").id == "mock:echo"  # native name with provider
    assert catalog.resolve("llama").id == "local:llama3.2:3b"  # alias
    assert catalog.resolve("local:llama3.2:3b").wire_name == "llama3.2:3b"  # colons in the name survive
    assert catalog.resolve("echo").id == "mock:echo"  # an alias wins over another provider's wire name


def test_alias_beats_ambiguous_wire_name():
    cat = Catalog.load({"other:echo2": ModelEntry(wire_name="shared"), "more:x": ModelEntry(wire_name="shared")},
                       providers={"mock", "other", "more"})
    with pytest.raises(UnknownModel, match="several providers"):
        cat.resolve("shared")


def test_unknown_names_pass_through_to_a_known_provider(catalog):
    info = catalog.resolve("mock:brand-new-model")
    assert (info.provider, info.wire_name, info.in_catalog) == ("mock", "brand-new-model", False)
    assert info.tools and info.vision  # the catalog cannot say no to what it does not know
    assert catalog.resolve("brand-new", provider="local").id == "local:brand-new"


def test_unknown_models_and_providers_are_refused(catalog):
    with pytest.raises(UnknownModel, match="unknown model 'gpt-17'"):
        catalog.resolve("gpt-17")
    with pytest.raises(UnknownModel, match="unknown provider 'nope'"):
        catalog.resolve("x", provider="nope")


def test_configured_flag(catalog):
    assert catalog.resolve("mock:echo").configured
    assert not catalog.resolve("anthropic:some-model").configured


def test_cost_bills_cached_tokens_at_their_own_rates():
    price = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    usage = Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=600, cache_write_tokens=200)
    assert compute_cost(usage, price) == pytest.approx((200 * 3 + 600 * 0.3 + 200 * 3.75 + 100 * 15) / 1e6)
    assert compute_cost(usage, Price(input=None, output=1.0)) is None
    # no separate cache prices: cached tokens cost the input rate
    assert compute_cost(usage, Price(input=1.0, output=1.0)) == pytest.approx(1100 / 1e6)
