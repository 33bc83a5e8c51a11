"""The front door as a process of the daemon: keys, bounds, hang-ups, restarts, status.

The clients are the official SDKs and plain HTTP (httpx), against a real daemon."""

from __future__ import annotations

import os
import signal
import socket

import httpx
import openai
import pytest
import trio

from door import Door, start_door
from helpers import steps
from trunkline import Client

pytestmark = pytest.mark.e2e


async def test_an_openai_sdk_talks_to_the_daemon_through_the_door(door: Door):
    sdk = openai.AsyncOpenAI(base_url=door.base_url, api_key=door.key, max_retries=0)
    with trio.fail_after(30):
        completion = await sdk.chat.completions.create(
            model="mock:echo", messages=[{"role": "user", "content": "hello through the door"}]
        )
        models = await sdk.models.list()
    assert completion.choices[0].message.content == "hello through the door"
    assert completion.choices[0].finish_reason == "stop" and completion.usage.total_tokens > 0
    assert "mock:echo" in {m.id for m in models.data}


async def test_a_request_without_the_key_is_refused_in_constant_time(door: Door):
    async with httpx.AsyncClient(base_url=door.url) as http:
        body = {"model": "mock:echo", "messages": [{"role": "user", "content": "x"}]}
        for headers in (
            {},
            {"authorization": "Bearer wrong"},
            {"authorization": f"Basic {door.key}"},
            {"x-api-key": door.key + "x"},
        ):
            reply = await http.post("/v1/chat/completions", json=body, headers=headers)
            assert reply.status_code == 401, (headers, reply.text)
            assert reply.json()["error"]["type"] == "authentication_error"
        # Each path answers in its own API's words, whatever headers come with the request.
        openai_shape = await http.post("/v1/responses", json={}, headers={"x-api-key": "wrong"})
        anthropic_shape = await http.post("/v1/messages", json={}, headers={"authorization": "Bearer wrong"})
        ok = await http.post("/v1/chat/completions", json=body, headers={"x-api-key": door.key})
        health = await http.get("/health")
    assert openai_shape.status_code == anthropic_shape.status_code == 401
    assert openai_shape.json()["error"]["type"] == "authentication_error"
    assert anthropic_shape.json() == {
        "type": "error",
        "error": {
            "type": "authentication_error",
            "message": ("a valid key is needed (Authorization: Bearer <key>, or x-api-key)"),
        },
    }
    assert ok.status_code == 200 and health.status_code == 200
    assert door.key not in door.daemon.output()


async def test_a_whole_answer_says_its_length_and_a_stream_is_chunked(door: Door):
    body = {"model": "mock:echo", "messages": [{"role": "user", "content": "sized"}]}
    headers = {"authorization": f"Bearer {door.key}"}
    async with httpx.AsyncClient(base_url=door.url, headers=headers) as http:
        whole = await http.post("/v1/chat/completions", json=body)
        refused = await http.post("/v1/chat/completions", json={"model": "mock:echo"})
        async with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as stream:
            streamed = [line async for line in stream.aiter_lines() if line.startswith("data: ")]
    for reply in (whole, refused):
        assert reply.headers["content-length"] == str(len(reply.content))
        assert "transfer-encoding" not in reply.headers
    assert whole.json()["choices"][0]["message"]["content"] == "sized" and refused.status_code == 400
    assert stream.headers["transfer-encoding"] == "chunked" and "content-length" not in stream.headers
    assert streamed[-1] == "data: [DONE]"


async def test_a_body_over_the_limit_is_413_and_an_unknown_path_404(start_daemon):
    door = await start_door(start_daemon, {"http": {"max_body_bytes": 4096}}, keys=False)
    async with httpx.AsyncClient(base_url=door.url) as http:
        big = {"model": "mock:echo", "messages": [{"role": "user", "content": "x" * 8000}]}
        declared = await http.post("/v1/chat/completions", json=big)
        chunked = await http.post("/v1/chat/completions", content=_chunks(b"x" * 8000))
        lost = await http.get("/v2/nothing")
        wrong = await http.get("/v1/chat/completions")
    assert declared.status_code == chunked.status_code == 413
    assert lost.status_code == 404 and wrong.status_code == 405


async def _chunks(data: bytes):
    for i in range(0, len(data), 1000):
        yield data[i : i + 1000]


async def test_a_client_that_hangs_up_cancels_the_call(door: Door):
    slow = steps(*[{"text": f"w{i} ", "delay": 0.05} for i in range(400)])
    async with Client(door.daemon.runtime_dir, watch_bus=True) as watcher:
        with trio.fail_after(30):
            async with httpx.AsyncClient(base_url=door.url, headers={"x-api-key": door.key}) as http:
                body = {
                    "model": "mock:echo",
                    "stream": True,
                    "messages": [{"role": "user", "content": "x"}],
                    "provider_options": {"mock": slow["mock"]},
                }
                async with http.stream("POST", "/v1/chat/completions", json=body) as reply:
                    async for line in reply.aiter_lines():
                        if '"w1 "' in line:
                            break  # and hang up
            while True:
                ev = await watcher.bus_events.receive()
                if ev.name == "llm.call_cancelled":
                    break
            status = await watcher.status()
    assert status.in_flight == 0


async def test_the_door_is_a_supervised_child_restarted_when_it_dies(door: Door):
    with trio.fail_after(60):
        async with Client(door.daemon.runtime_dir) as client:
            (http,) = [w for w in (await client.status()).workers if w.provider_type == "http"]
            assert http.state == "running" and http.pid
            os.kill(http.pid, signal.SIGKILL)
            await door.daemon.wait_for_line("http: front door process")
            while True:
                (again,) = [w for w in (await client.status()).workers if w.provider_type == "http"]
                if again.state == "running" and again.pid != http.pid:
                    break
                await trio.sleep(0.05)
        sdk = openai.AsyncOpenAI(base_url=door.base_url, api_key=door.key, max_retries=0)
        completion = await sdk.chat.completions.create(
            model="mock:echo", messages=[{"role": "user", "content": "served again"}]
        )
    assert again.restarts == 1 and completion.choices[0].message.content == "served again"


async def test_a_slow_client_and_an_idle_connection_are_let_go(start_daemon):
    door = await start_door(start_daemon, {"http": {"read_timeout_s": 1, "idle_timeout_s": 1}}, keys=False)
    host, port = door.url.removeprefix("http://").split(":")

    async def until_closed(stream: trio.SocketStream) -> bytes:
        got = b""
        while chunk := await stream.receive_some():
            got += chunk
        return got

    with trio.fail_after(20):
        # A body that stops coming: the server gives up on it and closes the connection.
        slow = await trio.open_tcp_stream(host, int(port))
        await slow.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
        assert await until_closed(slow) == b""  # nobody to answer: hypercorn closes it
        # A head that never ends, and a connection that never asks: both closed.
        head = await trio.open_tcp_stream(host, int(port))
        await head.send_all(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        assert await until_closed(head) == b""
        idle = await trio.open_tcp_stream(host, int(port))
        assert await until_closed(idle) == b""


async def test_several_door_processes_share_one_port(start_daemon):
    door = await start_door(start_daemon, {"http": {"processes": 2}})
    with trio.fail_after(60):
        await door.daemon.wait_for_line("http: process 1 serving")
        async with Client(door.daemon.runtime_dir) as client:
            doors = [w for w in (await client.status()).workers if w.provider_type == "http"]
        sdk = openai.AsyncOpenAI(base_url=door.base_url, api_key=door.key, max_retries=0)
        answers = [
            await sdk.chat.completions.create(model="mock:echo", messages=[{"role": "user", "content": f"n{i}"}])
            for i in range(6)
        ]
    assert sorted(w.provider for w in doors) == ["http", "http-2"] and {w.state for w in doors} == {"running"}
    assert len({w.pid for w in doors}) == 2
    assert [a.choices[0].message.content for a in answers] == [f"n{i}" for i in range(6)]


async def test_the_door_shows_in_the_metrics_as_a_worker(start_daemon):
    from prometheus_client.parser import text_string_to_metric_families

    with socket.socket() as probe:  # a free port for the scrape endpoint
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    door = await start_door(start_daemon, {"metrics": {"listen": f"127.0.0.1:{port}"}})
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert found[("trunkline_worker_state", (("provider", "http"), ("state", "running")))] == 1
    assert found[("trunkline_worker_up", (("provider", "http"),))] == 1
    assert door.key not in text
