"""The Prometheus endpoint (metrics.listen), scraped over HTTP from a running daemon."""

from __future__ import annotations

import socket

import httpx
import pytest
import trio

from trunkline import Client
from trunkline.errors import TrunklineError

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def value(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition text (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_requests_errors_retries_tokens_and_latency_are_scraped(start_daemon):
    port = free_port()
    daemon = await start_daemon({"metrics": {"listen": f"127.0.0.1:{port}"}})
    flaky = {"mock": {"steps": [{"error": {"error_class": "server_error", "attempts": 1}}, {"text": "ok"},
                                {"usage": {"input_tokens": 7, "output_tokens": 3}}]}}
    broken = {"mock": {"steps": [{"error": {"error_class": "invalid_request", "status": 400}}]}}
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            await client.complete("mock:echo", "x", provider_options=flaky)
            async with client.stream("mock:echo", "streamed words") as s:
                await s.response()
            with pytest.raises(TrunklineError):
                await client.complete("mock:echo", "x", provider_options=broken)
        async with httpx.AsyncClient() as http:
            reply = await http.get(f"http://127.0.0.1:{port}/metrics")
    text = reply.text
    assert reply.status_code == 200
    assert value(text, "trunkline_requests_total", provider="mock", model="mock:echo", outcome="stop") == 2
    assert value(text, "trunkline_requests_total", outcome="error") == 1
    assert value(text, "trunkline_errors_total", error_class="invalid_request") == 1
    assert value(text, "trunkline_retries_total", provider="mock") == 1
    assert value(text, "trunkline_tokens_total", kind="input") >= 7
    assert value(text, "trunkline_request_duration_seconds_count", model="mock:echo") == 3
    assert value(text, "trunkline_time_to_first_event_seconds_count", model="mock:echo") == 1
    assert value(text, "trunkline_worker_up", provider="mock") == 1
    assert value(text, "trunkline_worker_restarts", provider="mock") == 0
    assert "trunkline_requests_in_flight" in text and "trunkline_replay_requests" in text


async def test_metrics_are_off_unless_configured(daemon):
    assert "metrics on" not in daemon.output()
