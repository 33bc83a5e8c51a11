"""Configuration that cannot work shows as such once the daemon runs."""

from __future__ import annotations

import pytest
import trio

from trunkline import Client

pytestmark = pytest.mark.e2e


async def test_an_openai_compatible_provider_without_a_url_is_not_configured(start_daemon):
    daemon = await start_daemon({"providers": {"lab": {"type": "openai_compat"}}})
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            status = {w.provider: w for w in (await client.status()).workers}
    assert status["lab"].state == "not_configured"
    assert "no base_url" in (status["lab"].last_error or "")
