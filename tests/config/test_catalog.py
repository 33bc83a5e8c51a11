"""Model resolution and cost."""

from __future__ import annotations

import re
from datetime import date

import msgspec
import pytest
import trio
import yaml

from trunkline import Client
from trunkline.config.catalog import Catalog, UnknownModel, compute_cost, load_catalog_file
from trunkline.config.loader import ConfigError, load_config
from trunkline.protocol.messages import ModelInfo, Price, Usage


@pytest.fixture
def catalog() -> Catalog:
    return Catalog.load(
        {
            "local:llama3.2:3b": ModelInfo(
                id="local:llama3.2:3b", provider="local", wire_name="llama3.2:3b", aliases=["llama"]
            ),
            "other:echo": ModelInfo(id="other:echo", provider="other", wire_name="echo"),
        },
        providers={"mock", "local", "other", "anthropic"},
        configured={"mock", "local", "other"},
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
    cat = Catalog.load(
        {
            "other:echo2": ModelInfo(id="other:echo2", provider="other", wire_name="shared"),
            "more:x": ModelInfo(id="more:x", provider="more", wire_name="shared"),
        },
        providers={"mock", "other", "more"},
    )
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


# -- costs that match the invoice: figures worked by hand from the providers' pricing pages ------


SHIPPED = Catalog.load(providers={"anthropic", "openai", "gemini"})


def cost(model: str, day: date = date(2026, 11, 23), tier: str | None = None, **usage) -> float | None:
    return compute_cost(Usage(**usage), SHIPPED.resolve(model).price, service_tier=tier, day=day)


def test_anthropic_five_minute_and_one_hour_cache_writes():
    # Sonnet 4.5: $3 in, $15 out, $0.30 cache read, $3.75 5-minute write, $6 1-hour write.
    # 10,000 prompt tokens = 5,000 plain + 2,000 read + 3,000 written (1,000 of them for 1 hour):
    # 5,000*3 + 2,000*0.30 + 2,000*3.75 + 1,000*6 + 500*15 = 15,000 + 600 + 7,500 + 6,000 + 7,500 = 36,600
    assert cost(
        "anthropic:claude-sonnet-4-5",
        input_tokens=10_000,
        cache_read_tokens=2_000,
        cache_write_tokens=3_000,
        cache_write_long_tokens=1_000,
        output_tokens=500,
    ) == pytest.approx(0.0366)


def test_openai_long_context_bills_the_whole_request_at_the_higher_rates():
    # GPT-6 Sol: $2 / $10 / $0.20; over 272K input: input and cache 2x, output 1.5x.
    # 300,000 in (100,000 cached), 10,000 out: 200,000*4 + 100,000*0.40 + 10,000*15 = 990,000
    assert cost(
        "openai:gpt-6-sol", input_tokens=300_000, cache_read_tokens=100_000, output_tokens=10_000
    ) == pytest.approx(0.99)
    # At exactly 272,000 the standard rates hold: 172,000*2 + 100,000*0.20 + 10,000*10 = 464,000
    assert cost(
        "openai:gpt-6-sol", input_tokens=272_000, cache_read_tokens=100_000, output_tokens=10_000
    ) == pytest.approx(0.464)


def test_openai_30_minute_and_12_hour_cache_writes():
    # GPT-6.1 Terra: $1 in, $5 out, writes $1.25 (30 min) and $2.50 (12 h).
    # 50,000 in: 10,000 plain + 40,000 written (10,000 for 12 h), 1,000 out:
    # 10,000*1 + 30,000*1.25 + 10,000*2.50 + 1,000*5 = 10,000 + 37,500 + 25,000 + 5,000 = 77,500
    assert cost(
        "openai:gpt-6.1-terra",
        input_tokens=50_000,
        cache_write_tokens=40_000,
        cache_write_long_tokens=10_000,
        output_tokens=1_000,
    ) == pytest.approx(0.0775)
    # GPT-6 Luna's 30-minute write is $0.125: 8,000 written + 2,000 plain, no output:
    # 8,000*0.125 + 2,000*0.10 = 1,000 + 200 = 1,200
    assert cost("openai:gpt-6-luna", input_tokens=10_000, cache_write_tokens=8_000) == pytest.approx(0.0012)


def test_service_tiers_multiply_the_bill():
    # GPT-5.4: $2.50 / $15. 100,000 in, 10,000 out = 250,000 + 150,000 = 400,000 -> $0.40 standard.
    usage = {"input_tokens": 100_000, "output_tokens": 10_000}
    assert cost("openai:gpt-5.4", **usage) == pytest.approx(0.40)
    assert cost("openai:gpt-5.4", tier="flex", **usage) == pytest.approx(0.20)
    assert cost("openai:gpt-5.4", tier="batch", **usage) == pytest.approx(0.20)
    assert cost("openai:gpt-5.4", tier="priority", **usage) == pytest.approx(0.80)
    assert cost("openai:gpt-5.4", tier="default", **usage) == pytest.approx(0.40)


def test_gemini_3_1_pro_long_context_tier():
    # Over 200K: $4 / $18 / $0.40. 250,000 in (50,000 cached), 2,000 out:
    # 200,000*4 + 50,000*0.40 + 2,000*18 = 800,000 + 20,000 + 36,000 = 856,000
    assert cost(
        "gemini:gemini-3.1-pro-preview", input_tokens=250_000, cache_read_tokens=50_000, output_tokens=2_000
    ) == pytest.approx(0.856)


def test_haiku_5_5_bills_every_token_at_5x_above_100k():
    # $0.10 / $0.50 up to 100K; above: $0.50 / $2.50.
    # 100,000 in, 1,000 out: 10,000 + 500 = 10,500;  150,000 in, 1,000 out: 75,000 + 2,500 = 77,500
    assert cost("haiku", input_tokens=100_000, output_tokens=1_000) == pytest.approx(0.0105)
    assert cost("haiku", input_tokens=150_000, output_tokens=1_000) == pytest.approx(0.0775)


def test_a_scheduled_price_applies_from_its_day():
    # Gemini 4 Argon: $2 / $10 until 2026-11-30, $4 / $20 from 2026-12-01.
    # 1,000,000 in, 100,000 out: 2,000,000 + 1,000,000 = $3.00, then 4,000,000 + 2,000,000 = $6.00
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000}
    assert cost("gemini-pro", day=date(2026, 11, 30), **usage) == pytest.approx(3.0)
    assert cost("gemini-pro", day=date(2026, 12, 1), **usage) == pytest.approx(6.0)
    assert cost("gemini-pro", day=date(2027, 3, 1), cache_read_tokens=500_000, **usage) == pytest.approx(
        (500_000 * 4 + 500_000 * 0.20 + 100_000 * 20) / 1e6
    )


def test_catalog_corrections_of_issue_12():
    astra = SHIPPED.resolve("astra")
    assert astra.id == "openai:gpt-6.2-astra" and (astra.price.input, astra.price.output) == (8.0, 40.0)
    assert (astra.context_window, astra.rules.max_input_tokens, astra.max_output) == (1_050_000, 922_000, 128_000)
    # 100,000 in, 10,000 out: 800,000 + 400,000 = $1.20
    assert cost("astra", input_tokens=100_000, output_tokens=10_000) == pytest.approx(1.2)
    for model in (
        "gpt-6-astra",
        "gpt-6-sol",
        "gpt-6-luna",
        "gpt-6.1-sol",
        "gpt-6.1-terra",
        "gpt-6.2-sol",
        "gpt-6.2-astra",
    ):
        assert SHIPPED.resolve(f"openai:{model}").rules.max_input_tokens == 922_000
    writes = {
        m: (SHIPPED.resolve(f"openai:{m}").price.cache_write, SHIPPED.resolve(f"openai:{m}").price.cache_write_long)
        for m in ("gpt-6-sol", "gpt-6-luna", "gpt-6.1-terra", "gpt-6.2-sol")
    }
    assert writes == {
        "gpt-6-sol": (2.5, None),
        "gpt-6-luna": (0.125, None),
        "gpt-6.1-terra": (1.25, 2.5),
        "gpt-6.2-sol": (2.5, 5.0),
    }
    assert SHIPPED.resolve("anthropic:claude-sonnet-4-6").max_output == 128_000
    assert SHIPPED.resolve("anthropic:claude-opus-4-6").thinking == "adaptive"


def test_user_catalog_entries_take_the_richer_price_form(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "models:\n  vllm:q:\n    wire_name: q\n    price: {input: 1.0, output: 2.0, long_context: "
        "{above_input_tokens: 10, input: 3.0}, scheduled: [{effective: '2030-01-01', input: 9.0}]}\n"
    )
    config = load_config(path)
    catalog = Catalog.load(extra=config.models, providers={"vllm"})
    price = catalog.resolve("vllm:q").price
    assert compute_cost(Usage(input_tokens=20, output_tokens=1), price, day=date(2026, 1, 1)) == pytest.approx(
        (20 * 3.0 + 1 * 2.0) / 1e6
    )
    path.write_text("models:\n  vllm:q:\n    wire_name: q\n    price: {input: 1.0, long_context: {input: 3.0}}\n")
    with pytest.raises(ConfigError, match=r"models\.vllm:q.*above_input_tokens"):
        load_config(path)


def test_the_emitter_prices_a_response_with_the_service_tier_the_request_asked_for():
    from trunkline.protocol import provider_options
    from trunkline.protocol.messages import Job, Message, Request, Response
    from trunkline.workers._emit import Emitter

    model = SHIPPED.resolve("openai:gpt-5.4")

    def priced(options: dict) -> Response:
        job = Job(
            request_id="r",
            client_id="c",
            operation_id="o",
            model=model,
            stream=False,
            request=Request(model=model.id, messages=[Message.user("x")], provider_options=options),
        )
        emitter = Emitter(job, "openai", lambda *_: None, lambda pid: "tu_1")
        # As the runtime does: the options read once per job give the emitter its tier.
        emitter.service_tier = provider_options.service_tier(provider_options.read(options, "openai", "openai"))
        return emitter.finalize(Response(usage=Usage(input_tokens=100_000, output_tokens=10_000)))

    # 100,000 * $2.50 + 10,000 * $15 = $0.40 standard; flex halves it.
    assert priced({}).cost_usd == pytest.approx(0.40)
    flex = priced({"openai": {"service_tier": "flex"}})
    assert flex.cost_usd == pytest.approx(0.20) and flex.pricing_version == "2026-11-23"


def test_an_unknown_name_says_what_exists():
    cat = Catalog.load(providers={"mock", "ollama"})
    with pytest.raises(UnknownModel, match=r"'nosuch' is not a provider \(the providers are: mock, ollama\)"):
        cat.resolve("nosuch:model")
    with pytest.raises(UnknownModel, match=r"name one, as `provider:llama3\.2:3b`"):
        cat.resolve("llama3.2:3b")
    with pytest.raises(UnknownModel, match="did you mean `echo`"):
        cat.resolve("echoo")
    with pytest.raises(UnknownModel, match="unknown provider 'nope'; the providers are: mock, ollama"):
        cat.resolve("x", provider="nope")


def test_a_provider_name_in_another_case_resolves_and_a_misspelt_one_is_suggested():
    cat = Catalog.load(providers={"mock", "anthropic", "ollama"})
    assert cat.resolve("MOCK:echo").id == "mock:echo"
    assert cat.resolve("echo", provider="Mock").id == "mock:echo"
    assert cat.resolve("Ollama:llama3.2:3b").id == "ollama:llama3.2:3b"  # passes through, provider lowercased
    with pytest.raises(UnknownModel, match=r"'antropic' is not a provider; did you mean `anthropic:claude-x`\?"):
        cat.resolve("antropic:claude-x")
    with pytest.raises(UnknownModel, match=r"unknown provider 'olama'; did you mean `ollama`\?"):
        cat.resolve("llama3.2", provider="olama")
    # The model's own name is exact; one the catalog lists in another case is named, not passed through.
    with pytest.raises(UnknownModel, match=r"unknown model 'mock:ECHO'; did you mean `mock:echo`\?"):
        cat.resolve("MOCK:ECHO")
    with pytest.raises(UnknownModel, match="did you mean `echo`"):
        cat.resolve("ECHO")


ENTRY = {
    "wire_name": "q-7b",
    "aliases": ["q"],
    "context_window": 32_000,
    "reasoning": True,
    "thinking": "budget",
    "price": {
        "input": 1.0,
        "output": 2.0,
        "long_context": {"above_input_tokens": 10, "input": 3.0},
        "service_tiers": {"flex": 0.5},
        "scheduled": [{"effective": "2030-01-01", "input": 9.0}],
    },
    "rules": {"efforts": ["low", "high"], "sampling": ["temperature"], "sources": {"efforts": "https://example"}},
}


async def test_a_users_entry_is_served_as_the_file_says_it(start_daemon):
    """One schema: an entry is the protocol's ModelInfo as written, its id and provider
    from its key, the rest from the catalog."""
    daemon = await start_daemon({"providers": {"vllm": {"type": "mock"}}, "models": {"vllm:q": ENTRY}})
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            info = await client.get_model_info("q")
            shipped = await client.get_model_info("mock:echo")
    assert info is not None and shipped is not None
    sent = msgspec.to_builtins(info)
    assert {k: sent[k] for k in ENTRY} == ENTRY
    assert (info.id, info.provider, info.display_name, info.configured, info.in_catalog) == (
        "vllm:q",
        "vllm",
        "vllm:q",
        True,
        True,
    )
    assert info.pricing_version == shipped.pricing_version == load_catalog_file().pricing_version


@pytest.mark.parametrize(
    ("entry", "where", "hint"),
    [
        ({"price": {"inptu": 1.0}}, "models.vllm:q.price.inptu", "; did you mean `input`?"),
        (
            {"price": {"long_context": {"above_input_tokens": 1, "ouput": 1.0}}},
            "price.long_context.ouput",
            "; did you mean `output`?",
        ),
        (
            {"price": {"scheduled": [{"effective": "2030-01-01", "cache_reed": 1.0}]}},
            "scheduled[0].cache_reed",
            "; did you mean `cache_read`?",
        ),
        # The protocol's ModelRules skips unknown fields on the wire; a file must not.
        ({"rules": {"sampilng": ["temperature"]}}, "models.vllm:q.rules.sampilng", "; did you mean `sampling`?"),
        # What the key and the catalog set is not a file's to say.
        ({"id": "vllm:other"}, "models.vllm:q.id", ""),
        ({"configured": True}, "models.vllm:q.configured", ""),
        ({"pricing_version": "2031"}, "models.vllm:q.pricing_version", ""),
    ],
)
def test_every_key_of_an_entry_is_checked_as_a_config_key(tmp_path, entry, where, hint):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"models": {"vllm:q": {"wire_name": "q", **entry}}}))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"config error in {path} at `")
    assert str(caught.value).endswith(f"{where}`: unknown key{hint}")


def test_the_shipped_catalog_file_is_read_as_strictly(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(
        yaml.safe_dump({"pricing_version": "1", "models": {"mock:x": {"wire_name": "x", "rules": {"effort": []}}}})
    )
    with pytest.raises(
        ConfigError,
        match=re.escape(f"catalog error in {path}: Object contains unknown field `effort` - at `$.models[...].rules`"),
    ):
        load_catalog_file(path)
    path.write_text(yaml.safe_dump({"pricing_version": "1", "models": {"mock:x": {"wire_name": "x"}}}))
    entry = load_catalog_file(path).models["mock:x"]
    assert (entry.id, entry.provider, entry.wire_name) == ("mock:x", "mock", "x")
