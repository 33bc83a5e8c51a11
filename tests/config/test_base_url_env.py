"""`base_url_env`: the variable that replaces a provider's base_url, one key for every
provider, defaulting to the one each official SDK reads."""

from __future__ import annotations

import pytest

from trunkline.config.base_urls import ollama_host_url
from trunkline.config.loader import ConfigError, load_config

SHIPPED = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "openai": "OPENAI_BASE_URL",
    "gemini": "GEMINI_BASE_URL",
    "ollama": "OLLAMA_HOST",
}


@pytest.fixture(autouse=True)
def no_variables(monkeypatch):
    for name in SHIPPED.values():
        monkeypatch.delenv(name, raising=False)


def load(tmp_path, text: str = ""):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return load_config(path)


@pytest.mark.parametrize(("provider", "variable"), SHIPPED.items())
def test_each_shipped_provider_reads_its_sdks_variable(tmp_path, monkeypatch, provider, variable):
    config = load(tmp_path).providers[provider]
    assert config.base_url_variable() == variable
    assert config.resolved_base_url() == config.base_url  # unset: the configured URL
    monkeypatch.setenv(variable, "http://10.1.2.3:9999")
    assert load(tmp_path).providers[provider].resolved_base_url() == "http://10.1.2.3:9999"


@pytest.mark.parametrize(
    ("value", "url"),
    [
        ("0.0.0.0", "http://0.0.0.0:11434"),
        (":8080", "http://127.0.0.1:8080"),
        ("gpu-box:11434", "http://gpu-box:11434"),
        ("gpu-box", "http://gpu-box:11434"),
        ("http://gpu-box", "http://gpu-box:80"),
        ("https://ollama.example", "https://ollama.example:443"),
        ("https://ollama.example:8443/", "https://ollama.example:8443"),
        ("[::1]:5000", "http://[::1]:5000"),
        ("example.com/ollama/", "http://example.com:11434/ollama"),
    ],
)
def test_ollama_host_is_read_as_ollamas_clients_read_it(tmp_path, monkeypatch, value, url):
    assert ollama_host_url(value) == url
    monkeypatch.setenv("OLLAMA_HOST", value)
    assert load(tmp_path).providers["ollama"].resolved_base_url() == url


def test_the_older_spelling_in_options_still_names_the_variable_and_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "https://from-the-sdk-variable.example/v1")
    monkeypatch.setenv("MY_PROXY", "https://my-proxy.example/v1")
    config = load(tmp_path, "providers:\n  openai:\n    options: {base_url_env: MY_PROXY}\n").providers["openai"]
    assert config.resolved_base_url() == "https://my-proxy.example/v1"


def test_an_empty_name_reads_no_variable_and_other_instances_read_none_unasked(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://elsewhere.example")
    config = load(
        tmp_path,
        "providers:\n  anthropic:\n    base_url_env: ''\n"
        "  claude-eu:\n    type: anthropic\n    base_url: https://eu.example\n",
    )
    assert config.providers["anthropic"].resolved_base_url() == "https://api.anthropic.com"
    assert config.providers["claude-eu"].resolved_base_url() == "https://eu.example"


def test_a_variable_that_holds_no_url_is_named_and_its_value_never_said(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMINI_BASE_URL", "ftp://user:s3cret-value@host")
    with pytest.raises(ConfigError) as caught:
        load(tmp_path)
    message = str(caught.value)
    assert "`providers.gemini.base_url_env`: $GEMINI_BASE_URL is set but holds no http(s) URL" in message
    assert "s3cret-value" not in message


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_a_variable_pointing_at_this_daemons_own_front_door_is_not_followed(tmp_path, monkeypatch, host):
    # A shell set up for an SDK pointed at trunkline: the provider would call itself.
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://{host}:8300")
    config = load(tmp_path, "http: {listen: '127.0.0.1:8300'}\n")
    assert config.providers["anthropic"].resolved_base_url() == "https://api.anthropic.com"
    # ... and the daemon says so when it starts (it logs every notice as a warning).
    assert config.notices == [
        (
            "providers.anthropic: $ANTHROPIC_BASE_URL names this daemon's own front door (http.listen), so it "
            "is not followed: the provider calls https://api.anthropic.com"
        )
    ]
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://{host}:8301")  # another port: a real server
    other = load(tmp_path, "http: {listen: '127.0.0.1:8300'}\n")
    assert other.providers["anthropic"].resolved_base_url() == f"http://{host}:8301"
    assert other.notices == []
