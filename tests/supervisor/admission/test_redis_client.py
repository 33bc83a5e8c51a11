"""The trio Redis client against a real redis-server: pipelining, AUTH and SELECT,
typed errors, timeouts, and reconnecting after Redis comes back."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio
import trustme

from redis_server import RedisServer
from trunkline.supervisor.admission.redis_client import (
    BadRedisUrl,
    RedisClient,
    RedisReplyError,
    RedisUnreachable,
    parse_url,
)
from trunkline.supervisor.admission.resp import ErrorReply


async def started(nursery: trio.Nursery, url: str, timeout_s: float = 2.0) -> RedisClient:
    # 2 s, not the daemon's 0.25 s: a busy test machine must not look like an outage.
    client = RedisClient(url, timeout_s=timeout_s)
    await nursery.start(client.run)
    with trio.fail_after(10):
        await client.connected.wait()
    return client


async def test_calls_and_a_pipeline_share_one_connection(nursery: trio.Nursery, redis_server: RedisServer) -> None:
    client = await started(nursery, redis_server.url)
    assert await client.call("PING") == "PONG"
    replies = await client.pipeline([("SET", "a", 1), ("INCR", "a"), ("GET", "a"), ("LPUSH", "a", "x")])
    assert replies[:3] == ["OK", 2, b"2"]
    assert isinstance(replies[3], ErrorReply) and replies[3].code == "WRONGTYPE"
    with pytest.raises(RedisReplyError) as caught:
        await client.call("NOSUCHCOMMAND")
    assert caught.value.code == "ERR"

    # Many tasks at once on the one connection: each gets its own reply.
    results: dict[int, object] = {}

    async def one(i: int) -> None:
        results[i] = await client.call("ECHO", f"v{i}")

    async with trio.open_nursery() as inner:
        for i in range(200):
            inner.start_soon(one, i)
    assert results == {i: f"v{i}".encode() for i in range(200)}
    assert client.connects == 1


async def test_auth_and_select_on_connect_and_the_password_is_never_shown(nursery: trio.Nursery) -> None:
    server = RedisServer(password="s3cret-pw")
    try:
        await server.start(nursery)
        url = f"redis://:s3cret-pw@127.0.0.1:{server.port}/3"
        client = await started(nursery, url)
        await client.call("SET", "where", "db3")
        info = await client.call("CLIENT", "INFO")
        assert isinstance(info, bytes) and b"db=3" in info
        assert "s3cret" not in client.target.redacted()

        wrong = RedisClient(f"redis://:wrong-pw@127.0.0.1:{server.port}/0")
        await nursery.start(wrong.run)
        assert not wrong.is_connected
        assert "WRONGPASS" in wrong.last_error or "invalid" in wrong.last_error
        assert "wrong-pw" not in wrong.last_error
        with pytest.raises(RedisUnreachable):
            await wrong.call("PING")
    finally:
        await server.kill()


async def test_a_dead_redis_fails_calls_at_once_and_the_client_reconnects(nursery: trio.Nursery) -> None:
    server = await RedisServer().start(nursery)
    try:
        client = await started(nursery, server.url)
        await server.kill()
        with trio.fail_after(5):
            while True:  # the first call after the kill may already have been sent
                try:
                    await client.call("PING")
                except RedisUnreachable:
                    break
        with trio.fail_after(1):
            with pytest.raises(RedisUnreachable, match="no connection"):
                await client.call("PING")
        await server.start(nursery)
        client.retry_now()
        with trio.fail_after(10):
            await client.connected.wait()
        assert await client.call("PING") == "PONG"
        assert client.connects == 2
    finally:
        await server.kill()


async def test_a_redis_that_does_not_answer_times_out(nursery: trio.Nursery, redis_server: RedisServer) -> None:
    client = await started(nursery, redis_server.url, timeout_s=0.2)
    assert redis_server.proc is not None
    redis_server.proc.send_signal(signal.SIGSTOP)
    try:
        with trio.fail_after(5), pytest.raises(RedisUnreachable, match="did not answer"):
            await client.call("PING")
    finally:
        redis_server.proc.send_signal(signal.SIGCONT)
    client.retry_now()
    with trio.fail_after(10):
        await client.connected.wait()
    assert await client.call("PING") == "PONG"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://localhost", "scheme"),
        ("redis://", "no host"),
        ("redis://h:6379/x", "database number"),
        ("redis://:pw@h:notaport/0", "not a redis URL"),
    ],
)
def test_bad_urls_say_why_without_the_password(url: str, problem: str) -> None:
    with pytest.raises(BadRedisUrl, match=problem) as caught:
        parse_url(url)
    assert "pw" not in str(caught.value).replace("password", "")


def test_urls_parse_with_tls_user_and_db() -> None:
    target = parse_url("rediss://me:p%40ss@cache.example:6380/2")
    assert (target.host, target.port, target.db, target.tls, target.username, target.password) == (
        "cache.example",
        6380,
        2,
        True,
        "me",
        "p@ss",
    )
    assert target.redacted() == "rediss://me:***@cache.example:6380/2"


async def test_rediss_speaks_tls_with_a_ca_file_and_refuses_an_unknown_ca(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    chain, key, ca_file = tmp_path / "chain.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(chain))
    cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))
    server = RedisServer(tls=(str(chain), str(key)))
    try:
        await server.start(nursery)
        assert server.url.startswith("rediss://localhost:")
        client = RedisClient(server.url, timeout_s=2.0, tls_ca_file=str(ca_file))
        await nursery.start(client.run)
        with trio.fail_after(10):
            await client.connected.wait()
        assert await client.call("PING") == "PONG"
        # Without the CA, the system's CAs do not know this server: no connection, said why.
        stranger = RedisClient(server.url, timeout_s=2.0)
        await nursery.start(stranger.run)
        assert not stranger.is_connected and "CERTIFICATE_VERIFY_FAILED" in stranger.last_error
    finally:
        await server.kill()
