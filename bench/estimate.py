"""How long one submit at the message size limit holds the supervisor's event loop.

    .venv/bin/python -m bench.estimate [--bytes 16777216] [--repeats 3]

The supervisor decodes, validates (the token estimate included, when the cheap
bound says the prompt may not fit) and records a submit on its event loop, so
for that time no other client or stream is served. This builds, for several
shapes of content, a submit just under the limit and times each step in this
process (the smallest of `--repeats` runs): decode, validation of which the
token estimate is part (also what a worker spends on `count_tokens`), and the
encoding of the job for the worker. The estimate's budget is 10 ms; the ratio
column is its stall over it. The other columns show what else a submit of that
size costs the loop (a worker spends about the decode again, and as much to
encode the provider's JSON body).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import random
import string
import time
from collections.abc import Callable
from typing import Any

from trunkline.protocol import codec
from trunkline.protocol.messages import ImagePart, Job, Message, ModelInfo, Request, Submit, TextPart, Tool
from trunkline.protocol.tokens import estimate_request_tokens
from trunkline.supervisor.validate import Invalid, validate

BUDGET_MS = 10.0
#: A small context window, so the estimate runs (a prompt that may fit is never estimated).
MODEL = ModelInfo(id="mock:basic", provider="mock", wire_name="basic", context_window=8192, vision=True)


def _prose(n: int, rng: random.Random) -> str:
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 12))) for _ in range(5000)]
    out, size = [], 0
    while size < n:
        w = rng.choice(words) + rng.choice("     ,.\n")
        out.append(w)
        size += len(w)
    return "".join(out)[:n]


def shapes(size: int) -> dict[str, Request]:
    """Requests whose encoded submit is just under `size` bytes."""
    rng = random.Random(7)
    text = size - 4096  # room for the envelope
    code = ("def f(x):\n    return {'k': [x, 1, 2]}  # comment\n" * (text // 48 + 1))[:text]
    cjk = ("東京は日本の首都です。" * (text // 33 + 1))[: text // 3]
    raw = rng.randbytes(text * 3 // 4 - 64)
    tiny = text // 20
    return {
        "prose, one part": Request(model="mock:basic", messages=[Message.user(_prose(text, rng))]),
        "' a' repeated (most pieces)": Request(model="mock:basic", messages=[Message.user(" a" * (text // 2))]),
        "code": Request(model="mock:basic", messages=[Message.user(code)]),
        "CJK (3 bytes a character)": Request(model="mock:basic", messages=[Message.user(cjk)]),
        "base64 image": Request(
            model="mock:basic",
            messages=[
                Message.user("what is this?", ImagePart(data=base64.b64encode(raw).decode(), media_type="image/png"))
            ],
        ),
        "tiny text parts": Request(
            model="mock:basic", messages=[Message.user(*[TextPart(text="ab") for _ in range(tiny)])]
        ),
        "tool schema, many keys": Request(
            model="mock:basic",
            messages=[Message.user("x")],
            tools=[
                Tool(
                    name="t",
                    parameters={"type": "object", "properties": {f"k{i}": [i, "ab"] for i in range(text // 24)}},
                )
            ],
        ),
    }


def best_ms(fn: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def validate_quietly(request: Request) -> None:
    # A prompt over the window is refused: that is the point of the estimate.
    with contextlib.suppress(Invalid):
        validate(request, MODEL, stream=True, provider_type="mock")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.estimate", description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=16 * 1024 * 1024, help="the message size limit")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"submit just under {args.bytes} bytes; milliseconds on this machine (best of {args.repeats}); "
        f"budget {BUDGET_MS:g} ms"
    )
    print(
        f"{'content':30} {'bytes':>10} {'decode':>8} {'validate':>9} {'estimate':>9} {'x budget':>9} {'job encode':>11}"
    )
    worst = 0.0
    for name, request in shapes(args.bytes).items():
        data = codec.encode(Submit(request_id="r", client_id="c", request=request))
        assert len(data) <= args.bytes, (name, len(data))
        decoded = codec.decode_control_request(data).request
        decode = best_ms(lambda: codec.decode_control_request(data), args.repeats)
        check = best_ms(lambda: validate_quietly(decoded), args.repeats)
        estimate = best_ms(lambda: estimate_request_tokens(decoded), args.repeats)
        job = Job(request_id="r", client_id="c", request=decoded, model=MODEL, operation_id="r")
        encode = best_ms(lambda: codec.encode(job), args.repeats)
        worst = max(worst, estimate)
        print(
            f"{name:30} {len(data):>10} {decode:>8.1f} {check:>9.1f} {estimate:>9.1f} "
            f"{estimate / BUDGET_MS:>9.2f} {encode:>11.1f}"
        )
    print(f"longest token estimate: {worst:.1f} ms ({worst / BUDGET_MS:.2f} of the budget)")


if __name__ == "__main__":
    main()
