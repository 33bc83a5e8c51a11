"""`shared_state:`: the Redis URL, from the file or a variable, checked at load, and its
password never in a message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trunkline.config.loader import ConfigError, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_off_by_default() -> None:
    shared = load_config(use_user_default=False).shared_state
    assert not shared.on and shared.url() is None
    assert (shared.key_prefix, shared.timeout_s, shared.tls_ca_file) == ("trunkline", 0.25, None)


def test_a_url_in_the_file_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "shared_state:\n  redis: 'rediss://:pw@cache.internal:6380/1'\n"))
    assert config.shared_state.on and config.shared_state.url() == "rediss://:pw@cache.internal:6380/1"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("shared_state:\n  redis: 'http://:hunter2@h:6379'\n", "at `shared_state.redis`: the scheme must be"),
        ("shared_state:\n  redis: 'redis://:hunter2@h:port/0'\n", "at `shared_state.redis`: not a redis URL"),
        ("shared_state:\n  redis: 'redis://:hunter2@h:6379/zero'\n", "at `shared_state.redis`: the path must be"),
        ("shared_state:\n  redis: 'redis://h'\n  redis_env: R\n", "at `shared_state.redis_env`: give redis or"),
        ("shared_state:\n  redis_env: 'not a name'\n", "at `shared_state.redis_env`: must name"),
        ("shared_state:\n  key_prefix: '{x}'\n", "at `shared_state.key_prefix`: 1 to 64"),
        ("shared_state:\n  timeout_s: 0\n", "at `shared_state.timeout_s`: must be in (0, 60]"),
        ("shared_state:\n  tls_ca_file: /nonexistent/ca.pem\n", "at `shared_state.tls_ca_file`:"),
        ("shared_state:\n  redis_url: x\n", "at `shared_state.redis_url`: unknown key"),
    ],
)
def test_a_shared_state_that_cannot_work_is_refused_at_load_without_its_password(
    tmp_path: Path, text: str, words: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)) as caught:
        load_config(write(tmp_path, text))
    assert "hunter2" not in str(caught.value)


def test_the_url_can_come_from_a_variable_read_at_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(write(tmp_path, "shared_state:\n  redis_env: TL_REDIS\n"))
    monkeypatch.delenv("TL_REDIS", raising=False)
    with pytest.raises(ConfigError, match=re.escape("`shared_state.redis_env`: TL_REDIS is not set")):
        config.shared_state.url()
    monkeypatch.setenv("TL_REDIS", "redis://:hunter2@h:bad/0")
    with pytest.raises(ConfigError, match="not a redis URL") as caught:
        config.shared_state.url()
    assert "hunter2" not in str(caught.value)
    monkeypatch.setenv("TL_REDIS", "redis://:hunter2@10.0.0.5:6379/2")
    assert config.shared_state.url() == "redis://:hunter2@10.0.0.5:6379/2"
