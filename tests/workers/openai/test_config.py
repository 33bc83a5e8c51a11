"""The default `openai` provider and its environment, and other instances beside it."""

from __future__ import annotations

from trunkline.config.loader import ProviderConfig, RetryPolicy, TimeoutPolicy, load_config
from trunkline.workers.openai.adapter import OpenAIAdapter


def adapter(config: ProviderConfig, name: str = "openai") -> OpenAIAdapter:
    return OpenAIAdapter(name, config, RetryPolicy(), TimeoutPolicy())


def test_the_default_provider_reads_openais_variables(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-000000000000000000")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://proxy.example/v1/")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_1")
    config = load_config(None, use_user_default=False).providers["openai"]
    assert config.type == "openai" and config.api_key_env == "OPENAI_API_KEY"
    a = adapter(config)
    assert a.base_url == "https://proxy.example/v1" and a.api_key == "sk-test-key-000000000000000000"
    assert a.config.headers == {"OpenAI-Organization": "org-1", "OpenAI-Project": "proj_1"}
    assert a.auth_headers() == {"authorization": "Bearer sk-test-key-000000000000000000"}


def test_without_the_variables_the_default_url_and_no_extra_headers(monkeypatch):
    for name in ("OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    a = adapter(load_config(None, use_user_default=False).providers["openai"])
    assert a.base_url == "https://api.openai.com/v1" and a.config.headers == {}


def test_another_instance_is_untouched_by_the_default_ones_variables(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "https://elsewhere.example/v1")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")
    monkeypatch.setenv("AZURE_KEY", "azure-secret-0000000000")
    config = ProviderConfig(
        type="openai",
        api_key_env="AZURE_KEY",
        base_url="https://my.azure.example/openai/v1",
        headers={"api-version": "preview"},
    )
    a = adapter(config, "azure")
    assert a.base_url == "https://my.azure.example/openai/v1" and a.config.headers == {"api-version": "preview"}
    assert a.api_key == "azure-secret-0000000000"
