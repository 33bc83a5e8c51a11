"""Opt-in timestamps of each request's path through the daemon, for `bench/`.

With `TRUNKLINE_TRACE_HOPS=1` in the daemon's environment (its workers inherit
it), the supervisor and the worker each publish one extra `bus` event per
request when it ends, `trace.supervisor` and `trace.worker`, whose `detail` is a
JSON object of CLOCK_MONOTONIC nanoseconds (the clock every process on the
machine shares). Off by default: nothing is stamped and nothing extra is sent.
"""

from __future__ import annotations

import json
import os
import time

ENABLED = os.environ.get("TRUNKLINE_TRACE_HOPS") == "1"
now_ns = time.monotonic_ns


def detail(stamps: dict[str, int]) -> str:
    return json.dumps(stamps, separators=(",", ":"))
