"""Configuration that cannot work shows as such once the daemon runs."""

from __future__ import annotations

import pytest
import trio

from trunkline import Client
from trunkline.errors import ServerError

pytestmark = pytest.mark.e2e


async def test_an_openai_compatible_provider_without_a_url_is_not_configured(start_daemon):
    daemon = await start_daemon({"providers": {"lab": {"type": "openai_compat"}}})
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            status = {w.provider: w for w in (await client.status()).workers}
    assert status["lab"].state == "not_configured"
    assert "no base_url" in (status["lab"].last_error or "")


async def test_the_daemon_logs_one_line_per_request(daemon):
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            done = await client.complete("mock:echo", "one two", request_id="req-logged-1")
            with pytest.raises(ServerError):
                await client.complete(
                    "mock:echo",
                    "x",
                    request_id="req-logged-2",
                    provider_options={"mock": {"steps": [{"error": {"error_class": "server_error", "attempts": 99}}]}},
                )
        await daemon.wait_for_line("req-logged-2")
    lines = [line for line in daemon.output().splitlines() if "req-logged-" in line]
    assert len(lines) == 2, lines
    assert "mock:echo complete: stop, " in lines[0] and f"{done.usage.output_tokens} out" in lines[0]
    assert "error server_error" in lines[1]
