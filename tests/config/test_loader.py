"""Configuration: defaults, merging, and errors that name the file, the key and what was expected."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import trio

from trunkline.config.loader import DEFAULTS_PATH, ConfigError, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_defaults_alone():
    config = load_config(None, use_user_default=False)
    assert config.retry.max_retries == 2 and config.retry.base_delay_s == 1.0 and config.retry.multiplier == 2.0
    assert config.retry.max_delay_s == 60.0 and config.retry.jitter == 0.5 and config.retry.retry_after_cap_s == 60
    assert (config.timeouts.connect_s, config.timeouts.request_s, config.timeouts.stream_idle_s) == (10, 600, 60)
    assert "mock" in config.providers and config.source == str(DEFAULTS_PATH)
    assert config.retry.retry_timeouts is False  # a timed-out call is not sent (and billed) again
    assert config.limits.max_response_bytes == 32 << 20
    assert config.limits.max_event_bytes == 65 << 20


def test_a_response_limit_too_small_to_hold_an_answer_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"limits\.max_response_bytes"):
        load_config(write(tmp_path, "limits:\n  max_response_bytes: 10\n"))


def test_user_file_merges_over_defaults(tmp_path):
    path = write(tmp_path, "retry:\n  max_retries: 5\nproviders:\n  other:\n    type: mock\n")
    config = load_config(path)
    assert config.retry.max_retries == 5 and config.retry.base_delay_s == 1.0  # untouched keys stay
    assert {"mock", "anthropic", "other"} <= set(config.providers)
    assert config.source == str(path)


def test_provider_overrides_fall_back_to_globals(tmp_path):
    path = write(tmp_path, "providers:\n  slow:\n    type: mock\n    retry: {max_retries: 0}\n")
    config = load_config(path)
    assert config.provider_retry("slow").max_retries == 0
    assert config.provider_retry("mock").max_retries == 2


@pytest.mark.parametrize(
    ("text", "path_words", "what"),
    [
        ("retry:\n  max_retries: lots\n", "`retry.max_retries`", "expected `int`, got `str`"),
        ("retry:\n  max_retrys: 3\n", "`retry.max_retrys`", "unknown key"),
        ("nonsense: 1\n", "`nonsense`", "unknown key"),
        ("providers:\n  x:\n    type: warp\n", "`providers.x.type`", "invalid enum value 'warp'"),
        ("providers:\n  x: {}\n", "`providers.x`", "missing required field `type`"),
        ("timeouts: 5\n", "`timeouts`", "expected `object`, got `int`"),
        ("providers:\n  Bad Name:\n    type: mock\n", "`providers.Bad Name`", "provider names must match"),
        ("retry:\n  jitter: 3\n", "`retry`", "jitter within [0, 1]"),
        ("retry:\n  max_retreis: 3\n", "`retry.max_retreis`", "unknown key; did you mean `max_retries`?"),
        (
            "providers:\n  mock:\n    timeouts: {stream_idel_s: 5}\n",
            "`providers.mock.timeouts.stream_idel_s`",
            "did you mean `stream_idle_s`?",
        ),
        ("modelz: {}\n", "`modelz`", "unknown key; did you mean `models`?"),
        ("log_level: warn\n", "`log_level`", "did you mean `warning`? (one of: debug, info, warning, error)"),
        ("providers:\n  x:\n    type: antropic\n", "`providers.x.type`", "did you mean `anthropic`?"),
        (
            "models:\n  mock:y: {wire_name: y, rules: {sampling: [temprature]}}\n",
            "`models.mock:y.rules.sampling[0]`",
            "did you mean `temperature`?",
        ),
    ],
)
def test_errors_name_file_key_and_expectation(tmp_path, text, path_words, what):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and path_words in message and what in message.lower(), message


def test_bad_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "retry:\n  max_retries: [1, 2\n")
    with pytest.raises(ConfigError, match=rf"{path}: invalid YAML at line 3"):
        load_config(path)


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.yaml")


async def test_the_daemon_refuses_to_start_on_a_config_error(tmp_path):
    path = write(tmp_path, "supervision:\n  max_restarts: many\n")
    result = await trio.run_process(
        [sys.executable, "-m", "trunkline.cli", "serve", "--config", str(path), "--runtime-dir", str(tmp_path / "rt")],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 2
    assert f"config error in {path} at `supervision.max_restarts`" in result.stderr.decode()
    assert not (tmp_path / "rt").exists()


def test_gemini_key_falls_back_to_google_api_key_and_its_base_url_to_the_environment(monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_BASE_URL", raising=False)
    gemini = load_config(None, use_user_default=False).providers["gemini"]
    assert gemini.type == "gemini" and gemini.needs_key() and gemini.api_key() is None
    assert gemini.key_hint() == "GEMINI_API_KEY or GOOGLE_API_KEY"
    assert gemini.resolved_base_url() == "https://generativelanguage.googleapis.com"
    monkeypatch.setenv("GOOGLE_API_KEY", "google-key")
    assert gemini.api_key() == "google-key"
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key")
    assert gemini.api_key() == "gemini-key"  # the first name set wins
    monkeypatch.setenv("GEMINI_API_KEY", "")
    assert gemini.api_key() == "google-key"  # an empty variable is not a key
    monkeypatch.setenv("GEMINI_BASE_URL", "http://127.0.0.1:9")
    assert gemini.resolved_base_url() == "http://127.0.0.1:9"


def test_an_empty_list_of_key_names_is_refused(tmp_path):
    path = write(tmp_path, "providers:\n  g:\n    type: gemini\n    api_key_env: []\n")
    with pytest.raises(ConfigError, match=r"providers\.g\.api_key_env"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("limits:\n  max_connections: -5\n", "at `limits.max_connections`: -5 is out of range [1, 1000000]"),
        ("limits:\n  subscriber_queue: 100000\n", "at `limits.subscriber_queue`: 100000 is out of range [1, 8192]"),
        ("supervision:\n  heartbeat_timeout_s: 0\n", "at `supervision.heartbeat_timeout_s`: must be a positive number"),
        (
            "timeouts:\n  stream_idle_s: -1\n",
            "at `timeouts.stream_idle_s`: must be a positive number of seconds, got -1",
        ),
        ("timeouts:\n  connect_s: 0\n", "at `timeouts.connect_s`: must be a positive number of seconds, got 0"),
        ("timeouts:\n  request_s: .nan\n", "at `timeouts.request_s`: must be a positive number of seconds, got nan"),
        (
            "providers:\n  mock:\n    timeouts: {request_s: -5}\n",
            "at `providers.mock.timeouts.request_s`: must be a positive number",
        ),
        ("retry:\n  base_delay_s: -1\n", "at `retry.base_delay_s`: must be zero or a positive number of seconds"),
        ("retry:\n  retry_after_cap_s: -1\n", "at `retry.retry_after_cap_s`: must be zero or a positive number"),
        ("retry:\n  multiplier: -2\n", "at `retry.multiplier`: must be a positive number, got -2"),
        ("supervision:\n  restart_backoff_s: -0.5\n", "at `supervision.restart_backoff_s`: must be zero or a positive"),
        ("replay:\n  keep_s: 0\n", "at `replay.keep_s`: must be a positive number of seconds"),
        ("replay:\n  ring_events: -1\n", "at `replay.ring_events`: must be at least 1, got -1"),
        ("endpoints:\n  control: 'tcp://localhost'\n", "at `endpoints.control`: 'tcp://localhost' is not an endpoint"),
        ("endpoints:\n  events: 'http://x:1'\n", "at `endpoints.events`: 'http://x:1' is not an endpoint"),
        ("endpoints:\n  control: 'tcp://127.0.0.1:99999'\n", "the port must be 1-65535"),
        ("endpoints:\n  control: 'sub/dir.ipc'\n", "give a file name"),
        (
            "providers:\n  lab: {type: openai_compat, base_url: not a url}\n",
            "at `providers.lab.base_url`: 'not a url' is not an http(s) URL",
        ),
        ("providers:\n  lab: {type: openai_compat, base_url: 'http://h:port/v1'}\n", "has a port that is not a number"),
        (
            "providers:\n  lab: {type: openai_compat, base_url: 'http://h/v1', max_connections: 0}\n",
            "at `providers.lab.max_connections`: must be at least 1",
        ),
        (
            "retry:\n  max_retries: 1\nretry:\n  max_retries: 2\n",
            "invalid YAML at line 3, column 1: duplicate key 'retry'",
        ),
        ("providers:\n  a: {type: mock}\n  a: {type: mock}\n", "duplicate key 'a'"),
        (
            "metrics:\n  listen: 'http://x:9464/metrics'\n",
            "at `metrics.listen`: 'http://x:9464/metrics' is not HOST:PORT",
        ),
        ("metrics:\n  listen: ':99999'\n", "at `metrics.listen`: ':99999': the port must be 1-65535"),
        (
            "metrics:\n  listen: '0.0.0.0:9464'\n",
            "at `metrics.listen`: '0.0.0.0:9464' can be reached from other machines: set metrics.bearer_token_file",
        ),
        ("metrics:\n  listen: '[::]:9464'\n", "'[::]:9464' can be reached from other machines"),
        ("metrics:\n  listen: 'box.internal:9464'\n", "'box.internal:9464' can be reached from other machines"),
        (
            "metrics:\n  bearer_token_file: /t\n  bearer_token_env: T\n",
            "at `metrics.bearer_token_env`: give bearer_token_file or bearer_token_env, not both",
        ),
        (
            "telemetry:\n  otlp_endpoint: 'localhost:4318'\n",
            "at `telemetry.otlp_endpoint`: 'localhost:4318' is not an http(s) URL (e.g. http://127.0.0.1:4318)",
        ),
        ("telemetry:\n  metric_interval_s: 0\n", "at `telemetry.metric_interval_s`: must be in (0, 86400]"),
        ("telemetry:\n  capture_contents: true\n", "at `telemetry.capture_contents`: unknown key"),
    ],
)
def test_settings_that_cannot_work_are_refused_at_load(tmp_path, text, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_config(write(tmp_path, text))


def test_the_endpoints_and_urls_that_work_load(tmp_path):
    config = load_config(
        write(
            tmp_path,
            (
                "endpoints:\n  control: 'tls+tcp://0.0.0.0:7800'\n  events: 'tcp://[::1]:7801'\n"
                "providers:\n  lab: {type: openai_compat, base_url: 'http://127.0.0.1:8000/v1'}\n"
            ),
        )
    )
    assert config.endpoints.control == "tls+tcp://0.0.0.0:7800"
    assert load_config(write(tmp_path, "endpoints:\n  control: 'ipc:///tmp/x.ipc'\n")).endpoints.control


async def test_a_bad_config_is_exit_2_with_the_key_not_a_traceback(tmp_path):
    path = write(tmp_path, "endpoints:\n  control: 'tcp://nowhere'\n")
    result = await trio.run_process(
        [sys.executable, "-m", "trunkline.cli", "serve", "--config", str(path), "--runtime-dir", str(tmp_path / "rt")],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    err = result.stderr.decode()
    assert result.returncode == 2 and "at `endpoints.control`" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("listen", "host", "loopback"),
    [
        (":9464", "127.0.0.1", True),
        ("localhost:9464", "localhost", True),
        ("[::1]:9464", "::1", True),
        ("127.0.0.2:9464", "127.0.0.2", True),
        ("127.1.2.3:9464", "127.1.2.3", True),
        ("[::ffff:127.0.0.1]:9464", "::ffff:127.0.0.1", True),
        ("0.0.0.0:9464", "0.0.0.0", False),
        ("[::ffff:0.0.0.0]:9464", "::ffff:0.0.0.0", False),
        ("10.0.0.1:9464", "10.0.0.1", False),
        ("[::]:9464", "::", False),
    ],
)
def test_the_metrics_address_is_loopback_unless_a_host_says_otherwise(tmp_path, listen, host, loopback):
    token = tmp_path / "token"
    token.write_text("secret\n")
    config = load_config(write(tmp_path, f"metrics:\n  listen: '{listen}'\n  bearer_token_file: {token}\n"))
    assert config.metrics.address() == (host, 9464)
    assert config.metrics.on_loopback is loopback
    assert config.metrics.bearer_token() == "secret"


@pytest.mark.parametrize("held", ["", "  \n", "two words", "caf\u00e9"])
def test_a_token_file_without_one_usable_token_is_refused_by_key_not_by_value(tmp_path, held):
    token = tmp_path / "token"
    token.write_text(held)
    config = load_config(write(tmp_path, f"metrics:\n  listen: ':9464'\n  bearer_token_file: {token}\n"))
    with pytest.raises(ConfigError, match=re.escape(f"`metrics.bearer_token_file` ({token})")) as caught:
        config.metrics.bearer_token()
    assert not held.strip() or held.strip() not in str(caught.value)
    token.unlink()
    with pytest.raises(ConfigError, match="cannot read it: No such file or directory"):
        config.metrics.bearer_token()


def test_zero_where_it_means_no_wait_loads(tmp_path):
    config = load_config(
        write(
            tmp_path,
            "retry: {base_delay_s: 0, max_delay_s: 0, retry_after_cap_s: 0}\nsupervision: {restart_backoff_s: 0}\n",
        )
    )
    assert config.retry.base_delay_s == 0 and config.supervision.restart_backoff_s == 0


async def test_the_daemon_names_the_key_a_mistyped_one_meant(tmp_path):
    path = write(tmp_path, "retry:\n  max_retreis: 4\n")
    result = await trio.run_process(
        [sys.executable, "-m", "trunkline.cli", "serve", "--config", str(path), "--runtime-dir", str(tmp_path / "rt")],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert f"config error in {path} at `retry.max_retreis`: unknown key; did you mean `max_retries`?" in err


@pytest.mark.parametrize(
    ("http", "words"),
    [
        ("{listen: '0.0.0.0:8300'}", "can be reached from other machines: set http.keys_file"),
        ("{listen: 'nowhere'}", "is not HOST:PORT"),
        ("{listen: ':8300', processes: 0}", "out of range [1, 64]"),
        ("{listen: ':8300', max_body_bytes: 10}", "must be at least 1024"),
        ("{listen: ':8300', idle_timeout_s: -1}", "must be a positive number of seconds"),
    ],
)
def test_a_front_door_that_cannot_serve_safely_is_a_config_error(tmp_path, http, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_config(write(tmp_path, f"http: {http}\n"))


def test_the_front_door_keys_come_from_a_file_or_the_environment_and_are_never_said(tmp_path, monkeypatch):
    keys = tmp_path / "keys"
    keys.write_text("# the door's keys\nkey-one\n\nkey-two  # a comment\n")
    monkeypatch.setenv("TL_DOOR_KEY", "key-three")
    config = load_config(
        write(tmp_path, f"http: {{listen: '0.0.0.0:8300', keys_file: {keys}, keys_env: [TL_DOOR_KEY]}}\n")
    )
    assert config.http.keys() == ["key-one", "key-two", "key-three"]
    keys.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="holds no key"):
        config.http.keys()
    monkeypatch.setenv("TL_DOOR_KEY", "")
    with pytest.raises(ConfigError, match="TL_DOOR_KEY is not set") as caught:
        load_config(write(tmp_path, "http: {listen: ':8300', keys_env: [TL_DOOR_KEY]}\n")).http.keys()
    assert "key-" not in str(caught.value)
