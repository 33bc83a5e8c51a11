"""The `trunkline` command against a real daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

pytestmark = pytest.mark.e2e


async def cli(*args: str, runtime_dir=None, check: bool = False) -> subprocess.CompletedProcess:
    extra = ["--runtime-dir", str(runtime_dir)] if runtime_dir is not None else []
    return await trio.run_process([sys.executable, "-m", "trunkline.cli", *args, *extra], capture_stdout=True,
                                  capture_stderr=True, check=check)


async def test_ask_streams_the_answer_and_summarises_usage_on_stderr(daemon):
    result = await cli("ask", "mock:echo", "hello from the cli", runtime_dir=daemon.runtime_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == "hello from the cli\n"
    summary = result.stderr.decode()
    assert "[mock:echo]" in summary and "4 out" in summary and "$0.0000" in summary and "stop" in summary


async def test_ask_no_stream_and_json(daemon):
    result = await cli("ask", "echo", "x y", "--no-stream", "--json", "--system", "be brief",
                       runtime_dir=daemon.runtime_dir)
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
        [sys.executable, "-c", (
            "import sys, trunkline.cli as c, trunkline.client as k\n"
            "orig = k.build_request\n"
            "def slow(*a, **f):\n"
            "    r = orig(*a, **f)\n"
            "    r.provider_options = {'mock': {'steps': [{'text': f'w{i} ', 'delay': 0.05} for i in range(400)]}}\n"
            "    return r\n"
            "k.build_request = slow\n"
            "sys.exit(c.main(sys.argv[1:]))\n"),
         "ask", "mock:echo", "x", "--runtime-dir", str(daemon.runtime_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
    result = await trio.run_process([sys.executable, "-m", "trunkline.cli", "status"], capture_stdout=True,
                                    capture_stderr=True, env=env, check=False)
    assert result.returncode == 0 and "mock" in result.stdout.decode()


async def test_a_reader_that_goes_away_ends_the_command_quietly(daemon):
    # `trunkline status | head -1`, made certain: the pipe's reader is gone before we write.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        with trio.fail_after(30):
            result = await trio.run_process(
                [sys.executable, "-m", "trunkline.cli", "status", "--runtime-dir", str(daemon.runtime_dir)],
                stdout=write_end, capture_stderr=True, check=False)
    finally:
        os.close(write_end)
    assert result.returncode == 128 + signal.SIGPIPE
    assert result.stderr.decode() == ""  # no BrokenPipeError traceback
    with trio.fail_after(30):
        piped = await trio.run_process(
            ["sh", "-c", f"{sys.executable} -m trunkline.cli models --runtime-dir {daemon.runtime_dir} | head -1"],
            capture_stdout=True, capture_stderr=True, check=False)
    assert piped.stderr.decode() == "" and len(piped.stdout.decode().splitlines()) == 1


async def test_ps_shows_which_provider_each_worker_serves(start_daemon):
    daemon = await start_daemon({"providers": {"ollama": {"enabled": True}}})
    names: dict[str, str] = {}
    with trio.fail_after(20):
        while names != {"mock": "tl-mock", "ollama": "tl-ollama"}:  # each names itself as it starts
            await trio.sleep(0.05)
            workers = subprocess.run(["pgrep", "-P", str(daemon.proc.pid), "-f", "trunkline.workers"],
                                     capture_output=True, text=True).stdout.split()
            names = {}
            for pid in workers:
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    names[cmdline[-2].decode()] = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    pass  # restarted meanwhile


async def test_ask_reads_a_large_prompt_from_stdin_or_a_file(daemon, tmp_path):
    big = " ".join(f"w{i}" for i in range(20_000))  # far past what a command line comfortably holds
    piped = await trio.run_process([sys.executable, "-m", "trunkline.cli", "ask", "mock:echo", "-", "--no-stream",
                                    "--runtime-dir", str(daemon.runtime_dir)], stdin=big.encode(),
                                   capture_stdout=True, capture_stderr=True, check=False)
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
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
