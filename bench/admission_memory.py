"""What admission in memory (client keys, limits, budgets) adds to a request's own work
in the supervisor, measured as `own_work` measures it: a real `Daemon` without sockets,
one `submit` as the control socket hands it over (bytes in, `accepted` out), then the
link messages of its whole answer down to its end (where admission settles).

    .venv/bin/python -m bench.admission_memory [--count 20000] [--repeats 9]

Three daemons, measured in turn batch by batch (500 requests; so a busy machine's
drift hits all alike); the added cost is the median of each batch's difference to the
batch of "none" beside it:

* none: the embedded default, no `clients:` and no provider limits (no admission at all);
* key: the connection's hello gives a named client key with rpm, parallel and a daily and
  monthly budget, and its provider has an rpm of its own (two scopes counted);
* key+tpm: the same with a tpm limit on the key, so each request's tokens are estimated;
* route: a route of two deployments with an rpm each, no client key (the route's own store);
* route+key: the same route asked with the named key of "key" (key and deployment limits).

The limits are high enough never to refuse: what is measured is the counting.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import yaml

from trunkline.client import build_request
from trunkline.config.loader import load_config
from trunkline.protocol import codec
from trunkline.protocol.codec import BUS_TOPIC, frame_event
from trunkline.protocol.messages import Hello, Relay, Submit, Welcome
from trunkline.supervisor.daemon import Daemon

from .own_work import BATCH, MODEL, _Link, _Published, bus_events, finish_event
from .trunkline_runner import OPENAI_PROVIDER, bench_config

KEY_VARIABLE = "TL_BENCH_CLIENT_KEY"
KEY = "tl-bench-client-key-0123456789abcdef"
HIGH = 10**9

VARIANTS: dict[str, dict[str, Any]] = {
    "none": {},
    "key": {
        "clients": {
            "bench": {
                "key_env": KEY_VARIABLE,
                "limits": {"rpm": HIGH, "parallel": HIGH},
                "budget": {"usd_per_day": HIGH, "usd_per_month": HIGH},
            }
        },
        "providers": {OPENAI_PROVIDER: {"limits": {"rpm": HIGH}}},
    },
    "key+tpm": {
        "clients": {
            "bench": {
                "key_env": KEY_VARIABLE,
                "limits": {"rpm": HIGH, "tpm": HIGH, "parallel": HIGH},
                "budget": {"usd_per_day": HIGH, "usd_per_month": HIGH},
            }
        },
        "providers": {OPENAI_PROVIDER: {"limits": {"rpm": HIGH}}},
    },
    "route": {
        "routes": {
            "smart": {
                "deployments": [
                    {"id": "d1", "provider": OPENAI_PROVIDER, "model": "gpt-4o-mini", "limits": {"rpm": HIGH}},
                    {"id": "d2", "provider": OPENAI_PROVIDER, "model": "gpt-4o", "limits": {"rpm": HIGH}},
                ]
            }
        }
    },
}
VARIANTS["route+key"] = {**VARIANTS["route"], "clients": VARIANTS["key"]["clients"]}
#: The model a variant's requests name (a route's variants: the route).
ROUTE = "smart"


class Bench:
    """One daemon of a variant, its worker link a stand-in, one client said hello."""

    def __init__(self, name: str, extra: dict[str, Any], tmp: Path) -> None:
        base = bench_config(1, tmp / name / "state")
        for section, value in extra.items():
            if section == "providers":
                for provider, over in value.items():
                    base["providers"][provider] = {**base["providers"][provider], **over}
            else:
                base[section] = value
        (tmp / name).mkdir()
        path = tmp / name / "config.yaml"
        path.write_text(yaml.safe_dump(base))
        self.name = name
        self.daemon = daemon = Daemon(load_config(str(path)), runtime_dir=tmp / name / "run")
        daemon.events.pub = _Published()
        self.slot = slot = daemon.slots[OPENAI_PROVIDER]
        slot.state = "running"
        slot.generation = 1
        slot.link = _Link()  # type: ignore[assignment]  # a stand-in with the methods the slot calls
        token = KEY if "clients" in extra else None
        welcome = codec.decode_control_reply(daemon.router.on_request(codec.encode(Hello(token=token)), b"h", 1) or b"")
        assert isinstance(welcome, Welcome), welcome
        self.client_id = welcome.client_id
        self.request = build_request(ROUTE if "routes" in extra else MODEL, "hi")

    def batch(self, tag: str) -> float:
        """CPU µs per request for `BATCH` requests: their submits, then their ends."""
        router, slot = self.daemon.router, self.slot
        ids = [f"{self.name}_{tag}_{i:06d}" for i in range(BATCH)]
        submits = [
            codec.encode(Submit(request_id=rid, client_id=self.client_id, request=self.request, stream=False))
            for rid in ids
        ]
        links = []
        for rid in ids:
            bus = [frame_event(BUS_TOPIC, ev) for ev in bus_events(rid)]
            links.append(codec.encode(Relay(request_id="", frames=bus[:1], last_seq=-1)))
            links.append(codec.encode(Relay(request_id="", frames=bus[1:], last_seq=-1)))
            frame = frame_event(self.client_id, finish_event(rid))
            links.append(codec.encode(Relay(request_id=rid, frames=[frame], last_seq=0, terminal=True)))
        t0 = time.process_time_ns()
        for data in submits:
            reply = router.on_request(data, b"h", 1)
            if reply is None or b"accepted" not in reply[:20]:
                raise RuntimeError(f"{self.name}: submit refused: {reply!r}")
        for data in links:
            slot._on_message(data)
        spent = time.process_time_ns() - t0
        assert not self.daemon.requests.active, "every request ended"
        return spent / BATCH / 1000


async def main(count: int, repeats: int) -> None:
    logging.basicConfig(level="INFO", stream=open(os.devnull, "w"))  # noqa: SIM115 - for the process's life
    os.environ[KEY_VARIABLE] = KEY
    with tempfile.TemporaryDirectory(prefix="tl-adm-") as tmp:
        benches = [Bench(name, extra, Path(tmp)) for name, extra in VARIANTS.items()]
        for bench in benches:
            bench.batch("warm")
        # Batch by batch, the variants in turn (the order rotating): a busy machine's
        # drift then hits each alike, and each batch's difference to its "none" is kept.
        per_batch: dict[str, list[float]] = {bench.name: [] for bench in benches}
        added: dict[str, list[float]] = {bench.name: [] for bench in benches[1:]}
        for b in range(repeats * count // BATCH):
            turn = benches[b % len(benches) :] + benches[: b % len(benches)]
            took = {bench.name: bench.batch(str(b)) for bench in turn}
            for name, us in took.items():
                per_batch[name].append(us)
                if name != "none":
                    added[name].append(us - took["none"])
        for bench in benches[1:]:
            if bench.name == "route":
                continue  # no gate: the route's own store counts
            gate = bench.daemon.router.gate
            assert gate is not None, "admission is on"
            assert gate.use_now(), "admission counted"
    for name, values in per_batch.items():
        median = statistics.median(values)
        more = ""
        if name in added:
            q = statistics.quantiles(added[name], n=4)
            more = f"   added {statistics.median(added[name]):+5.1f} µs (quartiles {q[0]:+.1f} .. {q[2]:+.1f})"
        print(f"{name:8s} submit+end {median:6.1f} µs/request{more}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--count", type=int, default=20000, help="requests per variant and repeat")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    trio.run(main, a.count, a.repeats)
