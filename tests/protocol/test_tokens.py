"""The token estimate: bounded work however long the input, and close to a full count."""

from __future__ import annotations

import random
import string

import pytest

from trunkline.protocol import tokens
from trunkline.protocol.messages import Message, Request, TextPart


def prose(n: int, seed: int = 3) -> str:
    rng = random.Random(seed)
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    return " ".join(rng.choice(words) for _ in range(n // 7))[:n]


def full_count(texts: list[str]) -> int:
    return sum(tokens._scan(t) for t in texts)


@pytest.mark.parametrize(
    "text",
    [
        prose(400_000),
        ("def f(x):\n    return {'k': [x, 1, 2]}  # comment\n" * 8000),
        ("東京は日本の首都です。" * 30_000),
        " a" * 200_000,
    ],
)
def test_a_long_text_is_estimated_from_windows_within_a_few_percent(text):
    estimate = tokens.estimate_text_tokens(text)
    exact = full_count([text])
    assert abs(estimate - exact) / exact < 0.03, (estimate, exact)


def test_many_short_texts_are_weighed_by_their_length():
    parts = [TextPart(text=w) for w in prose(200_000).split(" ")] + [TextPart(text=prose(100_000, seed=9))]
    request = Request(model="m", messages=[Message(role="user", content=parts)])
    exact = full_count([p.text for p in parts]) + tokens.PER_MESSAGE
    assert abs(tokens.estimate_request_tokens(request) - exact) / exact < 0.03


def test_short_inputs_are_counted_in_full(monkeypatch):
    request = Request(model="m", messages=[Message.user(prose(tokens.SCAN_CHARS - 10))])
    assert tokens.estimate_request_tokens(request) == full_count([request.messages[0].text]) + tokens.PER_MESSAGE


def test_no_more_than_the_scan_budget_is_split_into_pieces(monkeypatch):
    scanned: list[int] = []
    real = tokens._scan

    def counting(text: str, chars_per_token: float = 5.0) -> int:
        scanned.append(len(text))
        return real(text, chars_per_token)

    monkeypatch.setattr(tokens, "_scan", counting)
    for text in (prose(5_000_000), "x" * 5_000_000, " a" * 2_500_000):
        scanned.clear()
        tokens.estimate_text_tokens(text)
        assert sum(scanned) <= tokens.SCAN_CHARS
