"""The keyring: a provider's keys given in turn, a key resting after a 429, 401 or 403."""

from __future__ import annotations

import pytest

from trunkline.config.loader import ProviderConfig
from trunkline.supervisor.admission.keyring import Keyring


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ring(names=("KEY_A", "KEY_B", "KEY_C"), usable=None, cooldown_s: float = 60.0) -> tuple[Keyring, Clock]:
    clock = Clock()
    config = ProviderConfig(type="anthropic", keys_env=list(names), key_cooldown_s=cooldown_s)
    keyring = Keyring("anthropic", list(names), usable or [True] * len(names), config.key_cooldown, clock)
    return keyring, clock


def test_keys_are_given_in_turn():
    keyring, _ = ring()
    assert [keyring.pick() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [k.requests for k in keyring.use()] == [3, 2, 2]


def test_a_key_not_set_is_never_given():
    keyring, _ = ring(usable=[True, False, True])
    assert [keyring.pick() for _ in range(4)] == [0, 2, 0, 2]
    assert [k.set for k in keyring.use()] == [True, False, True]


def test_a_rate_limited_key_rests_for_its_retry_after_then_comes_back():
    keyring, clock = ring()
    keyring.failed(0, "rate_limit", 30.0)
    assert [keyring.pick() for _ in range(4)] == [1, 2, 1, 2]
    use = keyring.use()
    assert use[0].cooling_s == 30.0 and use[0].last_error == "rate_limit" and use[1].cooling_s is None
    clock.now += 29.9
    assert 0 not in {keyring.pick() for _ in range(4)}
    clock.now += 0.1
    assert 0 in {keyring.pick() for _ in range(3)}
    assert keyring.use()[0].cooling_s is None


@pytest.mark.parametrize("error_class", ["authentication", "access_denied", "rate_limit"])
def test_without_retry_after_a_key_rests_for_the_providers_cooldown(error_class):
    keyring, clock = ring(cooldown_s=45.0)
    keyring.failed(1, error_class, None)
    clock.now += 44.0
    assert 1 not in {keyring.pick() for _ in range(6)}
    clock.now += 1.0
    assert 1 in {keyring.pick() for _ in range(3)}


def test_other_failures_say_nothing_about_the_key():
    keyring, _ = ring()
    for error_class in ("server_error", "timeout", "invalid_request", "quota_exceeded"):
        keyring.failed(0, error_class, 10.0)  # type: ignore[arg-type]  # every class, as a worker may send
    keyring.failed(7, "rate_limit", 10.0)  # an index the ring does not have changes nothing
    assert [keyring.pick() for _ in range(3)] == [0, 1, 2]


def test_a_shorter_rest_never_cuts_a_longer_one():
    keyring, clock = ring(names=("KEY_A", "KEY_B"))
    keyring.failed(0, "rate_limit", 120.0)
    keyring.failed(0, "rate_limit", 5.0)
    clock.now += 60
    assert [keyring.pick() for _ in range(2)] == [1, 1]


def test_when_every_key_rests_the_request_is_refused_with_the_first_to_free():
    keyring, clock = ring(names=("KEY_A", "KEY_B"))
    keyring.failed(0, "rate_limit", 50.0)
    keyring.failed(1, "authentication", None)  # 60 s
    assert keyring.pick() is None
    refused = keyring.next_key()
    assert not isinstance(refused, int)
    assert refused.error_class == "rate_limit" and refused.retryable and refused.retry_after_s == 50.0
    assert "KEY_A" in refused.message and "KEY_B" in refused.message
    clock.now += 55
    assert keyring.next_key() == 0


def test_every_key_refused_by_the_provider_is_an_authentication_refusal():
    keyring, _ = ring(names=("KEY_A", "KEY_B"), cooldown_s=300.0)
    keyring.failed(0, "authentication", None)
    keyring.failed(1, "authentication", None)
    refused = keyring.next_key()
    assert not isinstance(refused, int)
    assert refused.error_class == "authentication" and not refused.retryable and refused.retry_after_s == 300.0


def test_a_provider_with_one_key_has_no_keyring(monkeypatch):
    assert Keyring.of("anthropic", ProviderConfig(type="anthropic", api_key_env="ANTHROPIC_API_KEY")) is None
    assert Keyring.of("anthropic", ProviderConfig(type="anthropic", keys_env=["ONLY_KEY"])) is None
    monkeypatch.setenv("TL_RING_A", "a")
    monkeypatch.delenv("TL_RING_B", raising=False)
    keyring = Keyring.of("anthropic", ProviderConfig(type="anthropic", keys_env=["TL_RING_A", "TL_RING_B"]))
    assert keyring is not None and keyring.names == ["TL_RING_A", "TL_RING_B"] and keyring.usable == [True, False]
