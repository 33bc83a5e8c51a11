"""Capabilities: each provider type's declaration, met with a catalog entry's flags
once, when the catalog is loaded."""

from __future__ import annotations

import importlib

import pytest

from helpers import REPO
from trunkline.config.capabilities import IMPLEMENTATIONS
from trunkline.config.catalog import Catalog
from trunkline.config.loader import ConfigError, load_config
from trunkline.protocol.messages import Capabilities, ModelInfo


def test_every_worker_names_its_own_declaration():
    folders = [f.name for f in (REPO / "workers").iterdir() if (f / "capabilities.py").exists()]
    assert sorted(folders) == sorted(IMPLEMENTATIONS)
    for name in folders:
        module = importlib.import_module(f"trunkline.workers.{name}.capabilities")
        assert module.SUPPORTS is IMPLEMENTATIONS[name]


def test_an_entry_gets_its_flags_met_with_its_provider_types_declaration():
    entries = {
        "groq:vision": ModelInfo(id="", provider="", wire_name="v", vision=True, structured_output=True),
        "groq:text": ModelInfo(id="", provider="", wire_name="t", vision=False, tools=False),
        "anthropic:old": ModelInfo(id="", provider="", wire_name="o", vision=True),
    }
    catalog = Catalog(entries, "v1", providers={"groq", "anthropic"}, types={"groq": "openai_compat"})
    seeing = catalog.resolve("groq:vision").capabilities
    text = catalog.resolve("groq:text").capabilities
    old = catalog.resolve("anthropic:old").capabilities  # a provider not in `types` is its own type
    assert seeing == Capabilities(
        tools=True, parallel_tool_calls=True, vision=True, reasoning=False, structured_output=True, streaming=True
    )
    assert text is not None and not (text.tools or text.vision or text.audio or text.documents)
    assert old is not None and old.prefill and old.documents and not old.audio
    # A name the catalog does not list: the provider decides, within what the implementation carries.
    passed = catalog.resolve("groq:anything").capabilities
    assert passed is not None and passed.vision and not passed.documents and not passed.audio


def test_a_provider_type_without_a_declaration_leaves_the_flags_alone():
    catalog = Catalog({"x:y": ModelInfo(id="", provider="", wire_name="y")}, "v1", providers={"x"})
    assert catalog.resolve("x:y").capabilities is None


def test_the_claude_models_that_refuse_a_prefill_say_so():
    catalog = Catalog.load(providers={"anthropic"})
    for name in ("claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-7", "claude-sonnet-5-5", "claude-haiku-5-5"):
        info = catalog.resolve(f"anthropic:{name}")
        assert info.rules.prefill is False and info.capabilities is not None and not info.capabilities.prefill, name
        assert "prefill" in info.rules.sources
    for name in ("claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5"):
        info = catalog.resolve(f"anthropic:{name}")
        assert info.capabilities is not None and info.capabilities.prefill, name


def test_a_catalog_file_cannot_set_capabilities(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("models:\n  vllm:q:\n    wire_name: q\n    capabilities: {audio: true}\n")
    with pytest.raises(ConfigError, match=r"models\.vllm:q\.capabilities`: unknown key"):
        load_config(path)


def test_entries_read_back_from_a_daemon_keep_the_capabilities_it_gave():
    given = Capabilities(tools=True, vision=True)
    entry = ModelInfo(id="openai:m", provider="openai", wire_name="m", vision=True, capabilities=given)
    # A provider named `openai` may be of another type: only the daemon knew which.
    assert Catalog({"openai:m": entry}, "v1", providers={"openai"}).resolve("openai:m").capabilities == given
