"""Addresses of this machine, however they are spelt, through the real daemon: a listen on
a loopback address needs no token, and a provider on this machine that refuses the
connection is said to be down at once instead of being waited for."""

from __future__ import annotations

import socket

import httpx
import pytest
import trio

from trunkline import Client
from trunkline.errors import NetworkError

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_ipv4_mapped_loopback_listen_serves_metrics_without_a_token(start_daemon):
    port = free_port()
    daemon = await start_daemon({"metrics": {"listen": f"[::ffff:127.0.0.1]:{port}"}})
    with trio.fail_after(20):
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert answer.status_code == 200 and "trunkline" in answer.text
    assert daemon.proc is not None and daemon.proc.returncode is None


@pytest.mark.parametrize("host", ["[::ffff:127.0.0.1]", "127.3.2.1", "0.0.0.0"])
async def test_a_refused_connection_to_this_machine_is_reported_without_a_backoff(start_daemon, host):
    # Nothing listens on the port; a minute's backoff would outlast the test's bound, so the
    # error arriving within it shows the attempt was not repeated.
    slow_retries = {"max_retries": 2, "base_delay_s": 60.0, "max_delay_s": 60.0, "jitter": 0.0}
    base_url = f"http://{host}:{free_port()}"
    daemon = await start_daemon(
        {"providers": {"anthropic": {"base_url": base_url, "retry": slow_retries}}},
        env={"ANTHROPIC_API_KEY": "fake-key-0123456789"},
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(NetworkError) as caught:
                await client.complete("anthropic:claude-sonnet-4-5", "hi")
    assert "cannot connect to anthropic" in str(caught.value)
