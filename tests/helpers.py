"""Shared test support: a real daemon in a subprocess, event invariants, mock scripts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio
import yaml

from trunkline.protocol.messages import (
    ErrorEvent,
    Finish,
    ProviderPartEvent,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    StreamStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)

REPO = Path(__file__).resolve().parent.parent

#: Fast timings for real-process tests: the daemon's own clock is real.
FAST_CONFIG: dict[str, Any] = {
    # Tests that need these providers turn them on; the rest start fewer processes.
    "providers": {"ollama": {"enabled": False}, "openrouter": {"enabled": False}},
    "retry": {"base_delay_s": 0.01, "max_delay_s": 0.05, "jitter": 0.0},
    "supervision": {
        "restart_backoff_s": 0.01,
        "heartbeat_interval_s": 0.2,
        "heartbeat_timeout_s": 5.0,
        "shutdown_grace_s": 3.0,
        "cancel_grace_s": 2.0,
    },
}


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def short_tmpdir() -> Path:
    """ipc paths must stay under 108 bytes, which pytest's tmp_path may not."""
    return Path(tempfile.mkdtemp(prefix="tl-", dir="/tmp"))


#: Variables that replace a shipped provider's base_url (config/defaults.yaml).
BASE_URL_VARIABLES = ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GEMINI_BASE_URL", "OLLAMA_HOST")


class DaemonProcess:
    """`trunkline serve` in a subprocess, with its own runtime dir and config."""

    def __init__(self, config: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> None:
        self.dir = short_tmpdir()
        self.runtime_dir = self.dir / "run"
        cfg = deep_merge(FAST_CONFIG, config or {})
        cfg.setdefault("state_dir", str(self.dir / "state"))
        self.config_path = self.dir / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(cfg))
        # A developer's own base-URL variables must not send a test daemon's calls elsewhere.
        inherited = {k: v for k, v in os.environ.items() if k not in BASE_URL_VARIABLES}
        self.env = {**inherited, **(env or {})}
        self.proc: trio.Process | None = None
        self.lines: list[str] = []
        self.ready = trio.Event()
        self.exited = trio.Event()
        self._new_line = trio.Event()

    async def wait_for_line(self, text: str) -> str:
        """The first output line holding `text`, once the daemon has printed it (bound the
        wait with trio.fail_after)."""
        while True:
            found = next((line for line in self.lines if text in line), None)
            if found is not None:
                return found
            self._new_line = trio.Event()
            await self._new_line.wait()

    @property
    def control(self) -> str:
        return f"ipc://{self.runtime_dir / 'control.ipc'}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "trunkline.cli",
            "serve",
            "--config",
            str(self.config_path),
            "--runtime-dir",
            str(self.runtime_dir),
        ]

    async def start(self, nursery: trio.Nursery, timeout_s: float = 20.0) -> DaemonProcess:
        self.proc = await trio.lowlevel.open_process(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        nursery.start_soon(self._read_output)
        with trio.fail_after(timeout_s):
            await self.ready.wait()
        return self

    async def _read_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        buf = b""
        async for chunk in self.proc.stdout:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                self.lines.append(text)
                self._new_line.set()
                if "serving" in text:
                    self.ready.set()
        await self.proc.wait()
        self.exited.set()
        self.ready.set()

    def output(self) -> str:
        return "\n".join(self.lines)

    def worker_pid(self, name: str) -> int | None:
        out = subprocess.run(
            ["pgrep", "-P", str(self.proc.pid if self.proc else 0), "-f", "trunkline.workers"],
            capture_output=True,
            text=True,
        )
        pids = [int(p) for p in out.stdout.split()]
        return pids[0] if pids else None

    async def stop(self, timeout_s: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(timeout_s):
            await self.exited.wait()
        if not self.exited.is_set():
            self.proc.kill()
            raise AssertionError(f"the daemon did not stop within {timeout_s}s:\n{self.output()}")
        return self.proc.returncode  # type: ignore[return-value]

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def check_invariants(events: list[Any]) -> None:
    """The stream rules every provider must keep (DESIGN §2)."""
    assert events, "no events"
    seqs = [e.seq for e in events]
    assert seqs == list(range(len(events))), f"seq not contiguous from 0: {seqs[:20]}"
    terminal = [i for i, e in enumerate(events) if type(e) in (Finish, ErrorEvent)]
    assert terminal == [len(events) - 1], f"terminal events at {terminal} of {len(events)}"
    if type(events[0]) is not StreamStart:
        assert len(events) == 1 and type(events[0]) is ErrorEvent, f"first event is {type(events[0]).__name__}"
        return
    open_parts: dict[int, str] = {}
    ended: set[int] = set()
    last_index = -1
    texts: dict[int, list[str]] = {}
    for e in events[1:-1]:
        t = type(e)
        if t in (TextStart, ReasoningStart, ToolCallStart):
            assert e.index not in open_parts and e.index not in ended, f"index {e.index} started twice"
            assert e.index >= last_index, "indexes went backwards"
            last_index = e.index
            open_parts[e.index] = t.__name__
        elif t in (TextDelta, ReasoningDelta, ToolCallDelta):
            assert e.index in open_parts, f"{t.__name__} for index {e.index} that is not open"
            if t is TextDelta:
                texts.setdefault(e.index, []).append(e.text)
        elif t in (TextEnd, ReasoningEnd, ToolCallEnd):
            assert e.index in open_parts, f"{t.__name__} for index {e.index} that is not open"
            del open_parts[e.index]
            ended.add(e.index)
            if t is TextEnd:
                assert "".join(texts.get(e.index, [])) == e.text, "text deltas do not add up to text_end"
        elif t is ProviderPartEvent:  # whole in one event: no start, no end
            assert e.index not in open_parts and e.index not in ended, f"index {e.index} used twice"
            assert e.index >= last_index, "indexes went backwards"
            last_index = e.index
            ended.add(e.index)
        elif t is StreamStart:
            raise AssertionError("stream_start twice")
    assert not open_parts, f"parts never ended: {open_parts}"
    last = events[-1]
    response = last.response if type(last) is Finish else last.partial
    if response is not None:
        full = "".join("".join(v) for _, v in sorted(texts.items()))
        assert response.message.text == full, "final text differs from the deltas"


def steps(*items: dict[str, Any], **options: Any) -> dict[str, Any]:
    """`provider_options` that script the mock."""
    return {"mock": {"steps": list(items), **options}}


def through_pipeline(chunks: list[bytes], translator: Any, framing: str, emitter: Any, provider: str) -> None:
    """Body chunks through the worker's own pipeline (decode, translate, emit) into
    `emitter`, ended as the runtime ends an attempt: a finish, or the error's event."""
    from trunkline.workers._adapter import Call, Deadlines
    from trunkline.workers._contract import Pipeline
    from trunkline.workers.errors import ProviderError

    job = emitter.job
    call = Call(
        job,
        provider,
        1,
        job.operation_id,
        Deadlines(connect_s=5, request_s=60, stream_idle_s=30),
        warnings=emitter.warnings,
    )
    pipeline = Pipeline(translator, framing, emitter.emit, keep_raw=False)  # type: ignore[arg-type]
    try:
        for chunk in chunks:
            pipeline.feed(chunk)
        emitter.finish(pipeline.finish(call, provider))
    except ProviderError as err:
        emitter.fail(err.to_info(provider))
