"""get_model_info and latest_model against a real daemon: the catalog it serves, by id,
alias and capability; the module-level names use the default client."""

from __future__ import annotations

import sys

import pytest
import trio

import trunkline
from trunkline import Client

pytestmark = pytest.mark.e2e


async def test_lookups_by_id_alias_and_capability(daemon):
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            every = await client.list_models()
            sonnet = await client.get_model_info("anthropic:claude-sonnet-4-5")
            fable = await client.get_model_info("fable")
            passed = await client.get_model_info("anthropic:claude-nonexistent")
            missing = await client.get_model_info("claude-nonexistent")
            latest = {p: await client.latest_model(p) for p in ("anthropic", "openai", "gemini", "mock")}
            seeing = await client.latest_model("openai", "vision")
            hearing = await client.latest_model("gemini", "audio")
            continuing = await client.latest_model("anthropic", "prefill")
            nothing = await client.latest_model("no-such-provider")
            with pytest.raises(ValueError, match="unknown capability 'telepathy'; use one of tools, vision"):
                await client.latest_model("openai", "telepathy")
            module = await trunkline.get_model_info("mock:echo", client=client)
            spec_name = await trunkline.get_latest_model("anthropic", "reasoning", client=client)
    assert sonnet is not None and sonnet.provider == "anthropic" and sonnet.wire_name == "claude-sonnet-4-5"
    assert fable is not None and fable.id == "anthropic:claude-fable-5-1" and missing is None
    # A name the catalog does not list, with its provider, is passed through as complete() does.
    assert passed is not None and passed.provider == "anthropic" and passed.wire_name == "claude-nonexistent"
    assert not passed.in_catalog
    # The catalog lists each provider's newest model first: that is the latest.
    for provider, info in latest.items():
        assert info is not None and info == next(m for m in every if m.provider == provider)
    assert seeing is not None and seeing.vision and seeing.provider == "openai"
    # Capabilities beyond the catalog's flags: what the daemon's implementation carries too.
    assert hearing is not None and hearing.capabilities is not None and hearing.capabilities.audio
    assert continuing is not None and continuing.id == "anthropic:claude-opus-4-5"  # the newest that takes a prefill
    assert nothing is None and module is not None and module.id == "mock:echo"
    assert spec_name is not None and spec_name.reasoning


SYNC_PROGRAM = (
    "import sys\n"
    "from trunkline import SyncClient\n"
    "with SyncClient(sys.argv[1]) as client:\n"
    "    print(client.get_model_info('mock:echo').id, client.latest_model('mock').id,\n"
    "          client.get_model_info('nope:nothing'))\n"
)


async def test_the_sync_client_has_them_too(daemon):
    result = await trio.run_process(
        [sys.executable, "-c", SYNC_PROGRAM, str(daemon.runtime_dir)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().split() == ["mock:echo", "mock:echo", "None"]
