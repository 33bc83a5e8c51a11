"""Several keys for one provider (`providers.<name>.keys_env`) with the real daemon and a
fake Anthropic API recording the key of every request: keys in turn, a key that answers
429 or 401 rests while the requests succeed on the other, the worker's environment in
both start modes, and no key's value in the daemon's output, events or errors."""

from __future__ import annotations

import itertools
import socket
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from fakes.messages_api import anthropic_answer
from fakes.upstream import FakeUpstream, Recorded, Reply
from helpers import DaemonProcess
from redis_server import RedisServer
from trunkline import Client
from trunkline.errors import RateLimitError
from trunkline.protocol.messages import WorkerStatus

pytestmark = pytest.mark.e2e

KEY_A = "tl-e2e-key-a-value-5b1f0c2e9d"
KEY_B = "tl-e2e-key-b-value-77a3e41c08"
OTHER = "tl-e2e-openai-key-value-19c4"
STRAY = "tl-e2e-stray-anthropic-key-3e0"
ENV = {"TL_E2E_KEY_A": KEY_A, "TL_E2E_KEY_B": KEY_B, "ANTHROPIC_API_KEY": STRAY}
MODEL = "anthropic:held"
SECRETS = (KEY_A, KEY_B, OTHER, STRAY)


def config(upstream: FakeUpstream, **provider: Any) -> dict[str, Any]:
    return {
        "log_level": "debug",
        "providers": {
            "anthropic": {"base_url": upstream.base_url, "keys_env": ["TL_E2E_KEY_A", "TL_E2E_KEY_B"], **provider}
        },
        "models": {MODEL: {"wire_name": "claude-sonnet-4-5", "context_window": 200000, "max_output": 64000}},
    }


def refusal(kind: str, status: int, retry_after: str | None = None) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": f"{kind} for this key"}}
    return Reply.json(body, status=status, headers={"retry-after": retry_after} if retry_after else {})


def keys_seen(upstream: FakeUpstream) -> list[str]:
    names = {KEY_A: "A", KEY_B: "B"}
    return [names.get(r.headers.get("x-api-key", ""), "?") for r in upstream.sent("/v1/messages")]


async def anthropic_status(client: Client) -> WorkerStatus:
    return next(w for w in (await client.status()).workers if w.provider == "anthropic")


def environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode(errors="replace").partition("=")[::2] for p in pairs if p)


def assert_no_secret(daemon: DaemonProcess, *said: Any) -> None:
    text = daemon.output() + "".join(repr(s) for s in said)
    assert not [s for s in SECRETS if s in text]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def value(found: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(v for n, have, v in found if n == name and labels.items() <= have.items())


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.mark.parametrize("worker_start", ["forkserver", "spawn"])
async def test_requests_take_the_keys_in_turn_and_each_worker_holds_its_own_keys_only(
    start_daemon, upstream, worker_start
):
    upstream.route("POST", "/v1/messages", anthropic_answer("ok"))
    cfg = config(upstream)
    cfg["supervision"] = {"worker_start": worker_start}
    daemon = await start_daemon(cfg, env={**ENV, "OPENAI_API_KEY": OTHER})
    with trio.fail_after(60):
        async with Client(daemon.runtime_dir) as client:
            answers = [(await client.complete(MODEL, "hi")).text for _ in range(4)]
            async with client.stream(MODEL, "hi") as stream:
                streamed = await stream.response()
            anthropic = await anthropic_status(client)
            pids = {w.provider: w.pid for w in (await client.status()).workers if w.pid}
        await daemon.wait_for_line(f"provider anthropic: worker {pids['anthropic']} {worker_start[:4]}")
    assert answers == ["ok"] * 4 and streamed.text == "ok"
    assert keys_seen(upstream) == ["A", "B", "A", "B", "A"]
    assert [(k.variable, k.set, k.requests, k.cooling_s) for k in anthropic.api_keys] == [
        ("TL_E2E_KEY_A", True, 3, None),
        ("TL_E2E_KEY_B", True, 2, None),
    ]
    if worker_start == "spawn":
        own = environ(pids["anthropic"])
        assert own["TL_E2E_KEY_A"] == KEY_A and own["TL_E2E_KEY_B"] == KEY_B
        assert OTHER not in own.values() and STRAY not in own.values()  # another provider's, and a key it dropped
        other = environ(pids["openai"])
        assert other["OPENAI_API_KEY"] == OTHER and not {KEY_A, KEY_B} & set(other.values())
    else:
        # A forked worker's /proc environ is the fork server's at its start (its own comes
        # in its fork request, the dict tests/supervisor/test_key_environment.py checks):
        # the fork server and so that start environment hold no key at all.
        assert daemon.proc is not None
        for pid in (pids["anthropic"], pids["openai"]):
            assert not set(SECRETS) & set(environ(pid).values())
    assert_no_secret(daemon, answers, anthropic)


async def test_a_key_answering_429_rests_for_its_retry_after_while_every_request_succeeds_on_the_other(
    start_daemon, upstream
):
    a_requests: list[float] = []

    def reply(request: Recorded) -> Reply:
        if request.headers.get("x-api-key") == KEY_A:
            a_requests.append(trio.current_time())
            return refusal("rate_limit_error", 429, retry_after="60")
        return anthropic_answer("ok")(request)

    upstream.route("POST", "/v1/messages", reply)
    port = free_port()
    daemon = await start_daemon({**config(upstream), "metrics": {"listen": f"127.0.0.1:{port}"}}, env=ENV)
    with trio.fail_after(60):
        async with Client(daemon.runtime_dir) as client:
            answers = [(await client.complete(MODEL, "hi")).text for _ in range(3)]

            async def one() -> None:
                answers.append((await client.complete(MODEL, "hi")).text)

            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(one)
            anthropic = await anthropic_status(client)
        shown = await trio.run_process(
            [sys.executable, "-m", "trunkline.cli", "status", "--runtime-dir", str(daemon.runtime_dir)],
            capture_stdout=True,
        )
        async with httpx.AsyncClient() as http:
            found = samples((await http.get(f"http://127.0.0.1:{port}/metrics")).text)
    assert answers == ["ok"] * 9
    assert keys_seen(upstream).count("A") == len(a_requests) == 1  # its first answer rested it: no request since
    assert keys_seen(upstream).count("B") == 9
    key_a, key_b = anthropic.api_keys
    assert key_a.last_error == "rate_limit" and key_a.cooling_s is not None and 50 < key_a.cooling_s <= 60
    assert key_b.cooling_s is None and key_b.requests == 8  # the supervisor gave the other eight to B
    line = next(x for x in shown.stdout.decode().splitlines() if x.startswith("anthropic: "))
    assert line.startswith("anthropic: 2 keys: TL_E2E_KEY_A 1 requests, resting ")
    assert line.endswith("s after rate_limit; TL_E2E_KEY_B 8 requests")
    a, b = {"provider": "anthropic", "key": "TL_E2E_KEY_A"}, {"provider": "anthropic", "key": "TL_E2E_KEY_B"}
    assert value(found, "trunkline_provider_key_requests_total", **a) == 1
    assert value(found, "trunkline_provider_key_requests_total", **b) == 8
    assert value(found, "trunkline_provider_key_resting", **a) == 1
    assert value(found, "trunkline_provider_key_resting", **b) == 0
    assert_no_secret(daemon, anthropic, shown.stdout, found)


async def test_when_every_key_rests_a_request_is_refused_before_any_call(start_daemon, upstream):
    upstream.route("POST", "/v1/messages", refusal("rate_limit_error", 429, retry_after="60"))
    cfg = config(upstream)
    cfg["retry"] = {"retry_after_cap_s": 5}  # a 60 s Retry-After is not waited for
    daemon = await start_daemon(cfg, env=ENV)
    with trio.fail_after(60):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(RateLimitError) as first:
                await client.complete(MODEL, "hi")
            calls = len(upstream.sent("/v1/messages"))
            with pytest.raises(RateLimitError) as refused:
                await client.complete(MODEL, "hi")
    assert keys_seen(upstream) == ["A", "B"] and calls == 2  # the first tried both keys
    assert len(upstream.sent("/v1/messages")) == 2  # the second never reached the provider
    assert "every key of provider anthropic rests" in refused.value.message
    assert refused.value.retry_after is not None and 50 < refused.value.retry_after <= 60
    assert_no_secret(daemon, first.value.info, refused.value.info)


async def test_a_key_answering_401_rests_for_the_cooldown_and_comes_back_once_fixed(start_daemon, upstream):
    b_requests: list[float] = []
    fixed = False

    def reply(request: Recorded) -> Reply:
        if request.headers.get("x-api-key") == KEY_B:
            b_requests.append(trio.current_time())
            if not fixed:
                return refusal("authentication_error", 401)
        return anthropic_answer("ok")(request)

    upstream.route("POST", "/v1/messages", reply)
    cooldown = 1.0
    daemon = await start_daemon(config(upstream, key_cooldown_s=cooldown), env=ENV)
    with trio.fail_after(60):
        async with Client(daemon.runtime_dir) as client:
            answers = [(await client.complete(MODEL, "hi")).text for _ in range(6)]
            rested = await anthropic_status(client)
            fixed = True
            # B comes back once its rest is over: poll until a request is served with it.
            while keys_seen(upstream)[-1] != "B":
                answers.append((await client.complete(MODEL, "hi")).text)
                await trio.sleep(0.05)
            back = await anthropic_status(client)
    assert set(answers) == {"ok"}  # every request succeeded, on A while B rested
    assert all(later - earlier >= cooldown * 0.99 for earlier, later in itertools.pairwise(b_requests))
    assert rested.api_keys[1].last_error == "authentication"
    assert back.api_keys[1].cooling_s is None
    assert_no_secret(daemon, rested, back)


async def test_with_shared_state_a_key_rested_on_one_daemon_rests_on_the_other(
    start_daemon, upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    # A key one daemon saw answer 429 is not tried by another daemon naming the same
    # Redis: it learns the rest within one read of the store (every 2 s).
    def reply(request: Recorded) -> Reply:
        if request.headers.get("x-api-key") == KEY_A:
            return refusal("rate_limit_error", 429, retry_after="60")
        return anthropic_answer("ok")(request)

    upstream.route("POST", "/v1/messages", reply)
    cfg = {**config(upstream), "shared_state": {"redis": redis_server.url, "timeout_s": 2.0}}
    first = await start_daemon(cfg, env=ENV)
    second = await start_daemon(cfg, env=ENV)
    with trio.fail_after(60):
        async with Client(first.runtime_dir) as one:
            assert (await one.complete(MODEL, "hi")).text == "ok"  # A refused, then B served it
        assert keys_seen(upstream) == ["A", "B"]
        async with Client(second.runtime_dir) as two:
            while (await anthropic_status(two)).api_keys[0].cooling_s is None:
                await trio.sleep(0.1)  # a real daemon's periodic read: polled, bounded above
            key_a = (await anthropic_status(two)).api_keys[0]
            answers = [(await two.complete(MODEL, "hi")).text for _ in range(4)]
    assert answers == ["ok"] * 4
    assert keys_seen(upstream) == ["A", "B", "B", "B", "B", "B"]  # the second daemon never tried A
    assert key_a.cooling_s is not None and 50 < key_a.cooling_s <= 60
