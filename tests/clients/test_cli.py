"""The `trunkline` command against a real daemon."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trustme

from helpers import DaemonProcess

pytestmark = pytest.mark.e2e


async def cli(*args: str, runtime_dir=None, check: bool = False) -> subprocess.CompletedProcess:
    extra = ["--runtime-dir", str(runtime_dir)] if runtime_dir is not None else []
    return await trio.run_process(
        [sys.executable, "-m", "trunkline.cli", *args, *extra], capture_stdout=True, capture_stderr=True, check=check
    )


async def test_ask_streams_the_answer_and_summarises_usage_on_stderr(daemon):
    result = await cli("ask", "mock:echo", "hello from the cli", runtime_dir=daemon.runtime_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == "hello from the cli\n"
    summary = result.stderr.decode()
    assert "[mock:echo]" in summary and "4 out" in summary and "$0.0000" in summary and "stop" in summary


async def test_ask_no_stream_and_json(daemon):
    result = await cli(
        "ask", "echo", "x y", "--no-stream", "--json", "--system", "be brief", runtime_dir=daemon.runtime_dir
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["message"]["content"] == [{"type": "text", "text": "x y"}]
    assert body["finish_reason"]["reason"] == "stop" and body["provider"] == "mock"


async def test_ask_failure_prints_the_error_class(daemon):
    result = await cli("ask", "no-such-model", "x", runtime_dir=daemon.runtime_dir)
    assert result.returncode == 1
    assert result.stderr.decode().startswith("trunkline: not_found: unknown model 'no-such-model'")


async def test_ctrl_c_cancels_the_request_and_exits_130(daemon):
    proc = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-c",
            (
                "import sys, trunkline.cli as c, trunkline.client as k\n"
                "orig = k.build_request\n"
                "def slow(*a, **f):\n"
                "    r = orig(*a, **f)\n"
                "    r.provider_options = {'mock': {'steps': [{'text': f'w{i} ', 'delay': 0.05} for i in range(400)]}}\n"
                "    return r\n"
                "k.build_request = slow\n"
                "sys.exit(c.main(sys.argv[1:]))\n"
            ),
            "ask",
            "mock:echo",
            "x",
            "--runtime-dir",
            str(daemon.runtime_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with trio.fail_after(20):
        seen = b""
        while b"w2" not in seen:
            seen += await proc.stdout.receive_some()
        proc.send_signal(signal.SIGINT)
        rest = b""
        async for chunk in proc.stderr:
            rest += chunk
        code = await proc.wait()
    assert code == 130
    assert b"cancelled" in rest  # the summary of the partial response


async def test_models_status_and_ready(daemon):
    models = await cli("models", runtime_dir=daemon.runtime_dir)
    assert models.returncode == 0 and "mock:echo" in models.stdout.decode()
    listed = json.loads((await cli("models", "--json", "--provider", "mock", runtime_dir=daemon.runtime_dir)).stdout)
    assert {m["id"] for m in listed} == {"mock:echo", "mock:basic"}
    status = await cli("status", runtime_dir=daemon.runtime_dir)
    assert status.returncode == 0 and "mock" in status.stdout.decode()
    report = json.loads((await cli("status", "--json", runtime_dir=daemon.runtime_dir)).stdout)
    assert report["workers"][0]["provider"] == "mock"
    ready = await cli("ready", "mock:echo", runtime_dir=daemon.runtime_dir)
    assert ready.returncode == 0 and ready.stdout.decode().strip() == "mock:echo: ready"
    not_ready = await cli("ready", "mock:nonexistent", runtime_dir=daemon.runtime_dir)
    assert not_ready.returncode == 1 and "not_found" in not_ready.stdout.decode()


async def test_every_client_command_says_when_no_daemon_runs(tmp_path):
    for args in (["ask", "mock:echo", "x"], ["models"], ["status"], ["ready", "mock:echo"]):
        result = await cli(*args, runtime_dir=tmp_path / "nothing-here")
        assert result.returncode == 3
        assert "no trunkline daemon is running" in result.stderr.decode()


async def test_runtime_dir_from_the_environment(daemon):
    import os

    env = {**os.environ, "TRUNKLINE_RUNTIME_DIR": str(daemon.runtime_dir)}
    result = await trio.run_process(
        [sys.executable, "-m", "trunkline.cli", "status"],
        capture_stdout=True,
        capture_stderr=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0 and "mock" in result.stdout.decode()


async def test_a_reader_that_goes_away_ends_the_command_quietly(daemon):
    # `trunkline status | head -1`, made certain: the pipe's reader is gone before we write.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        with trio.fail_after(30):
            result = await trio.run_process(
                [sys.executable, "-m", "trunkline.cli", "status", "--runtime-dir", str(daemon.runtime_dir)],
                stdout=write_end,
                capture_stderr=True,
                check=False,
            )
    finally:
        os.close(write_end)
    assert result.returncode == 128 + signal.SIGPIPE
    assert result.stderr.decode() == ""  # no BrokenPipeError traceback
    with trio.fail_after(30):
        piped = await trio.run_process(
            ["sh", "-c", f"{sys.executable} -m trunkline.cli models --runtime-dir {daemon.runtime_dir} | head -1"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert piped.stderr.decode() == "" and len(piped.stdout.decode().splitlines()) == 1


async def test_ps_shows_which_provider_each_worker_serves(start_daemon):
    daemon = await start_daemon({"providers": {"ollama": {"enabled": True}}})
    names: dict[str, str] = {}
    with trio.fail_after(20):
        while names != {"mock": "tl-mock", "ollama": "tl-ollama"}:  # each names itself as it starts
            await trio.sleep(0.05)
            workers = subprocess.run(
                ["pgrep", "-P", str(daemon.proc.pid), "-f", "trunkline.workers"], capture_output=True, text=True
            ).stdout.split()
            names = {}
            for pid in workers:
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    names[cmdline[-2].decode()] = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    pass  # restarted meanwhile


async def test_ask_reads_a_large_prompt_from_stdin_or_a_file(daemon, tmp_path):
    big = " ".join(f"w{i}" for i in range(20_000))  # far past what a command line comfortably holds
    piped = await trio.run_process(
        [
            sys.executable,
            "-m",
            "trunkline.cli",
            "ask",
            "mock:echo",
            "-",
            "--no-stream",
            "--runtime-dir",
            str(daemon.runtime_dir),
        ],
        stdin=big.encode(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.decode().strip() == big
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("from a file")
    filed = await cli("ask", "mock:echo", "--file", str(prompt), "--no-stream", runtime_dir=daemon.runtime_dir)
    assert filed.returncode == 0, filed.stderr
    assert filed.stdout.decode().strip() == "from a file"
    missing = await cli("ask", "mock:echo", "--file", str(tmp_path / "nope.txt"), runtime_dir=daemon.runtime_dir)
    assert missing.returncode != 0 and "cannot read --file" in missing.stderr.decode()
    empty = await cli("ask", "mock:echo", runtime_dir=daemon.runtime_dir)
    assert empty.returncode != 0 and "the prompt is empty" in empty.stderr.decode()


async def test_tail_prints_the_bus_as_it_happens(daemon):
    from trunkline import Client

    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "trunkline.cli", "tail", "--name", "llm.", "--runtime-dir", str(daemon.runtime_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[str] = []
    try:
        with trio.fail_after(30):
            said = b""
            while b"watching the bus" not in said:  # tail says when its subscription is live
                said += await proc.stderr.receive_some(4096)
            async with Client(daemon.runtime_dir) as client:
                await client.complete("mock:echo", "watched", request_id="req-tail-1")
            buf = b""
            while not any("llm.call_completed" in line for line in lines):
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, "tail ended early"
                buf += chunk
                *done, buf = buf.split(b"\n")
                lines += [d.decode() for d in done]
    finally:
        proc.terminate()
        await proc.wait()
    completed = next(line for line in lines if "llm.call_completed" in line)
    assert "req-tail-1" in completed and "provider=mock" in completed and "model=mock:echo" in completed
    assert "tokens=" in completed
    assert all(" llm." in line for line in lines)  # --name llm. keeps only llm.* events


async def test_a_prompt_that_cannot_be_read_is_one_line_and_exit_2(tmp_path):
    """Checked before connecting: status 2 (not 3), though no daemon runs here."""
    binary = tmp_path / "image.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café".encode("latin-1"))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    cases = {
        "an empty prompt": (["ask", "mock:echo", ""], None, "the prompt is empty"),
        "no prompt": (["ask", "mock:echo"], None, "the prompt is empty"),
        "a missing file": (
            ["ask", "mock:echo", "--file", str(tmp_path / "nope.txt")],
            None,
            f"cannot read --file {tmp_path / 'nope.txt'}: No such file or directory",
        ),
        "a directory": (["ask", "mock:echo", "--file", str(tmp_path)], None, f"--file {tmp_path} is a directory"),
        "a binary file": (["ask", "mock:echo", "x", "--file", str(binary)], None, "is not text (it holds NUL bytes)"),
        "a file that is not UTF-8": (
            ["ask", "mock:echo", "--file", str(latin1)],
            None,
            "is not UTF-8 text (byte 0xe9 at offset 3)",
        ),
        "an empty file": (["ask", "mock:echo", "summarise", "--file", str(empty)], None, f"--file {empty} is empty"),
        "binary standard input": (["ask", "mock:echo", "-"], b"\xff\xfe\x00", "standard input is not text"),
    }
    for name, (args, stdin, words) in cases.items():
        with trio.fail_after(30):
            result = await trio.run_process(
                [sys.executable, "-m", "trunkline.cli", *args, "--runtime-dir", str(tmp_path / "no-daemon")],
                stdin=stdin or b"",
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        err = result.stderr.decode()
        assert result.returncode == 2, (name, result.returncode, err)
        assert err.startswith("trunkline ask: ") and words in err, (name, err)
        assert err.count("\n") == 1 and "Traceback" not in err, (name, err)


async def test_json_prints_a_failure_as_the_protocols_error_with_the_same_status(daemon, tmp_path):
    for extra in ([], ["--no-stream"]):
        result = await cli("ask", "no-such-model", "x", "--json", *extra, runtime_dir=daemon.runtime_dir)
        assert result.returncode == 1, result.stderr
        body = json.loads(result.stdout)
        assert (
            body["error"]["error_class"] == "not_found" and "unknown model 'no-such-model'" in body["error"]["message"]
        )
        assert body["error"]["retryable"] is False and set(body["error"]) >= {"retry_after_s", "provider"}
        assert result.stderr.decode().startswith("trunkline: not_found: ")
    # An error after the stream began keeps its partial response.
    failed = await scripted_ask(
        daemon, [{"text": "partial"}, {"error": {"error_class": "server_error", "message": "boom"}}], "--json"
    )
    assert failed.returncode == 1, failed.stderr
    body = json.loads(failed.stdout)
    assert (
        body["error"]["error_class"] == "server_error" and body["partial"]["message"]["content"][0]["text"] == "partial"
    )
    assert body["request_id"]
    gone = await cli("status", "--json", runtime_dir=tmp_path / "no-daemon")
    assert gone.returncode == 3 and json.loads(gone.stdout)["error"]["retryable"] is True
    unreadable = await cli("ask", "mock:echo", "--json", runtime_dir=daemon.runtime_dir)
    assert unreadable.returncode == 2
    assert json.loads(unreadable.stdout)["error"]["error_class"] == "invalid_request"


async def scripted_ask(daemon, steps: list, *args: str) -> subprocess.CompletedProcess:
    """`trunkline ask mock:echo x` with the mock scripted by `steps`."""
    program = (
        "import sys, trunkline.cli as c, trunkline.client as k\n"
        "orig = k.build_request\n"
        "def scripted(*a, **f):\n"
        "    r = orig(*a, **f)\n"
        f"    r.provider_options = {{'mock': {{'steps': {steps!r}}}}}\n"
        "    return r\n"
        "k.build_request = scripted\n"
        "sys.exit(c.main(sys.argv[1:]))\n"
    )
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-c", program, "ask", "mock:echo", "x", *args, "--runtime-dir", str(daemon.runtime_dir)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def test_a_streamed_error_leaves_no_blank_line(daemon):
    boom = {"error": {"error_class": "server_error", "message": "boom"}}
    before_any_text = await scripted_ask(daemon, [boom])
    assert before_any_text.returncode == 1
    assert before_any_text.stdout == b""
    assert before_any_text.stderr.decode() == "trunkline: server_error: boom (gave up after 3 attempts)\n"
    mid_line = await scripted_ask(daemon, [{"text": "partial"}, boom])
    assert mid_line.returncode == 1 and mid_line.stdout == b"partial\n"  # the line ended, no blank one
    assert mid_line.stderr.decode().count("\n") == 1
    whole_line = await scripted_ask(daemon, [{"text": "a whole line\n"}])
    assert whole_line.returncode == 0 and whole_line.stdout == b"a whole line\n"


async def test_models_of_an_unknown_provider_is_an_error_naming_the_providers(daemon):
    result = await cli("models", "--provider", "antropic", runtime_dir=daemon.runtime_dir)
    err = result.stderr.decode()
    assert result.returncode == 1 and result.stdout == b""
    assert "trunkline: not_found: no provider 'antropic' on this daemon; did you mean `anthropic`?" in err
    assert "mock" in err and "anthropic" in err
    nosuch = await cli("models", "--provider", "nosuch", "--json", runtime_dir=daemon.runtime_dir)
    assert nosuch.returncode == 1 and json.loads(nosuch.stdout)["error"]["error_class"] == "not_found"


async def test_a_mistyped_provider_is_resolved_or_answered_with_the_nearest_name(daemon):
    shouted = await cli("ask", "MOCK:echo", "any case", "--no-stream", runtime_dir=daemon.runtime_dir)
    assert shouted.returncode == 0 and shouted.stdout.decode() == "any case\n", shouted.stderr
    misspelt = await cli("ask", "antropic:claude-x", "x", runtime_dir=daemon.runtime_dir)
    assert misspelt.returncode == 1
    assert "'antropic' is not a provider; did you mean `anthropic:claude-x`?" in misspelt.stderr.decode()
    wrong_case = await cli("ask", "MOCK:ECHO", "x", runtime_dir=daemon.runtime_dir)
    assert wrong_case.returncode == 1
    assert "unknown model 'mock:ECHO'; did you mean `mock:echo`?" in wrong_case.stderr.decode()


async def test_tail_says_when_the_daemon_goes_away(daemon):
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "trunkline.cli", "tail", "--runtime-dir", str(daemon.runtime_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        with trio.fail_after(30):
            said = b""
            while b"watching the bus" not in said:
                said += await proc.stderr.receive_some(4096)
            assert await daemon.stop() == 0
            gone_at = trio.current_time()
            async for chunk in proc.stderr:
                said += chunk
            code = await proc.wait()
            noticed_after = trio.current_time() - gone_at
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 3, said.decode()
    assert "went away" in said.decode() and "Traceback" not in said.decode()
    assert noticed_after < 15, noticed_after  # the check runs every second, patient for 3 (slack for a busy machine)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_serve_takes_its_endpoints_token_and_certificate_from_the_command_line(nursery, tmp_path):
    from trunkline import Client
    from trunkline.errors import AuthenticationError

    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    (tmp_path / "server.pem").write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    control, events = f"tls+tcp://127.0.0.1:{free_port()}", f"tls+tcp://0.0.0.0:{free_port()}"
    daemon = DaemonProcess(env={"TRUNKLINE_TOKEN": ""})  # its file names no endpoint, no certificate, no token
    options = [
        "--control-endpoint",
        control,
        "--events-endpoint",
        events,
        "--token",
        "token-from-the-cli",
        "--tls-cert-file",
        str(tmp_path / "server.pem"),
        "--tls-key-file",
        str(tmp_path / "server.key"),
    ]
    file_only = daemon.command
    daemon.command = lambda: [*file_only(), *options]  # type: ignore[method-assign]  # this daemon's command line, extended
    reach = {"control_endpoint": control, "tls_ca_file": str(tmp_path / "ca.pem"), "tls_server_name": "localhost"}
    try:
        await daemon.start(nursery)
        assert not daemon.exited.is_set(), daemon.output()
        with trio.fail_after(30):
            async with Client(**reach, token="token-from-the-cli") as client:
                assert (await client.complete("mock:echo", "over the cli's tls")).text == "over the cli's tls"
                reloaded = await client.reload()  # the file again, the command line still over it
            with pytest.raises(AuthenticationError):
                async with Client(**reach, token="not-it"):
                    pass
        assert reloaded.ok and reloaded.restart_needed == [], reloaded
    finally:
        if daemon.proc is not None and daemon.proc.returncode is None:
            await daemon.stop()
        daemon.cleanup()
    assert "token-from-the-cli" not in daemon.output()


async def test_serve_refuses_options_it_cannot_apply(tmp_path):
    base = [sys.executable, "-m", "trunkline.cli"]
    where = ["--runtime-dir", str(tmp_path / "rt")]
    cases = {
        "a client's CA": ([*base, "serve", "--tls-ca-file", "ca.pem", *where], "--tls-ca-file is a client's option"),
        "given before the command": (
            [*base, "--tls-server-name", "x", "serve", *where],
            "--tls-server-name is a client's option",
        ),
        "a bad endpoint": (
            [*base, "serve", "--control-endpoint", "tcp://nowhere", *where],
            "--control-endpoint: 'tcp://nowhere' is not an endpoint",
        ),
        "an empty token": ([*base, "serve", "--token", " ", *where], "--token is empty"),
    }
    for name, (argv, words) in cases.items():
        with trio.fail_after(30):
            result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
        err = result.stderr.decode()
        assert result.returncode == 2 and err.startswith("trunkline serve: ") and words in err, (name, err)
    assert not (tmp_path / "rt").exists()  # refused before anything started
