"""`routes:` in a config file: defaults filled in, and each mistake refused at load with
the file and key path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trunkline.config.loader import ConfigError, load_config


def load(tmp_path: Path, routes: dict) -> object:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"routes": routes}))
    return load_config(path, use_user_default=False)


def test_a_route_gets_its_defaults(tmp_path):
    config = load(
        tmp_path,
        {
            "smart": {
                "deployments": [
                    {"provider": "mock", "model": "echo"},
                    {"id": "b", "provider": "mock", "model": "mock:echo"},
                ]
            }
        },
    )
    route = config.routes["smart"]
    assert route.strategy == "weighted" and route.fallback is True
    assert route.fallback_on == ["rate_limit", "server_error", "unavailable", "network"]
    assert (route.breaker.failures, route.breaker.window_s, route.breaker.cooldown_s) == (3, 60.0, 30.0)
    assert [d.id for d in route.deployments] == ["smart/1", "b"]
    assert route.deployments[0].weight == 1.0 and route.deployments[0].limits.rpm is None


@pytest.mark.parametrize(
    ("routes", "where", "says"),
    [
        (
            {"smart": {"deployments": [{"provider": "mok", "model": "echo"}]}},
            "routes.smart.deployments[0].provider",
            "did you mean `mock`",
        ),
        (
            {"smart": {"deployments": [{"provider": "mock", "model": "echo", "weight": 0}]}},
            "routes.smart.deployments[0].weight",
            "positive",
        ),
        (
            {"smart": {"deployments": [{"provider": "mock", "model": "echo", "wieght": 2}]}},
            "routes.smart.deployments[0].wieght",
            "unknown key",
        ),
        (
            {"echo": {"deployments": [{"provider": "mock", "model": "echo"}]}},
            "routes.echo",
            "catalog model 'mock:echo'",
        ),
        ({"smart": {"deployments": []}}, "routes.smart.deployments", "at least one"),
        ({"a:b": {"deployments": [{"provider": "mock", "model": "echo"}]}}, "routes.a:b", "no `:`"),
        (
            {
                "smart": {
                    "deployments": [
                        {"id": "x", "provider": "mock", "model": "echo"},
                        {"id": "x", "provider": "mock", "model": "echo"},
                    ]
                }
            },
            "routes.smart.deployments[1].id",
            "already the id",
        ),
        (
            {"smart": {"deployments": [{"id": "openai", "provider": "mock", "model": "echo"}]}},
            "routes.smart.deployments[0].id",
            "name of a provider",
        ),
        (
            {"smart": {"deployments": [{"id": "key:mock:X", "provider": "mock", "model": "echo"}]}},
            "routes.smart.deployments[0].id",
            "may not start with 'key:'",
        ),
        (
            {"smart": {"fallback_on": ["invalid_request"], "deployments": [{"provider": "mock", "model": "echo"}]}},
            "routes.smart.fallback_on",
            "not a class",
        ),
        (
            {"smart": {"breaker": {"cooldown_s": 0}, "deployments": [{"provider": "mock", "model": "echo"}]}},
            "routes.smart.breaker.cooldown_s",
            "positive",
        ),
        (
            {"smart": {"deployments": [{"provider": "mock", "model": "echo", "limits": {"rpm": 0}}]}},
            "routes.smart.deployments[0].limits.rpm",
            "at least 1",
        ),
        (
            {"smart": {"deployments": [{"provider": "openai", "model": "gpt-4o", "key_env": "NOPE"}]}},
            "routes.smart.deployments[0].key_env",
            "OPENAI_API_KEY",
        ),
        (
            {"smart": {"strategy": "fastest", "deployments": [{"provider": "mock", "model": "echo"}]}},
            "routes.smart.strategy",
            "least_busy",
        ),
    ],
)
def test_a_wrong_route_is_refused_naming_its_key(tmp_path, routes, where, says):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, routes)
    message = str(caught.value)
    assert f"at `{where}`" in message and says in message and "config.yaml" in message
