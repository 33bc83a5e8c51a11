"""The `clients:` section (named client keys, their limits and budgets) and the
providers' `limits:`: checked at load with the key path, read at start, never said."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio

from trunkline.config.loader import ConfigError, client_keys, load_config

KEY = "tl-named-key-0123456789abcdef"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("clients: {a: {key_env: X, limits: {rpm: 0}}}", "clients.a.limits.rpm", "at least 1"),
        ("clients: {a: {key_env: X, limits: {tpm: many}}}", "clients.a.limits.tpm", "expected `int | null`"),
        ("clients: {a: {key_env: X, limitz: {}}}", "clients.a.limitz", "did you mean `limits`"),
        ("clients: {a: {}}", "clients.a.key_env", "one of the two"),
        ("clients: {a: {key_env: X, key_file: /f}}", "clients.a.key_env", "one of the two"),
        ("clients: {'a b': {key_env: X}}", "clients.a b", "names match"),
        ("clients: {a: {key_env: X, budget: {usd_per_day: -1}}}", "clients.a.budget.usd_per_day", "positive"),
        ("clients: {a: {key_env: X, budget: {usd_per_month: .nan}}}", "clients.a.budget.usd_per_month", "positive"),
        ("providers: {mock: {limits: {parallel: 0}}}", "providers.mock.limits.parallel", "at least 1"),
        ("providers: {mock: {limits: {rps: 1}}}", "providers.mock.limits.rps", "unknown key"),
    ],
)
def test_a_client_key_or_limit_that_cannot_work_is_refused_at_load(tmp_path, text, where, words):
    with pytest.raises(ConfigError, match=r"at `" + where.replace(".", r"\.") + "`") as err:
        load_config(write(tmp_path, text))
    assert words in str(err.value)


def test_keys_come_from_a_variable_or_a_file_and_are_never_said(tmp_path, monkeypatch):
    (tmp_path / "bob.key").write_text("# bob's\n" + KEY[::-1] + "\n")
    text = f"clients:\n  alice: {{key_env: TL_T_ALICE, limits: {{rpm: 3}}}}\n  bob: {{key_file: {tmp_path}/bob.key}}\n"
    config = load_config(write(tmp_path, text))
    assert config.clients["alice"].limits.rpm == 3 and config.clients["bob"].budget.usd_per_day is None
    monkeypatch.setenv("TL_T_ALICE", KEY)
    assert client_keys(config) == {"alice": KEY, "bob": KEY[::-1]}
    monkeypatch.setenv("TL_T_ALICE", "short")
    with pytest.raises(ConfigError, match="at least 16") as short:
        client_keys(config)
    monkeypatch.setenv("TL_T_ALICE", KEY[::-1])
    with pytest.raises(ConfigError, match=r"`clients\.bob`: its key is also the key of `clients\.alice`") as twice:
        client_keys(config)
    monkeypatch.delenv("TL_T_ALICE")
    with pytest.raises(ConfigError, match=r"TL_T_ALICE.*not set"):
        client_keys(config)
    assert KEY[::-1] not in str(twice.value) and "short" not in str(short.value)


async def test_the_daemon_refuses_to_start_without_a_named_key(tmp_path):
    path = write(tmp_path, "clients: {alice: {key_env: TL_T_UNSET_KEY}}\n")
    env = {k: v for k, v in os.environ.items() if k != "TL_T_UNSET_KEY"}
    result = await trio.run_process(
        [sys.executable, "-m", "trunkline.cli", "serve", "--config", str(path), "--runtime-dir", str(tmp_path / "rt")],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env,
    )
    err = result.stderr.decode()
    assert result.returncode == 2 and "config error at `clients.alice.key_env` (TL_T_UNSET_KEY)" in err
