"""The C client's event decoding against any bytes: a fake daemon (plain pynng sockets)
publishes arbitrary event messages on the client's topic, then a real request's events;
the client never crashes, skips what it cannot read, and still delivers the request.

The conformance suite covers the C client's behaviour against the real daemon; this is
the property test its decoder needs (`make test` builds it; it fails if it cannot)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pynng
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
C_DIR = REPO / "clients" / "c"
CLIENT_ID = "cFAKE"
TOPIC = CLIENT_ID.encode() + b"\x00"


class FakeDaemon:
    """Answers hello, probe, submit and replay the way the daemon does, and publishes
    what the test asks."""

    def __init__(self, where: Path) -> None:
        self.control = f"ipc://{where / 'control.ipc'}"
        self.events = f"ipc://{where / 'events.ipc'}"
        self.rep = pynng.Rep0(listen=self.control, recv_max_size=0)
        self.pub = pynng.Pub0(listen=self.events)
        self.published: dict[str, list[dict[str, Any]]] = {}
        self.submits: dict[str, dict[str, Any]] = {}
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                msg = msgspec.msgpack.decode(self.rep.recv())
            except pynng.exceptions.Closed:
                return
            kind = msg.get("type")
            if kind == "hello":
                reply: dict[str, Any] = {
                    "type": "welcome",
                    "client_id": CLIENT_ID,
                    "event_endpoint": self.events,
                    "limits": {
                        "max_message_bytes": 1 << 24,
                        "replay_ring_events": 1000,
                        "replay_keep_s": 60.0,
                        "max_event_bytes": 1 << 26,
                    },
                    "providers": ["mock"],
                }
            elif kind == "probe":
                self.pub.send(TOPIC + msgspec.msgpack.encode({"type": "probe", "client_id": CLIENT_ID}))
                reply = {"type": "probe_sent"}
            elif kind == "submit":
                self.submits[msg["request_id"]] = msg
                reply = {"type": "accepted", "request_id": msg["request_id"], "provider": "mock", "model": "mock:echo"}
            elif kind == "replay":
                events = self.published.get(msg["request_id"], [])
                reply = {
                    "type": "replay_result",
                    "request_id": msg["request_id"],
                    "state": "ended",
                    "events": events[msg.get("from_seq", 0) :],
                    "last_seq": len(events) - 1,
                }
            else:
                reply = {"type": "protocol_error", "error": {"error_class": "invalid_request", "message": "?"}}
            self.rep.send(msgspec.msgpack.encode(reply))

    def publish_request(self, rid: str) -> None:
        events = [
            {"type": "stream_start", "request_id": rid, "model": "echo", "provider": "mock"},
            {
                "type": "finish",
                "request_id": rid,
                "seq": 1,
                "response": {"message": {"role": "assistant", "content": []}},
            },
        ]
        self.published[rid] = events
        self.pub.send(TOPIC + msgspec.msgpack.encode(events))

    def close(self) -> None:
        self.rep.close()
        self.pub.close()


class TlProcess:
    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        env = {
            **os.environ,
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "UBSAN_OPTIONS": "halt_on_error=1",
            **(env or {}),
        }
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def send(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the C client died (status {self.proc.poll()})"
        reply: dict[str, Any] = json.loads(line)
        return reply


@pytest.fixture(scope="module")
def session() -> Iterator[tuple[FakeDaemon, TlProcess]]:
    # Built with AddressSanitizer and UBSan: a decoding bug that reads or writes out of
    # bounds aborts the client here instead of passing by luck.
    build = subprocess.run(
        [
            "make",
            "-C",
            str(C_DIR),
            "BUILD=build/sanitized",
            "CFLAGS=-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer",
        ],
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        pytest.fail(f"the C client did not build (run `make test`):\n{build.stderr[-4000:]}")
    where = Path(tempfile.mkdtemp(prefix="tl-c-", dir="/tmp"))
    daemon = FakeDaemon(where)
    tl = TlProcess([str(C_DIR / "build" / "sanitized" / "tl"), "conform"])
    try:
        # The client's own timeouts bound every wait (a hang fails the command, not the run).
        reply = tl.send({"cmd": "connect", "control": daemon.control, "silence_s": 2.0})
        assert reply["ok"] and reply["client_id"] == CLIENT_ID, reply
        yield daemon, tl
    finally:
        tl.proc.kill()
        tl.proc.wait(timeout=10)
        daemon.close()
        shutil.rmtree(where, ignore_errors=True)


def _garbage_of(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return valid.map(msgspec.msgpack.encode)


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
event_like = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["text_delta", "finish", "error", "probe", "bus"]) | st.text(max_size=8),
        "request_id": st.text(max_size=6) | st.integers(-(2**63), 2**63 - 1),
        "seq": json_like,
        "text": json_like,
    },
)
payloads = st.one_of(
    st.binary(max_size=80),  # any bytes
    _garbage_of(json_like),  # valid msgpack, any shape
    _garbage_of(event_like),  # maps that look like events
    _garbage_of(st.lists(event_like, max_size=5)),  # arrays of them
    _garbage_of(event_like).map(lambda b: b[: max(1, len(b) // 2)]),  # cut short
    st.sampled_from([b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xc1", b""]),
)

_counter = iter(range(1_000_000))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(payloads, max_size=6))
def test_any_event_bytes_are_skipped_and_the_request_still_arrives(session, garbage):
    daemon, tl = session
    rid = f"r{next(_counter)}"
    submitted = tl.send({"cmd": "submit", "id": rid, "request": {"model": "mock:echo", "messages": []}})
    assert submitted["reply"] == "accepted"
    for body in garbage:
        daemon.pub.send(TOPIC + body)
    daemon.publish_request(rid)
    reply = tl.send({"cmd": "events", "id": rid, "timeout_s": 10})
    assert [(e["type"], e.get("seq", 0)) for e in reply["events"]] == [("stream_start", 0), ("finish", 1)]


def test_a_client_started_inside_a_trace_sends_its_trace_context(session):
    daemon, untraced = session
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    tl = TlProcess(
        [str(C_DIR / "build" / "sanitized" / "tl"), "conform"], env={"TRACEPARENT": parent, "TRACESTATE": "ci=1"}
    )
    try:
        assert tl.send({"cmd": "connect", "control": daemon.control, "silence_s": 2.0})["ok"]
        assert (
            tl.send(
                {"cmd": "submit", "id": "traced", "request": {"model": "mock:echo", "messages": []}, "stream": False}
            )["reply"]
            == "accepted"
        )
    finally:
        tl.proc.kill()
        tl.proc.wait(timeout=10)
    assert (
        untraced.send({"cmd": "submit", "id": "plain", "request": {"model": "mock:echo", "messages": []}})["reply"]
        == "accepted"
    )
    traced = daemon.submits["traced"]
    assert traced["trace_context"] == {"traceparent": parent, "tracestate": "ci=1"} and traced["stream"] is False
    assert "trace_context" not in daemon.submits["plain"]


async def test_tl_chat_streams_a_reply_from_a_real_daemon(daemon):
    """The example program as a user runs it: the daemon's control endpoint from the
    environment, the reply's text on stdout."""
    import trio

    build = subprocess.run(["make", "-C", str(C_DIR)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    env = {**os.environ, "TRUNKLINE_CONTROL": daemon.control}
    # Longer than the C client's own call timeout (30 s): if a call goes unanswered the
    # client says which, and the daemon's log is shown beside it (the test used to give
    # up at the same moment and show neither).
    with trio.fail_after(60):
        done = await trio.run_process(
            [str(C_DIR / "build" / "tl"), "chat", "echo", "hello from C"],
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode() + "\n-- daemon --\n" + "\n".join(daemon.lines[-40:])
    assert done.stdout.decode() == "hello from C\n"
    with trio.fail_after(30):
        done = await trio.run_process(
            [str(C_DIR / "build" / "tl"), "chat", "no-such-model", "x"],
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
    assert done.returncode == 1 and "not_found" in done.stderr.decode()


def sanitized_tl() -> Path:
    build = subprocess.run(
        [
            "make",
            "-C",
            str(C_DIR),
            "BUILD=build/sanitized",
            "CFLAGS=-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer",
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    return C_DIR / "build" / "sanitized" / "tl"


async def test_tl_chat_over_tls_with_the_environment_the_cli_reads(start_daemon, tmp_path):
    """libnng's TLS (Debian builds it with mbedTLS): the daemon's certificate verified
    against TRUNKLINE_TLS_CA_FILE for TRUNKLINE_TLS_SERVER_NAME, and each mistake named."""
    import socket

    import trio
    import trustme

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def ca_files(where: Path) -> tuple[str, str, str]:
        where.mkdir()
        ca = trustme.CA()
        cert = ca.issue_cert("localhost")
        ca.cert_pem.write_to_path(str(where / "ca.pem"))
        cert.private_key_pem.write_to_path(str(where / "server.key"))
        (where / "server.pem").write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
        return str(where / "ca.pem"), str(where / "server.pem"), str(where / "server.key")

    ca, cert, key = ca_files(tmp_path / "daemon")
    stranger, _, _ = ca_files(tmp_path / "stranger")
    port = free_port()
    control = f"tls+tcp://127.0.0.1:{port}"
    await start_daemon(
        {
            "endpoints": {
                "control": control,
                "events": f"tls+tcp://0.0.0.0:{free_port()}",
                "tls_cert_file": cert,
                "tls_key_file": key,
            }
        },
        env={"TRUNKLINE_TOKEN": "c-tls-token"},
    )
    tl = sanitized_tl()
    base = {
        **os.environ,
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "UBSAN_OPTIONS": "halt_on_error=1",
        "TRUNKLINE_CONTROL": control,
        "TRUNKLINE_TOKEN": "c-tls-token",
        "TRUNKLINE_TLS_CA_FILE": ca,
        "TRUNKLINE_TLS_SERVER_NAME": "localhost",
    }

    async def chat(**env: str | None) -> subprocess.CompletedProcess[bytes]:
        merged = {k: v for k, v in {**base, **env}.items() if v is not None}
        with trio.fail_after(30):
            return await trio.run_process(
                [str(tl), "chat", "echo", "hello over TLS from C"],
                capture_stdout=True,
                capture_stderr=True,
                env=merged,
                check=False,
            )

    ok = await chat()
    assert ok.returncode == 0, ok.stderr.decode()
    assert ok.stdout.decode() == "hello over TLS from C\n"
    mistakes = {
        "another CA": ({"TRUNKLINE_TLS_CA_FILE": stranger}, f"the TLS handshake with {control} failed"),
        "the wrong name": ({"TRUNKLINE_TLS_SERVER_NAME": "elsewhere"}, "not one for 'elsewhere'"),
        "no CA": ({"TRUNKLINE_TLS_CA_FILE": None}, "is a TLS endpoint: give the CA"),
        "an unreadable CA": ({"TRUNKLINE_TLS_CA_FILE": str(tmp_path / "nope.pem")}, "cannot use the CA file"),
        "plain tcp": ({"TRUNKLINE_CONTROL": f"tcp://127.0.0.1:{port}"}, "the daemon may expect TLS"),
    }
    for name, (env, words) in mistakes.items():
        failed = await chat(**env)
        err = failed.stderr.decode()
        assert failed.returncode == 1 and words in err, (name, failed.returncode, err)
        assert "c-tls-token" not in err
