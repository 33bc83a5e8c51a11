"""`trunkline reload` and SIGHUP against a running daemon: new prices and retry policy for new requests,
a broken file refused with the old configuration kept, and a request in flight finishing untouched."""

from __future__ import annotations

import signal
import subprocess
import sys
from contextlib import suppress

import anyio
import pytest
import trio
import yaml

from fakes.upstream import FakeUpstream, Reply
from helpers import REPO
from trunkline import Client
from trunkline.errors import RateLimitError, UnavailableError
from trunkline.protocol.messages import StreamStart

pytestmark = pytest.mark.e2e

KEY = "fake-anthropic-key-never-to-be-seen-0123456789"
MODEL = "anthropic:priced"
ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1000, "output_tokens": 100},
}
OVERLOADED = Reply(
    529,
    {"content-type": "application/json"},
    [b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'],
)


def priced(input_usd: float, output_usd: float) -> dict:
    return {
        MODEL: {
            "wire_name": "claude-sonnet-4-5",
            "context_window": 200000,
            "max_output": 64000,
            "price": {"input": input_usd, "output": output_usd},
        }
    }


def cost(input_usd: float, output_usd: float) -> float:
    return (1000 * input_usd + 100 * output_usd) / 1e6


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    return await start_daemon(
        {"providers": {"anthropic": {"base_url": upstream.base_url}}, "models": priced(1.0, 2.0)},
        env={"ANTHROPIC_API_KEY": KEY},
    )


def rewrite(daemon, change) -> None:
    config = yaml.safe_load(daemon.config_path.read_text())
    change(config)
    daemon.config_path.write_text(yaml.safe_dump(config))


def drain(client: Client) -> None:
    with suppress(anyio.WouldBlock):
        while True:
            client.bus_events.receive_nowait()


async def cli_reload(daemon) -> subprocess.CompletedProcess:
    return await trio.run_process(
        [sys.executable, "-m", "trunkline.cli", "reload", "--runtime-dir", str(daemon.runtime_dir)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        cwd=REPO,
    )


async def test_reload_applies_to_new_requests_and_refuses_a_broken_file(daemon, upstream):
    release = trio.Event()
    events = [e + b"\n\n" for e in (REPO / "cassettes" / "anthropic" / "thinking.sse").read_bytes().split(b"\n\n")]
    # message_start, the thinking block's start and first delta; the rest waits for `release`
    held = Reply(200, {"content-type": "text/event-stream"}, events, hold_after=3, release=release)
    upstream.route("POST", "/v1/messages", held, Reply.json(ANSWER))
    with trio.fail_after(40):
        # A request in flight across every reload below: its upstream reply is held open.
        async with Client(daemon.runtime_dir, watch_bus=True) as client, client.stream(MODEL, "2+2?") as in_flight:
            assert type(await in_flight.__anext__()) is StreamStart
            assert (await client.complete(MODEL, "hi")).cost_usd == pytest.approx(cost(1.0, 2.0))

            # A broken file is refused with its error; the running configuration stays.
            good = daemon.config_path.read_text()
            daemon.config_path.write_text(good + "retry: {max_retries: [not a number\n")
            refused = await client.reload()
            assert not refused.ok and refused.error.error_class == "invalid_request"
            assert str(daemon.config_path) in refused.error.message and "invalid YAML" in refused.error.message
            daemon.config_path.write_text(good.replace("models:", "modelz:"))
            refused = await client.reload()
            assert not refused.ok and "`modelz`: unknown key" in refused.error.message
            assert (await client.complete(MODEL, "hi")).cost_usd == pytest.approx(cost(1.0, 2.0))

            # A good one, through the CLI: new prices and a new retry policy from the next request;
            # a changed provider header needs a restart and says so.
            def change(config: dict) -> None:
                config["models"] = priced(10.0, 20.0)
                config["providers"]["anthropic"]["retry"] = {"max_retries": 0}
                config["providers"]["anthropic"]["headers"] = {"x-team": "b"}

            daemon.config_path.write_text(good)
            rewrite(daemon, change)
            done = await cli_reload(daemon)
            out = done.stdout.decode()
            assert done.returncode == 0, done.stderr.decode()
            assert f"reloaded {daemon.config_path}" in out
            assert "providers.anthropic: changed; applies when the daemon restarts" in out
            response = await client.complete(MODEL, "hi")
            assert response.cost_usd == pytest.approx(cost(10.0, 20.0))
            assert "x-team" not in upstream.sent("/v1/messages")[-1].headers  # bound at start
            before = len(upstream.sent("/v1/messages"))
            upstream.route("POST", "/v1/messages", OVERLOADED, Reply.json(ANSWER))
            with pytest.raises(RateLimitError):
                await client.complete(MODEL, "hi")
            assert len(upstream.sent("/v1/messages")) == before + 1  # max_retries 0: not retried

            # SIGHUP does the same; the bus says when it is done.
            upstream.route("POST", "/v1/messages", Reply.json(ANSWER))
            rewrite(daemon, lambda config: config.update(models=priced(100.0, 200.0)))
            drain(client)  # the CLI's reload was announced too
            daemon.proc.send_signal(signal.SIGHUP)
            while (await client.bus_events.receive()).name != "config.reloaded":
                pass
            assert (await client.complete(MODEL, "hi")).cost_usd == pytest.approx(cost(100.0, 200.0))

            # The request in flight all along ends normally, at the prices it started with.
            release.set()
            response = await in_flight.response()
    assert response.text == "4" and response.finish_reason.reason == "stop"
    assert response.cost_usd == pytest.approx((50 * 1.0 + 120 * 2.0) / 1e6)
    assert daemon.proc.returncode is None  # SIGHUP did not end the daemon


async def test_a_failed_sighup_reload_is_on_the_bus_and_changes_nothing(daemon, upstream):
    upstream.route("POST", "/v1/messages", Reply.json(ANSWER))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            await client.status()  # the daemon answers: its SIGHUP handler is in place
            daemon.config_path.write_text("providers: [1, 2\n")
            done = await cli_reload(daemon)
            assert done.returncode == 1 and "reload refused, nothing changed" in done.stderr.decode()
            drain(client)
            daemon.proc.send_signal(signal.SIGHUP)
            while (failed := await client.bus_events.receive()).name != "config.reload_failed":
                pass
            assert str(daemon.config_path) in failed.detail
            assert (await client.complete(MODEL, "hi")).cost_usd == pytest.approx(cost(1.0, 2.0))


async def test_a_reload_applies_the_restart_limits_live_and_lists_what_needs_a_restart(start_daemon):
    daemon = await start_daemon(
        {"supervision": {"max_restarts": 5, "restart_window_s": 60, "unavailable_retry_s": 300}}
    )
    crash = {"mock": {"steps": [{"text": "a"}, {"crash": True}]}}
    with trio.fail_after(40):
        async with Client(daemon.runtime_dir) as client:
            # Five restarts allowed: one crash, and the mock is back.
            with pytest.raises(UnavailableError):
                await client.complete("mock:echo", "x", provider_options=crash)
            assert (await client.complete("mock:echo", "back")).text == "back"

            def change(config: dict) -> None:
                config["supervision"].update(max_restarts=1, restart_window_s=600, heartbeat_interval_s=0.3)

            rewrite(daemon, change)
            result = await client.reload()
            assert result.ok and result.restart_needed == ["supervision.heartbeat_interval_s"]
            # At most one restart in 600 s now: the crash before the reload counts, so the next trips it.
            with pytest.raises(UnavailableError):
                await client.complete("mock:echo", "x", provider_options=crash)
            status = {w.provider: w for w in (await client.status()).workers}
    assert status["mock"].state == "unavailable"


async def test_a_reload_reports_what_differs_from_what_the_daemon_runs(start_daemon):
    """Measured against what the daemon started with, not the previous file: a file put
    back as it was needs no restart, whatever was loaded in between."""
    daemon = await start_daemon()
    original = daemon.config_path.read_text()
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            rewrite(
                daemon,
                lambda config: config.update(endpoints={"events": "elsewhere.ipc"}, limits={"max_connections": 10}),
            )
            changed = await client.reload()
            assert changed.ok and changed.restart_needed == ["endpoints", "limits"], changed
            rewrite(daemon, lambda config: config.update(endpoints={"events": "events.ipc"}))
            half_back = await client.reload()
            assert half_back.ok and half_back.restart_needed == ["limits"], half_back
            daemon.config_path.write_text(original)
            restored = await cli_reload(daemon)
            assert (await client.complete("mock:echo", "still served")).text == "still served"
    assert restored.returncode == 0, restored.stderr.decode()
    assert "changed" not in restored.stdout.decode(), restored.stdout.decode()
