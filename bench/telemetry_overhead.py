"""What telemetry costs: CPU per request of the daemon (supervisor and the worker)
with telemetry off, with the Prometheus endpoint (`metrics.listen`), and with
OpenTelemetry (`telemetry`: a span per call and the GenAI metrics, exported over
OTLP/HTTP to a sink on 127.0.0.1), against the same fake upstream, in one run, the
daemons taking turns so that the machine's drift falls on all alike.

    .venv/bin/python -m bench.telemetry_overhead [--requests 2000] [--rounds 5] [--stream]

The target (issue 22) is under 5% of added CPU per request. A scrape every second
runs throughout, as a Prometheus server would; the OpenTelemetry daemons export their
spans as their batch fills (the SDK's default schedule) and their metrics every 5 s:
two tracing every call (spans as protobuf, and as JSON), one a tenth of them
(OTEL_TRACES_SAMPLER, metrics for all). After each round, OpenTelemetry's own work
is timed in a process of its own for each span encoding (ours as protobuf and as
JSON, and the SDK's protobuf exporter for reference), as a ratio to that round's
`off` daemon.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import trio

from trunkline import Client

from .load import closed_loop
from .procs import CpuMeter, LineProcess
from .run import REPO
from .trunkline_runner import OPENAI_PROVIDER, Daemon, TrunklineOps


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def scrape(url: str) -> None:
    async with httpx.AsyncClient() as http:
        while True:
            await http.get(url)
            await trio.sleep(1.0)


async def measure(daemon: Daemon, requests: int, stream: bool) -> dict[str, float]:
    """CPU seconds per request of the daemon's supervisor and of its `fake` worker."""
    async with Client(daemon.runtime_dir, client_name="bench-telemetry") as client:
        ops = TrunklineOps(client)
        model = f"{OPENAI_PROVIDER}:bench-c{50 if stream else 1}"
        op = (lambda: ops.stream(model)) if stream else (lambda: ops.complete(model))
        await closed_loop(op, 4, count=50, duration_s=30)
        meter = CpuMeter(
            {"supervisor": [daemon.pid], "worker": [daemon.workers[OPENAI_PROVIDER]]}, include_self=False
        ).start()
        result = await closed_loop(op, 4, count=requests, duration_s=600)
        used = meter.stop()
    count = max(len(result.samples), 1)
    return {"supervisor": used["supervisor"] / count, "worker": used["worker"] / count}


def in_process_cost_apart(sink_url: str, stream: bool, protocol: str) -> float:
    """`in_process_cost` in a process of its own, so that the sink's reading of the
    exports (in this one) is not counted."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return float(pool.apply(in_process_cost, (sink_url, stream, protocol)))


#: The span exporters timed in one process: ours by OTLP protocol, and the SDK's own.
IN_PROCESS = ("http/protobuf", "http/json", "SDK's exporter")


def in_process_cost(sink_url: str, stream: bool, protocol: str = "http/protobuf", calls: int = 5000) -> float:
    """CPU seconds per request of the OpenTelemetry work alone, in this process: the
    supervisor's calls for one request (start, its first attempt, first chunk and
    each later one, end) and the SDK's batching and the exporter's encoding and
    sending of its span (all threads count). Precise where the daemons' figures are
    noisy."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from trunkline.config.loader import ProviderConfig, TelemetryConfig
    from trunkline.protocol.messages import (
        BusEvent,
        Finish,
        FinishReason,
        Job,
        Message,
        ModelInfo,
        Request,
        Response,
        Usage,
    )
    from trunkline.supervisor.requests import RequestState
    from trunkline.supervisor.telemetry import Telemetry

    processor = None
    if protocol not in ("http/protobuf", "http/json"):  # the SDK's encoder and exporter, as before ours
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{sink_url}/v1/traces", timeout=4))
        protocol = "http/protobuf"
    telemetry = Telemetry(
        TelemetryConfig(otlp_endpoint=sink_url, metric_interval_s=5, otlp_protocol=protocol),
        {OPENAI_PROVIDER: ProviderConfig(type="openai_compat", base_url="http://127.0.0.1:8000/v1")},
        span_processor=processor,
    )
    telemetry.start()
    model = ModelInfo(id=f"{OPENAI_PROVIDER}:bench-c1", provider=OPENAI_PROVIDER, wire_name="bench-c1")
    request = Request(model=model.id, messages=[Message.user("Say something.")])
    finish = Finish(
        response=Response(
            id="chatcmpl-1",
            model="bench-c1",
            message=Message.assistant("word " * 50),
            finish_reason=FinishReason(reason="stop", raw="stop"),
            usage=Usage(input_tokens=12, output_tokens=50, total_tokens=62),
        )
    )
    started = time.process_time()
    for i in range(calls):
        state = RequestState(f"r{i}", "c", OPENAI_PROVIDER, model.id, stream, f"r{i}", 16, 0.0)
        state.job = Job(
            request_id=state.request_id,
            client_id="c",
            request=request,
            model=model,
            operation_id=state.request_id,
            stream=stream,
        )
        telemetry.started(state, {})
        telemetry.bus(BusEvent(name="llm.call_started", request_id=state.request_id, attempt=1), state)
        if stream:
            telemetry.first_event(state, 0.01)
            for chunk in range(49):  # each later chunk in a relay of its own: the most relays a stream makes
                state.otel_chunks.arrived(0.01 + chunk * 0.001)
        telemetry.ended(state, finish, 0.02)
        if i % 1000 == 999:  # as the daemon's pace would: the batch queue never overflows
            telemetry.spans.force_flush()  # type: ignore[union-attr]
    telemetry.shutdown()  # the batch still held is encoded and sent too
    return (time.process_time() - started) / calls


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that takes every export and keeps nothing."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def otlp_sink() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def run(requests: int, rounds: int, stream: bool, logs: Path) -> None:
    upstream = LineProcess([sys.executable, "-m", "bench.upstream"], cwd=str(REPO), log=logs / "upstream.log")
    await upstream.start()
    port = int((await upstream.readline(30)).split()[1])
    metrics_port = free_port()
    sink = otlp_sink()
    sink_url = f"http://127.0.0.1:{sink.server_address[1]}"
    otel = {"otlp_endpoint": sink_url, "metric_interval_s": 5}
    arms = {
        "off": await Daemon(port, logs / "daemon-off.log").start(),
        "prometheus": await Daemon(
            port, logs / "daemon-prometheus.log", extra={"metrics": {"listen": f"127.0.0.1:{metrics_port}"}}
        ).start(),
        "opentelemetry": await Daemon(port, logs / "daemon-otel.log", extra={"telemetry": otel}).start(),
        "otel http/json": await Daemon(
            port, logs / "daemon-otel-json.log", extra={"telemetry": {**otel, "otlp_protocol": "http/json"}}
        ).start(),
        "otel 10% traced": await Daemon(
            port,
            logs / "daemon-otel-sampled.log",
            extra={"telemetry": otel},
            env={"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
        ).start(),
    }
    per: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    alone: dict[str, list[float]] = {protocol: [] for protocol in IN_PROCESS}
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(scrape, f"http://127.0.0.1:{metrics_port}/metrics")
            order = list(arms)
            for r in range(rounds):
                # Each round starts with another arm, so that a drift within a round
                # (the load generator's own warm-up, say) falls on every arm alike.
                for name in order[r % len(order) :] + order[: r % len(order)]:
                    per[name].append(await measure(arms[name], requests, stream))
                for protocol in IN_PROCESS[r % 3 :] + IN_PROCESS[: r % 3]:
                    alone[protocol].append(
                        await trio.to_thread.run_sync(in_process_cost_apart, sink_url, stream, protocol)
                    )
            nursery.cancel_scope.cancel()
    finally:
        for d in arms.values():
            await d.stop()
        await upstream.stop()
        sink.shutdown()
    report(per, alone, rounds, requests, stream)


def report(
    per: dict[str, list[dict[str, float]]], alone: dict[str, list[float]], rounds: int, requests: int, stream: bool
) -> None:
    """Each arm against `off` round by round (the arms of one round ran back to back,
    so the machine's drift, ±15% here, falls on both), then the median of those ratios
    and their range, which says how noisy the run was."""

    def total(m: dict[str, float]) -> float:
        return m["supervisor"] + m["worker"]

    def spread(ratios: list[float]) -> str:
        return (
            f"{(statistics.median(ratios) - 1) * 100:+.1f}% [{(min(ratios) - 1) * 100:+.1f} to "
            f"{(max(ratios) - 1) * 100:+.1f}]"
        )

    kind = "50-chunk streams" if stream else "one-chunk requests"
    print(f"daemon CPU per request ({kind}, {rounds} rounds of {requests}; median, and the median of the")
    print("per-round ratios to `off` [their range]):")
    off_ms = statistics.median(total(m) for m in per["off"]) * 1e3
    for name, values in per.items():
        ms = statistics.median(total(m) for m in values) * 1e3
        sup = statistics.median(m["supervisor"] for m in values) * 1e3
        line = f"  {name:<16} {ms:.3f} ms (supervisor {sup:.3f})"
        if name != "off":
            ratios = [total(m) / total(o) for m, o in zip(values, per["off"], strict=True)]
            sup_ratios = [m["supervisor"] / o["supervisor"] for m, o in zip(values, per["off"], strict=True)]
            line += f"   {spread(ratios)} (supervisor alone {spread(sup_ratios)})"
        print(line)
    print("OpenTelemetry's own work per request, measured in one process (every call traced), and its ratio")
    print(f"to the `off` daemon's CPU per request of the same round (target: under 5%; off: {off_ms:.3f} ms):")
    reference = alone[IN_PROCESS[-1]]
    for protocol, costs in alone.items():
        shares = [cost / total(o) * 100 for cost, o in zip(costs, per["off"], strict=True)]
        line = (
            f"  {protocol:<15} {statistics.median(costs) * 1e6:.0f} µs [{min(costs) * 1e6:.0f} to "
            f"{max(costs) * 1e6:.0f}] = {statistics.median(shares):.1f}% [{min(shares):.1f} to {max(shares):.1f}]"
        )
        if costs is not reference:
            to_sdk = [cost / ref for cost, ref in zip(costs, reference, strict=True)]
            line += f", {statistics.median(to_sdk):.2f}x the SDK's exporter's [{min(to_sdk):.2f} to {max(to_sdk):.2f}]"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stream", action="store_true", help="50-chunk streams instead of one-chunk requests")
    parser.add_argument("--logs", type=Path, default=Path("/tmp"))
    args = parser.parse_args()
    trio.run(run, args.requests, args.rounds, args.stream, args.logs)


if __name__ == "__main__":
    main()
