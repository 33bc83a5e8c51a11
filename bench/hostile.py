"""A worker's and the supervisor's memory under a hostile upstream, with
`limits.max_response_bytes` in force.

    .venv/bin/python -m bench.hostile [--limit-mib 32] [--attacks 3]

Starts a daemon whose `openai_compat` worker talks to an upstream on 127.0.0.1 that
answers every request with an endless event stream (or a gzip bomb), runs the attacks
one after another beside an innocent request, and reads the worker's and the
supervisor's resident memory from /proc while they run: before (idle, after one small
request), the peak (VmHWM) and after. Reported as MiB and as ratios (peak over idle; growth over the limit), never
asserted: it is a measurement, not a test. The worker must also survive (no restart:
its heartbeats must not queue behind the flood).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
import yaml

from trunkline import Client

from .procs import _kib_field, rss_mb


def chunk(text: str) -> bytes:
    body = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


GOOD = (
    chunk("fine") + b'data: {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {}, '
    b'"finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
)


class Upstream:
    """Answers by the prompt: `endless`, `bomb` or anything else (a short good stream)."""

    def __init__(self) -> None:
        self.port = 0
        self.bomb = gzip.compress(chunk("start ") + b"data: " + b"\0" * (256 << 20))  # 256 MiB inflated

    async def start(self, nursery: trio.Nursery) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, self._serve, listeners)

    async def _serve(self, stream: trio.SocketStream) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(body) < length:
                body += await stream.receive_some(65536)
            prompt = json.loads(body)["messages"][-1]["content"]
            prompt = prompt if isinstance(prompt, str) else prompt[0]["text"]
            if prompt == "bomb":
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"content-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(self.bomb)
                )
                await stream.send_all(self.bomb)
            elif prompt == "endless":
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                )
                piece = chunk("x" * 4000) * 16
                framed = b"%x\r\n%s\r\n" % (len(piece), piece)
                while True:
                    await stream.send_all(framed)
            else:
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(GOOD), GOOD)
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError, ValueError, KeyError):
            pass
        finally:
            await stream.aclose()


def peak_mb(pid: int) -> float:
    return _kib_field(f"/proc/{pid}/status", "VmHWM:") or 0.0


async def run(limit_mib: int, attacks: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="tlh-", dir="/tmp"))
    try:
        async with trio.open_nursery() as nursery:
            upstream = Upstream()
            await upstream.start(nursery)
            config = {
                "state_dir": str(work / "state"),
                "limits": {"max_response_bytes": limit_mib << 20},
                "providers": {
                    "openrouter": {"enabled": False},
                    "ollama": {"enabled": False},
                    "anthropic": {"enabled": False},
                    "hostile": {"type": "openai_compat", "base_url": f"http://127.0.0.1:{upstream.port}"},
                },
            }
            (work / "config.yaml").write_text(yaml.safe_dump(config))
            log = open(work / "log", "wb")  # noqa: SIM115 - the daemon writes it until the finally below
            proc = await trio.lowlevel.open_process(
                [
                    sys.executable,
                    "-m",
                    "trunkline.cli",
                    "serve",
                    "--config",
                    str(work / "config.yaml"),
                    "--runtime-dir",
                    str(work / "run"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                with trio.fail_after(30):
                    while b"serving" not in (work / "log").read_bytes():
                        await trio.sleep(0.05)
                async with Client(work / "run") as client:
                    await client.complete("hostile:m", "warm up")
                    pid = {w.provider: w.pid for w in (await client.status()).workers}["hostile"]
                    idle = rss_mb(pid)
                    sup_idle = rss_mb(proc.pid)
                    print(
                        f"limit {limit_mib} MiB; after one request: worker {idle:.1f} MiB RSS, "
                        f"supervisor {sup_idle:.1f} MiB RSS"
                    )
                    for kind in ["endless"] * attacks + ["bomb"]:
                        samples: list[float] = []
                        started = time.monotonic()

                        async def sample() -> None:
                            while True:
                                samples.append(rss_mb(pid))
                                await trio.sleep(0.02)

                        async with trio.open_nursery() as watch:
                            watch.start_soon(sample)
                            with trio.fail_after(120):
                                try:
                                    async with client.stream("hostile:m", kind) as stream:
                                        async for _ in stream:
                                            pass
                                except Exception:  # noqa: BLE001, S110 - the typed error is the expected end
                                    pass
                                innocent = await client.complete("hostile:m", "innocent")
                            watch.cancel_scope.cancel()
                        took = time.monotonic() - started
                        peak = peak_mb(pid)
                        print(
                            f"  {kind:8s}: ended in {took:.2f}s; sampled max {max(samples):.1f} MiB, "
                            f"VmHWM {peak:.1f} MiB = {peak / idle:.2f}x idle, growth "
                            f"{(peak - idle) / limit_mib:.2f}x the limit; after {rss_mb(pid):.1f} MiB; "
                            f"innocent: {innocent.text!r}"
                        )
                        sup_peak = peak_mb(proc.pid)
                        print(
                            f"  {'':8s}  supervisor: VmHWM {sup_peak:.1f} MiB = {sup_peak / sup_idle:.2f}x idle, "
                            f"growth {(sup_peak - sup_idle) / limit_mib:.2f}x the limit; after "
                            f"{rss_mb(proc.pid):.1f} MiB"
                        )
                    worker = {w.provider: w for w in (await client.status()).workers}["hostile"]
                    print(f"worker restarts: {worker.restarts} (pid {'unchanged' if worker.pid == pid else 'changed'})")
            finally:
                proc.terminate()
                with trio.move_on_after(10):
                    await proc.wait()
                log.close()
                nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit-mib", type=int, default=32)
    parser.add_argument("--attacks", type=int, default=3)
    args = parser.parse_args()
    trio.run(run, args.limit_mib, args.attacks)


if __name__ == "__main__":
    main()
