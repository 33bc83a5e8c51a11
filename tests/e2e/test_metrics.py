"""The Prometheus endpoint (metrics.listen), scraped over HTTP from a running daemon and
read with prometheus_client's own parsers."""

from __future__ import annotations

import secrets
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from helpers import DaemonProcess
from trunkline import Client
from trunkline.errors import TrunklineError

pytestmark = pytest.mark.e2e

Sample = tuple[str, dict[str, str], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def samples(text: str) -> list[Sample]:
    """Every sample of an exposition, as prometheus_client's parser reads it (it raises
    on text Prometheus could not read)."""
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def value(found: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels` (0 when none)."""
    return sum(v for n, have, v in found if n == name and labels.items() <= have.items())


def series(found: list[Sample]) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {(n, tuple(sorted(labels.items()))) for n, labels, _ in found}


async def scrape(port: int, host: str = "127.0.0.1", **kw: Any) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(f"http://{host}:{port}/metrics", **kw)


@pytest.fixture
async def lone_daemon(nursery: trio.Nursery) -> AsyncIterator[Any]:
    """Start a daemon that may refuse to start: returns it once it serves or has exited."""
    started: list[DaemonProcess] = []

    async def start(config: dict[str, Any], env: dict[str, str] | None = None) -> DaemonProcess:
        d = DaemonProcess(config, env)
        started.append(d)
        await d.start(nursery)
        return d

    yield start
    for d in started:
        if d.proc is not None and d.proc.returncode is None:
            await d.stop()
        d.cleanup()


async def test_requests_errors_retries_waits_tokens_and_latency_are_scraped(start_daemon):
    port = free_port()
    daemon = await start_daemon(
        {"metrics": {"listen": f"127.0.0.1:{port}"}, "providers": {"lab": {"type": "openai_compat"}}}
    )  # no base_url: not configured
    flaky = {
        "mock": {
            "steps": [
                {"error": {"error_class": "server_error", "attempts": 1}},
                {"text": "ok"},
                {"usage": {"input_tokens": 7, "output_tokens": 3, "cache_write_tokens": 5}},
            ]
        }
    }
    throttled = {"mock": {"steps": [{"error": {"error_class": "rate_limit", "attempts": 1}}, {"text": "ok"}]}}
    told_when = {
        "mock": {
            "steps": [{"error": {"error_class": "rate_limit", "retry_after": 0.05, "attempts": 1}}, {"text": "ok"}]
        }
    }
    broken = {"mock": {"steps": [{"error": {"error_class": "invalid_request", "status": 400}}]}}
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            await client.complete("mock:echo", "x", provider_options=flaky)
            await client.complete("mock:echo", "x", provider_options=throttled)
            await client.complete("mock:echo", "x", provider_options=told_when)
            async with client.stream("mock:echo", "streamed words") as s:
                await s.response()
            with pytest.raises(TrunklineError):
                await client.complete("mock:echo", "x", provider_options=broken)
            with pytest.raises(TrunklineError):
                await client.complete("mock:echo", "x", provider_options={"mock": {"steps": [{"crash": True}]}})
            await client.complete("mock:echo", "after the restart")  # waits for the new worker
        reply = await scrape(port)
    assert reply.status_code == 200
    found = samples(reply.text)
    assert value(found, "trunkline_requests_total", provider="mock", model="mock:echo", outcome="stop") == 5
    assert value(found, "trunkline_requests_total", outcome="error") == 2
    assert value(found, "trunkline_errors_total", error_class="invalid_request") == 1
    assert value(found, "trunkline_errors_total", error_class="unavailable") == 1
    assert value(found, "trunkline_retries_total", provider="mock", error_class="server_error") == 1
    assert value(found, "trunkline_retries_total", provider="mock", error_class="rate_limit") == 2
    # Two waits: the policy's backoff (base_delay_s 0.01, no jitter) and the Retry-After.
    assert value(found, "trunkline_rate_limit_waits_total", provider="mock") == 2
    assert value(found, "trunkline_rate_limit_wait_seconds_total", provider="mock") == pytest.approx(0.06)
    assert value(found, "trunkline_tokens_total", kind="input") >= 7
    assert value(found, "trunkline_tokens_total", model="mock:echo", kind="cache_write") == 5
    assert value(found, "trunkline_request_duration_seconds_count", model="mock:echo") == 7
    assert value(found, "trunkline_time_to_first_event_seconds_count", model="mock:echo") == 1
    assert value(found, "trunkline_requests_in_flight", provider="mock") == 0
    assert value(found, "trunkline_replay_requests") == 7
    # Restarts are a counter; each provider's state is a label, and `up` is only for
    # providers that have a worker to be up.
    assert ("trunkline_worker_restarts_total", {"provider": "mock"}, 1.0) in found
    assert value(found, "trunkline_worker_up", provider="mock") == 1
    assert value(found, "trunkline_worker_state", provider="mock", state="running") == 1
    assert value(found, "trunkline_worker_state", provider="mock") == 1
    assert value(found, "trunkline_worker_state", provider="lab", state="not_configured") == 1
    assert value(found, "trunkline_worker_state", provider="lab") == 1
    assert not [
        s
        for s in found
        if s[0] in ("trunkline_worker_up", "trunkline_worker_restarts_total") and s[1]["provider"] == "lab"
    ]
    types = {f.name: f.type for f in text_string_to_metric_families(reply.text)}
    assert types["trunkline_worker_restarts"] == "counter"
    assert types["trunkline_worker_state"] == "gauge"
    assert not [s for s in found if s[0].endswith("_created")]


async def test_model_names_a_client_makes_up_make_no_new_series(start_daemon):
    port = free_port()
    daemon = await start_daemon(
        {"metrics": {"listen": f"127.0.0.1:{port}"}, "models": {"mock:house": {"wire_name": "echo"}}}
    )  # a configured name

    async def submit_made_up_names(client: Client, n: int) -> list[str]:
        names = [f"mock:{secrets.token_hex(6)}" for _ in range(n)]  # passed through, then not found
        names += [f"nowhere:{secrets.token_hex(6)}", secrets.token_hex(6)]  # refused at submit
        for name in names:
            with pytest.raises(TrunklineError):
                await client.complete(name, "x")
        return names

    with trio.fail_after(60):
        async with Client(daemon.runtime_dir) as client:
            await client.complete("mock:echo", "x")
            await client.complete("mock:house", "x")
            first = await submit_made_up_names(client, 3)
            before = samples((await scrape(port)).text)
            later = await submit_made_up_names(client, 30)
            with pytest.raises(TrunklineError):
                await client.complete("mock:" + "m" * 3000, "x")
            text = (await scrape(port)).text
    after = samples(text)
    assert series(after) == series(before)
    assert {labels["model"] for _, labels, _ in after if "model" in labels} == {"mock:echo", "mock:house", "other"}
    assert not [name for name in first + later if name.rpartition(":")[2] in text]
    assert value(after, "trunkline_requests_total", model="other", outcome="error") == 3 + 30 + 1
    assert value(after, "trunkline_errors_total", model="other", error_class="not_found") == 3 + 30 + 1
    assert value(after, "trunkline_requests_total", model="mock:house", outcome="stop") == 1
    # Refused submits are counted by class alone.
    assert value(after, "trunkline_requests_refused_total", error_class="not_found") == 2 * 2
    assert value(before, "trunkline_requests_refused_total") == 2


async def test_only_metrics_is_served_in_either_format(start_daemon):
    port = free_port()
    await start_daemon({"metrics": {"listen": f"127.0.0.1:{port}"}})
    base = f"http://127.0.0.1:{port}"
    with trio.fail_after(20):
        async with httpx.AsyncClient() as http:
            metrics = await http.get(f"{base}/metrics")
            root = await http.get(f"{base}/")
            elsewhere = [
                await http.get(f"{base}{path}")
                for path in ("/favicon.ico", "/metrics/x", "/x?y=1", "/Metrics", "/%2e%2e/metrics")
            ]
            posted = await http.post(f"{base}/metrics", content=b"x")
            deleted = await http.delete(f"{base}/metrics")
            head = await http.head(f"{base}/metrics")
            openmetrics = await http.get(
                f"{base}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
            )
            gzipped = await http.get(f"{base}/metrics", headers={"Accept-Encoding": "gzip"})
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert samples(metrics.text)
    assert root.status_code == 200 and "/metrics" in root.text and "trunkline_" not in root.text
    assert [r.status_code for r in elsewhere] == [404] * 5
    assert not [r for r in elsewhere if "trunkline_" in r.text]
    assert (posted.status_code, deleted.status_code) == (405, 405)
    assert posted.headers["allow"] == "GET, HEAD" and "trunkline_" not in posted.text
    assert head.status_code == 200 and head.content == b""
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    families = {f.name: f.type for f in openmetrics_families(openmetrics.text)}  # raises on bad text
    assert families["trunkline_worker_restarts"] == "counter"
    assert gzipped.headers["content-encoding"] == "gzip" and samples(gzipped.text)


async def test_idle_connections_cannot_take_more_than_their_share(start_daemon):
    port = free_port()
    await start_daemon({"metrics": {"listen": f"127.0.0.1:{port}"}})
    idle = []
    try:
        for _ in range(16):  # MAX_CONNECTIONS, each saying nothing (each would time out after 10 s)
            s = socket.socket()
            s.connect(("127.0.0.1", port))
            idle.append(s)
        with trio.fail_after(8), pytest.raises(httpx.TransportError):
            await scrape(port)  # one more is closed at once, not queued behind them
    finally:
        for s in idle:
            s.close()
    with trio.fail_after(20):
        while True:  # their threads see the close and free their places
            try:
                if (await scrape(port)).status_code == 200:
                    break
            except httpx.TransportError:
                await trio.sleep(0.05)


async def test_a_listen_address_without_a_host_is_loopback_only(start_daemon):
    port = free_port()
    daemon = await start_daemon({"metrics": {"listen": f":{port}"}})
    with trio.fail_after(20):
        assert (await scrape(port)).status_code == 200
        # Linux routes all of 127/8 to lo: a socket bound to every interface would answer here.
        with pytest.raises(httpx.ConnectError):
            await scrape(port, host="127.0.0.2")
    assert f"metrics on http://127.0.0.1:{port}/metrics" in daemon.output()


async def test_every_interface_without_a_token_is_refused_at_start(lone_daemon):
    port = free_port()
    daemon = await lone_daemon({"metrics": {"listen": f"0.0.0.0:{port}"}})
    with trio.fail_after(20):
        await daemon.exited.wait()
    assert daemon.proc.returncode == 2
    assert "at `metrics.listen`: '0.0.0.0:" in daemon.output() and "bearer_token_file" in daemon.output()
    assert "Traceback" not in daemon.output()


async def test_every_interface_with_a_token_file_needs_the_token(start_daemon, tmp_path):
    port, token = free_port(), secrets.token_urlsafe(24)
    token_file = tmp_path / "metrics-token"
    token_file.write_text(token + "\n")  # as `echo` writes it; Prometheus trims it too
    daemon = await start_daemon({"metrics": {"listen": f"0.0.0.0:{port}", "bearer_token_file": str(token_file)}})
    good = {"Authorization": f"Bearer {token}"}
    with trio.fail_after(20):
        missing = await scrape(port)
        wrong = await scrape(port, headers={"Authorization": f"Bearer {token[:-1]}x"})
        longer = await scrape(port, headers={"Authorization": f"Bearer {token}x"})
        basic = await scrape(port, headers={"Authorization": f"Basic {token}"})
        unknown_path = await scrape_path(port, "/x", headers={})
        ok = await scrape(port, headers=good)
        lowercase = await scrape(port, headers={"Authorization": f"bearer {token}"})
        elsewhere = await scrape(port, host="127.0.0.2", headers=good)  # every interface listens
        found_path = await scrape_path(port, "/x", headers=good)
    for refused in (missing, wrong, longer, basic, unknown_path):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert "trunkline_" not in refused.text
    assert ok.status_code == 200 and samples(ok.text)
    assert lowercase.status_code == 200 and elsewhere.status_code == 200
    assert found_path.status_code == 404
    assert "a bearer token is required" in daemon.output() and token not in daemon.output()


async def scrape_path(port: int, path: str, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(f"http://127.0.0.1:{port}{path}", headers=headers)


async def test_a_token_from_the_environment(start_daemon, lone_daemon):
    port, token = free_port(), secrets.token_hex(16)
    config = {"metrics": {"listen": f"127.0.0.1:{port}", "bearer_token_env": "TL_TEST_METRICS_TOKEN"}}
    await start_daemon(config, env={"TL_TEST_METRICS_TOKEN": token})
    with trio.fail_after(20):
        assert (await scrape(port)).status_code == 401  # a token set is required on loopback too
        assert (await scrape(port, headers={"Authorization": f"Bearer {token}"})).status_code == 200
        unset = await lone_daemon(
            {**config, "metrics": {**config["metrics"], "listen": f"127.0.0.1:{free_port()}"}},
            env={"TL_TEST_METRICS_TOKEN": ""},
        )
        await unset.exited.wait()
    assert unset.proc.returncode == 2
    assert "`metrics.bearer_token_env` (TL_TEST_METRICS_TOKEN): it holds no token" in unset.output()


async def test_metrics_are_off_unless_configured(daemon):
    assert "metrics on" not in daemon.output()


def imported(daemon: DaemonProcess) -> set[str]:
    """The modules the daemon's processes imported, from `python -X importtime`'s lines."""
    return {line.rsplit("|", 1)[1].strip() for line in daemon.lines if line.startswith("import time:")}


async def test_without_metrics_serve_never_loads_prometheus_nor_the_client(start_daemon):
    """Memory a supervisor would keep for nothing: with `metrics.listen` unset no process
    of the daemon imports prometheus_client, and `serve` never imports the Python client
    or the service-file code. (With metrics on, the same reading sees prometheus_client.)"""
    profile = {"PYTHONPROFILEIMPORTTIME": "1"}
    off = await start_daemon({}, profile)
    on = await start_daemon({"metrics": {"listen": f"127.0.0.1:{free_port()}"}}, profile)
    assert "prometheus_client" in imported(on)
    assert "trunkline.supervisor.daemon" in imported(off)
    assert not {"prometheus_client", "trunkline.client", "trunkline.service"} & imported(off)
