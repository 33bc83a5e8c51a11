"""`providers.<name>.keys_env`: several keys used in turn, checked at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from trunkline.config.loader import ConfigError, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("TL_TEST_KEY_A", "value-of-key-a")
    monkeypatch.setenv("TL_TEST_KEY_B", "value-of-key-b")
    monkeypatch.delenv("TL_TEST_KEY_C", raising=False)


def test_keys_env_replaces_the_default_api_key_env(tmp_path):
    config = load_config(write(tmp_path, "providers:\n  anthropic:\n    keys_env: [TL_TEST_KEY_A, TL_TEST_KEY_B]\n"))
    anthropic = config.providers["anthropic"]
    assert anthropic.api_key_env is None  # ANTHROPIC_API_KEY is no key of this provider any more
    assert anthropic.key_env_names() == anthropic.key_names() == ["TL_TEST_KEY_A", "TL_TEST_KEY_B"]
    assert anthropic.api_keys() == ["value-of-key-a", "value-of-key-b"]
    assert anthropic.api_key() == "value-of-key-a"
    assert config.notices == []


def test_a_file_giving_both_is_refused_by_key(tmp_path):
    path = write(
        tmp_path,
        "providers:\n  anthropic:\n    api_key_env: TL_TEST_KEY_A\n    keys_env: [TL_TEST_KEY_A, TL_TEST_KEY_B]\n",
    )
    with pytest.raises(ConfigError, match=r"at `providers\.anthropic\.keys_env`: give api_key_env .* not both"):
        load_config(path)


@pytest.mark.parametrize(
    ("keys_env", "words"),
    [
        ("[TL_TEST_KEY_A, TL_TEST_KEY_A]", "TL_TEST_KEY_A is listed twice"),
        ("[TL_TEST_KEY_A, 'not a name']", "'not a name' is not an environment variable name"),
        ("TL_TEST_KEY_A", "expected `array`, got `str`"),
    ],
)
def test_bad_variable_lists_are_refused_by_key(tmp_path, keys_env, words):
    path = write(tmp_path, f"providers:\n  anthropic:\n    keys_env: {keys_env}\n")
    with pytest.raises(ConfigError, match=r"providers\.anthropic\.keys_env") as caught:
        load_config(path)
    assert words in str(caught.value)


def test_a_cooldown_must_be_positive(tmp_path):
    path = write(
        tmp_path, "providers:\n  anthropic:\n    keys_env: [TL_TEST_KEY_A, TL_TEST_KEY_B]\n    key_cooldown_s: 0\n"
    )
    with pytest.raises(ConfigError, match=r"providers\.anthropic\.key_cooldown_s`: must be a positive number"):
        load_config(path)


def test_variables_not_set_are_left_out_and_named_never_their_values(tmp_path):
    text = "providers:\n  anthropic:\n    keys_env: [TL_TEST_KEY_A, TL_TEST_KEY_C, TL_TEST_KEY_B]\n"
    config = load_config(write(tmp_path, text))
    anthropic = config.providers["anthropic"]
    assert anthropic.api_keys() == ["value-of-key-a", None, "value-of-key-b"]  # indexes stay those of the file
    assert config.notices == ["providers.anthropic: TL_TEST_KEY_C is not set: it uses 2 of its 3 keys"]
    assert "value-of-key" not in " ".join(config.notices)


def test_no_variable_set_leaves_the_provider_without_a_key(tmp_path, monkeypatch):
    monkeypatch.delenv("TL_TEST_KEY_A")
    monkeypatch.delenv("TL_TEST_KEY_B")
    config = load_config(write(tmp_path, "providers:\n  anthropic:\n    keys_env: [TL_TEST_KEY_A, TL_TEST_KEY_B]\n"))
    anthropic = config.providers["anthropic"]
    assert anthropic.needs_key() and anthropic.api_key() is None  # so: not configured, as a missing api_key_env
    assert anthropic.key_hint() == "TL_TEST_KEY_A or TL_TEST_KEY_B"


@pytest.mark.parametrize(
    ("error_class", "retry_after", "rest"),
    [
        ("rate_limit", 12.5, 12.5),
        ("rate_limit", None, 60.0),
        ("rate_limit", 10**6, 86400.0),
        ("authentication", 5, 60.0),
    ],
)
def test_how_long_a_key_rests(tmp_path, error_class, retry_after, rest):
    config = load_config(write(tmp_path, "providers:\n  anthropic:\n    keys_env: [TL_TEST_KEY_A, TL_TEST_KEY_B]\n"))
    assert config.providers["anthropic"].key_cooldown(error_class, retry_after) == rest
