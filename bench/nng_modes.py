"""pynng under trio, two ways: its awaitable `asend`/`arecv`, and the event loop
waiting on nng's readiness descriptors with non-blocking calls (what
`trunkline.protocol.nng` does). Both over ipc, between two processes.

    .venv/bin/python -m bench.nng_modes [--calls 5000] [--events 100000]

Prints the control round trip (Req0 -> raw Rep0 -> reply) and the Pub0 -> Sub0
event rate for each way, and their ratio. The server side is the same for both
(the daemon's raw Rep0 and Pub0); only the client side changes, as in the client.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import pynng
import trio

from trunkline.protocol import nng

SERVER = """
import sys, trio
from trunkline.protocol import nng
async def main(control, events, n_events):
    rep = nng.ControlServer(control, max_size=1 << 20, max_connections=8, fd_reserve=8)
    pub = nng.EventPublisher(events, queue=8192, max_connections=8, fd_reserve=8)
    print("ready", flush=True)
    async with trio.open_nursery() as nursery:
        while True:
            body, header, pipe = await rep.recv()
            if body == b"publish":
                frame = b"t\\x00" + b"e" * 100
                for i in range(n_events):
                    pub.publish(frame)
                    if i % 256 == 0:
                        await trio.sleep(0)
                pub.publish(b"t\\x00end")
            rep.reply(header, b"ok", nursery)
trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def round_trips(url: str, calls: int, mode: str) -> tuple[float, float, float]:
    sock = pynng.Req0(resend_time=-1)
    sock.dial(url, block=True)
    requester = nng.Requester.__new__(nng.Requester)
    requester.sock, requester._receiver, requester._busy = sock, nng.Receiver(sock), False
    times = []
    c0 = cpu()
    for _ in range(calls):
        t = time.perf_counter()
        if mode == "arecv":
            await sock.asend(b"ping")
            await sock.arecv()
        else:
            await requester.call(b"ping")
        times.append(time.perf_counter() - t)
    used = cpu() - c0
    sock.close()
    times.sort()
    return statistics.median(times) * 1e6, times[int(len(times) * 0.99)] * 1e6, used / calls * 1e6


async def event_rate(control: str, events: str, n: int, mode: str) -> tuple[float, float]:
    sub = pynng.Sub0(recv_buffer_size=8192)
    sub.subscribe(b"t\x00")
    sub.dial(events, block=True)
    ctl = pynng.Req0(resend_time=-1)
    ctl.dial(control, block=True)
    await trio.sleep(0.2)  # the subscription must be live before the burst (slow joiner)
    receiver = nng.Receiver(sub)
    got = 0
    c0 = cpu()
    t = time.perf_counter()
    await ctl.asend(b"publish")
    while True:
        data = await (sub.arecv() if mode == "arecv" else receiver.recv())
        if data.endswith(b"end"):
            break
        got += 1
    elapsed = time.perf_counter() - t
    used = cpu() - c0
    await ctl.arecv()
    sub.close()
    ctl.close()
    return got / elapsed, used / max(got, 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="tl-nng-", dir="/tmp")
    control, events = f"ipc://{tmp}/c.ipc", f"ipc://{tmp}/e.ipc"
    server = subprocess.Popen([sys.executable, "-c", SERVER, control, events, str(args.events)], stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        assert b"ready" in server.stdout.readline()
        print(f"pynng {pynng.__version__}, {os.cpu_count()} cores; client side only differs\n")
        print(
            "| client side | round trip p50 µs | p99 µs | client CPU µs/call | events/s received | client CPU µs/event |"
        )
        print("|---|---|---|---|---|---|")
        for mode in ("arecv", "readiness"):
            p50, p99, cpu_call = trio.run(round_trips, control, args.calls, mode)
            rate, cpu_event = trio.run(event_rate, control, events, args.events, mode)
            name = "pynng asend/arecv" if mode == "arecv" else "readiness fd + non-blocking"
            print(f"| {name} | {p50:.0f} | {p99:.0f} | {cpu_call:.0f} | {rate:,.0f} | {cpu_event:.1f} |")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
