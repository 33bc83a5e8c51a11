"""The environment a worker of a provider with several keys (`keys_env`) starts with:
the one dict the slot hands a spawned process and a fork request alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from trunkline.config.loader import WorkerSettings, load_config
from trunkline.supervisor import spawn
from trunkline.supervisor.slot import SlotTerms

KEYS = {"TL_ENV_KEY_A": "value-a", "TL_ENV_KEY_B": "value-b", "TL_ENV_OTHER_1": "other-1", "TL_ENV_OTHER_2": "other-2"}


@pytest.fixture
def config(tmp_path: Path, monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "stray")
    monkeypatch.setenv("OPENAI_API_KEY", "openai-value")
    path = tmp_path / "config.yaml"
    path.write_text(
        "providers:\n"
        "  anthropic:\n    keys_env: [TL_ENV_KEY_A, TL_ENV_KEY_B]\n"
        "  second:\n    type: anthropic\n    keys_env: [TL_ENV_OTHER_1, TL_ENV_OTHER_2]\n"
    )
    return load_config(path)


def worker_env(config, name: str) -> dict[str, str]:
    terms = SlotTerms.of(config, name)
    others = terms.key_names.difference(config.providers[name].key_env_names())  # as the slot computes them
    settings = WorkerSettings(
        name=name,
        provider=config.providers[name],
        retry=terms.retry,
        timeouts=terms.timeouts,
        link="fd:3",
        generation=1,
        state_dir="/tmp",
    )
    return spawn.environment(settings, others)


def test_a_worker_holds_every_key_of_its_provider_and_none_of_another(config):
    first = worker_env(config, "anthropic")
    assert first["TL_ENV_KEY_A"] == "value-a" and first["TL_ENV_KEY_B"] == "value-b"
    assert not {"TL_ENV_OTHER_1", "TL_ENV_OTHER_2", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"} & set(first)
    second = worker_env(config, "second")
    assert second["TL_ENV_OTHER_1"] == "other-1" and second["TL_ENV_OTHER_2"] == "other-2"
    assert not {"TL_ENV_KEY_A", "TL_ENV_KEY_B", "OPENAI_API_KEY"} & set(second)
    assert worker_env(config, "openai")["OPENAI_API_KEY"] == "openai-value"
    assert not set(KEYS) & set(worker_env(config, "openai"))
