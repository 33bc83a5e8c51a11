"""The protocol through real pynng sockets on both sides, over every transport the
daemon serves: ipc, tcp with a token, and tls+tcp with a token and a verified
server certificate (made at test time: no private key is committed)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import pynng
import pytest
import trio
import trustme

from helpers import check_invariants, steps
from trunkline import Client
from trunkline.errors import AuthenticationError, DaemonNotRunning, DaemonUnavailable, TLSError
from trunkline.protocol import codec
from trunkline.protocol.messages import Hello, Message, Request, StatusQuery, TextDelta

pytestmark = pytest.mark.e2e

TOKEN = "transport-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tls_files(directory: Path) -> dict[str, str]:
    """A throwaway CA, and a server certificate for `localhost` signed by it."""
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    paths = {"ca": directory / "ca.pem", "cert": directory / "server.pem", "key": directory / "server.key"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    cert.private_key_pem.write_to_path(str(paths["key"]))
    with open(paths["cert"], "wb") as f:
        for blob in cert.cert_chain_pems:
            f.write(blob.bytes())
    return {k: str(v) for k, v in paths.items()}


async def serve(
    start_daemon: Any, transport: str, tmp: Path, extra: dict[str, Any] | None = None
) -> tuple[Any, dict[str, Any]]:
    """A daemon on `transport`, and the keyword arguments a client needs to reach it."""
    if transport == "ipc":
        daemon = await start_daemon(extra)
        return daemon, {"runtime_dir": daemon.runtime_dir}
    scheme = "tcp" if transport == "tcp" else "tls+tcp"
    control, events = f"{scheme}://127.0.0.1:{free_port()}", f"{scheme}://0.0.0.0:{free_port()}"
    config: dict[str, Any] = {**(extra or {}), "endpoints": {"control": control, "events": events}}
    client: dict[str, Any] = {"control_endpoint": control, "token": TOKEN}
    if transport == "tls":
        files = tls_files(tmp)
        config["endpoints"].update(tls_cert_file=files["cert"], tls_key_file=files["key"])
        client.update(tls_ca_file=files["ca"], tls_server_name="localhost")
    daemon = await start_daemon(config, env={"TRUNKLINE_TOKEN": TOKEN})
    return daemon, client


@pytest.fixture(params=["ipc", "tcp", "tls"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


async def test_handshake_submit_stream_cancel_and_replay(start_daemon, transport, tmp_path):
    _daemon, reach = await serve(start_daemon, transport, tmp_path)
    slow = Request(
        model="mock:echo",
        messages=[Message.user("x")],
        provider_options=steps(*[{"text": f"w{i} ", "delay": 0.05} for i in range(200)]),
    )
    with trio.fail_after(30):
        async with Client(**reach) as client:
            assert client.client_id  # hello, welcome, subscription and probe all went through
            response = await client.complete("mock:echo", "over the wire")
            assert response.text == "over the wire"
            async with client.stream("mock:echo", "a streamed answer", request_id="req-stream") as stream:
                events = [ev async for ev in stream]
            check_invariants(events)
            # Cancel mid-stream: the stream ends with reason `cancelled` and its partial text.
            async with client.stream(slow, request_id="req-cancel") as stream:
                async for ev in stream:
                    if type(ev) is TextDelta:
                        assert await stream.cancel()
                rest = stream.accumulator.response()
            assert rest.finish_reason.reason == "cancelled" and rest.text.startswith("w0 ")
            # Replay returns the very events that were published.
            replay = await client.replay("req-stream")
    assert replay.state == "ended" and replay.last_seq == events[-1].seq
    assert [codec.decode_event(raw) for raw in replay.events] == events


async def test_a_gap_is_recovered_by_replay_over_every_transport(start_daemon, transport, tmp_path):
    """The client stops reading; its own queue keeps the newest events and drops the
    oldest, so the first event it sees next shows the gap in `seq`."""
    n = 30_000
    _daemon, reach = await serve(start_daemon, transport, tmp_path, {"replay": {"ring_events": 100_000}})
    request = Request(model="mock:echo", messages=[Message.user("x")], provider_options=steps({"text": "ab"}, repeat=n))
    with trio.fail_after(60):
        async with Client(**reach, watch_bus=True) as watcher, Client(**reach, silence_check_s=600) as client:
            gate = trio.Event()
            client._connection.reader_gate = gate
            stream = client.stream(request, request_id="req-gap")
            await stream.start()
            # Held until the request has ended at the daemon (the watcher's bus says so).
            while True:
                ev = await watcher.bus_events.receive()
                if ev.name == "llm.call_completed" and ev.operation_id == "req-gap":
                    break
            client._connection.reader_gate = None
            gate.set()
            events = [ev async for ev in stream]
        assert stream.recovered_events > 0, "the test meant to lose events but none were lost"
    check_invariants(events)
    assert events[-1].response.text == "ab" * n


async def test_a_call_times_out_instead_of_hanging_and_the_client_recovers(start_daemon, transport, tmp_path):
    daemon, reach = await serve(start_daemon, transport, tmp_path)
    with trio.fail_after(30):
        async with Client(**reach) as client:
            os.kill(daemon.proc.pid, signal.SIGSTOP)
            try:
                with pytest.raises(DaemonUnavailable, match="did not answer"):
                    await client._connection.call(StatusQuery(), timeout_s=0.5)
            finally:
                os.kill(daemon.proc.pid, signal.SIGCONT)
            assert (await client.complete("mock:echo", "after the stall")).text == "after the stall"


async def test_tls_needs_the_token_and_a_server_the_client_can_verify(start_daemon, tmp_path):
    _daemon, reach = await serve(start_daemon, "tls", tmp_path)
    with trio.fail_after(30):
        with pytest.raises(AuthenticationError):
            async with Client(**{**reach, "token": "wrong"}):
                pass
        # A client must name the CA to trust: nothing unverified goes out.
        with pytest.raises(TLSError, match="give the CA"):
            async with Client(**{**reach, "tls_ca_file": None}):
                pass
        # A client that trusts another CA refuses the daemon's certificate.
        other = tmp_path / "other"
        other.mkdir()
        stranger = tls_files(other)["ca"]
        with pytest.raises(TLSError):
            async with Client(**{**reach, "tls_ca_file": stranger, "timeout_s": 3.0}):
                pass
        async with Client(**reach) as client:
            response = await client.complete("mock:echo", "over tls")
    assert response.text == "over tls"


async def test_the_cli_manages_a_remote_daemon_over_tls(start_daemon, tmp_path):
    _daemon, reach = await serve(start_daemon, "tls", tmp_path)
    base = [sys.executable, "-m", "trunkline.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRUNKLINE_")}
    env["TRUNKLINE_RUNTIME_DIR"] = str(tmp_path / "no-local-daemon")  # so the local default finds nothing
    with trio.fail_after(60):
        # Options, as the Python client's arguments are named.
        by_options = await trio.run_process(
            [
                *base,
                "status",
                "--control-endpoint",
                reach["control_endpoint"],
                "--token",
                TOKEN,
                "--tls-ca-file",
                reach["tls_ca_file"],
                "--tls-server-name",
                "localhost",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
        # The environment, as the C client reads it; `reload` too.
        remote_env = {
            **env,
            "TRUNKLINE_CONTROL": reach["control_endpoint"],
            "TRUNKLINE_TOKEN": TOKEN,
            "TRUNKLINE_TLS_CA_FILE": reach["tls_ca_file"],
            "TRUNKLINE_TLS_SERVER_NAME": "localhost",
        }
        by_env = await trio.run_process(
            [*base, "reload"], capture_stdout=True, capture_stderr=True, check=False, env=remote_env
        )
        asked = await trio.run_process(
            [*base, "ask", "mock:echo", "over tls"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=remote_env,
        )
        wrong = await trio.run_process(
            [
                *base,
                "status",
                "--control-endpoint",
                reach["control_endpoint"],
                "--token",
                "not-the-token",
                "--tls-ca-file",
                reach["tls_ca_file"],
                "--tls-server-name",
                "localhost",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
        # A TLS failure has its own exit status and says what to change, not "no daemon".
        misnamed = await trio.run_process(
            [*base, "status", "--json"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**remote_env, "TRUNKLINE_TLS_SERVER_NAME": "elsewhere"},
        )
    assert by_options.returncode == 0, by_options.stderr.decode()
    # The workers may still be starting: the status table is what shows it reached the daemon.
    assert "PROVIDER" in by_options.stdout.decode() and "\nmock " in by_options.stdout.decode()
    assert by_env.returncode == 0, by_env.stderr.decode()
    assert asked.returncode == 0 and asked.stdout.decode() == "over tls\n", asked.stderr.decode()
    assert wrong.returncode != 0 and "authentication" in wrong.stderr.decode()
    assert misnamed.returncode == 4, misnamed.stderr.decode()
    assert "not issued for 'elsewhere'" in misnamed.stderr.decode() and "start one" not in misnamed.stderr.decode()
    assert json.loads(misnamed.stdout)["error"]["error_class"] == "unavailable"


async def test_each_tls_mistake_names_its_own_cause(start_daemon, tmp_path):
    _daemon, reach = await serve(start_daemon, "tls", tmp_path)
    _, plain = await serve(start_daemon, "tcp", tmp_path)
    other_ca = tls_files(tmp_path / "other") if (tmp_path / "other").mkdir() is None else None
    assert other_ca is not None
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("not a certificate\n")
    cases = {
        "wrong server name": (
            {**reach, "tls_server_name": "not-the-daemon.example"},
            "the daemon's certificate is not issued for 'not-the-daemon.example'",
        ),
        "another CA": (
            {**reach, "tls_ca_file": other_ca["ca"]},
            f"the daemon's certificate is not signed by the CA in {other_ca['ca']}",
        ),
        "no CA": ({k: v for k, v in reach.items() if k != "tls_ca_file"}, "give the CA"),
        "missing CA file": ({**reach, "tls_ca_file": str(tmp_path / "nope.pem")}, "nope.pem"),
        "a CA file that is no certificate": ({**reach, "tls_ca_file": str(not_pem)}, "as a PEM certificate"),
        "TLS to a plain tcp daemon": (
            {**reach, "control_endpoint": f"tls+{plain['control_endpoint']}"},
            "not speak TLS",
        ),
    }
    messages = {}
    with trio.fail_after(60):
        for name, (kwargs, _) in cases.items():
            with pytest.raises(TLSError) as info:
                async with Client(**kwargs, timeout_s=5):
                    pass
            messages[name] = str(info.value)
    for name, (_, words) in cases.items():
        assert words in messages[name], (name, messages[name])
        assert "start one" not in messages[name], (name, messages[name])  # not "no daemon is running"
    assert TOKEN not in "".join(messages.values())


async def test_a_tls_mistake_that_nng_reports_as_a_closed_connection_still_names_its_cause(
    start_daemon, tmp_path, monkeypatch
):
    """On a loaded machine the daemon can close the connection before this side reports
    the handshake's own failure, and nng then says only "Connection shutdown": that read
    as no daemon at all. nng's dial is made to fail that way here; `ssl` still finds the
    cause against the real daemon, and a daemon with nothing wrong stays "not answering"."""
    _daemon, reach = await serve(start_daemon, "tls", tmp_path)
    (tmp_path / "other").mkdir()
    other_ca = tls_files(tmp_path / "other")["ca"]

    def shut(url: str, tls: object = None) -> None:
        raise pynng.NNGException("Connection shutdown", 31)

    monkeypatch.setattr("trunkline.connection.nng.Requester", shut)
    with trio.fail_after(30):
        with pytest.raises(TLSError) as info:
            async with Client(**{**reach, "tls_ca_file": other_ca}, timeout_s=5):
                pass
        assert f"not signed by the CA in {other_ca}" in str(info.value)
        with pytest.raises(DaemonNotRunning) as gone:
            async with Client(**reach, timeout_s=5):
                pass
        assert "Connection shutdown" in str(gone.value)


async def test_plain_tcp_to_a_tls_daemon_hints_at_tls(start_daemon, tmp_path):
    """What nng does with a client that does not start TLS: it closes the connection,
    which looked like no daemon at all."""
    _daemon, reach = await serve(start_daemon, "tls", tmp_path)
    plain = reach["control_endpoint"].replace("tls+tcp://", "tcp://")
    with trio.fail_after(30):
        with pytest.raises(DaemonNotRunning) as info:
            async with Client(control_endpoint=plain, token=TOKEN, timeout_s=5):
                pass
    assert f"the daemon may expect TLS (tls+{plain}" in str(info.value), str(info.value)
    assert "start one" not in str(info.value)


async def test_a_refused_token_is_logged_with_the_peer_address_never_the_token(start_daemon, tmp_path):
    daemon, reach = await serve(start_daemon, "tcp", tmp_path)
    sock = pynng.Req0(resend_time=-1, recv_timeout=10_000)
    try:
        with trio.fail_after(30):
            sock.dial(reach["control_endpoint"], block=True)
            peer = str(sock.pipes[0].local_address)  # the address the daemon sees this client at
            started = trio.current_time()
            for i in range(50):
                await sock.asend(codec.encode(Hello(client_name="guesser", token=f"guess-{i}-of-the-token")))
                reply = codec.decode_control_reply(await sock.arecv())
                assert reply.error.error_class == "authentication"
            elapsed = trio.current_time() - started
            line = await daemon.wait_for_line(f"refused a client at {peer}")
    finally:
        sock.close()
    assert "needs a valid token" in line
    output = daemon.output()
    assert "guess-" not in output and TOKEN not in output
    # Rate-limited: at most five lines a second, whatever the client sends.
    refused = [line for line in daemon.lines if "refused a client" in line]
    assert len(refused) <= 5 * (int(elapsed) + 2), (elapsed, len(refused))
