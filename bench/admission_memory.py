"""What admission in memory (client keys, limits, budgets) adds to a request's own work
in the supervisor, measured as `own_work` measures it: a real `Daemon` without sockets,
one `submit` as the control socket hands it over (bytes in, `accepted` out), then the
link messages of its whole answer down to its end (where admission settles).

    .venv/bin/python -m bench.admission_memory [--count 20000] [--repeats 9]

Three daemons, measured in turn within each repeat (so the machine's drift hits all
alike), medians over the repeats:

* none: the embedded default, no `clients:` and no provider limits (no admission at all);
* key: the connection's hello gives a named client key with rpm, parallel and a daily and
  monthly budget, and its provider has an rpm of its own (two scopes counted);
* key+tpm: the same with a tpm limit on the key, so each request's tokens are estimated.

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
}


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
        self.request = build_request(MODEL, "hi")

    def run(self, repeat: int, count: int) -> float:
        """CPU µs per request: its submit and its end."""
        router, slot = self.daemon.router, self.slot
        ids = [f"{self.name}_{repeat:02d}{i:024d}" for i in range(count)]
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
        spent = 0
        for at in range(0, count, BATCH):
            t0 = time.process_time_ns()
            for data in submits[at : at + BATCH]:
                reply = router.on_request(data, b"h", 1)
                if reply is None or b"accepted" not in reply[:20]:
                    raise RuntimeError(f"{self.name}: submit refused: {reply!r}")
            for data in links[3 * at : 3 * (at + BATCH)]:
                slot._on_message(data)
            spent += time.process_time_ns() - t0
        assert not self.daemon.requests.active, "every request ended"
        return spent / count / 1000


async def main(count: int, repeats: int) -> None:
    logging.basicConfig(level="INFO", stream=open(os.devnull, "w"))  # noqa: SIM115 - for the process's life
    os.environ[KEY_VARIABLE] = KEY
    with tempfile.TemporaryDirectory(prefix="tl-adm-") as tmp:
        benches = [Bench(name, extra, Path(tmp)) for name, extra in VARIANTS.items()]
        for bench in benches:
            bench.run(99, BATCH)  # warm up
        samples: dict[str, list[float]] = {bench.name: [] for bench in benches}
        for r in range(repeats):
            for bench in benches if r % 2 == 0 else reversed(benches):
                samples[bench.name].append(bench.run(r, count))
        for bench in benches[1:]:
            gate = bench.daemon.router.gate
            assert gate is not None, "admission is on"
            assert gate.use_now(), "admission counted"
    base = statistics.median(samples["none"])
    for name, values in samples.items():
        median = statistics.median(values)
        added = "" if name == "none" else f"   added {median - base:+5.1f} µs"
        print(f"{name:8s} submit+end {median:6.1f} µs/request ({min(values):.1f}-{max(values):.1f}){added}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--count", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=9)
    a = p.parse_args()
    trio.run(main, a.count, a.repeats)
