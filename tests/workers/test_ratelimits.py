"""Rate-limit headers read in one pass (`_ratelimits.named`): the same values as
`httpx.Headers.get` gives for each name, whatever the case, order or repeats."""

from __future__ import annotations

import httpx
from hypothesis import given
from hypothesis import strategies as st

from trunkline.workers._ratelimits import named, openai_rate_limit

NAMES = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-tokens",
    "retry-after",
    "retry-after-ms",
    "anthropic-ratelimit-tokens-reset",
    "content-type",
    "x-request-id",
    "set-cookie",
]

headers_lists = st.lists(
    st.tuples(
        st.sampled_from(NAMES).flatmap(lambda n: st.sampled_from([n, n.upper(), n.title()])),
        st.text(alphabet="0123456789abcdefms.:, ", max_size=12),
    ),
    max_size=12,
)


@given(headers_lists, st.sampled_from(["x-ratelimit-", "anthropic-ratelimit-"]))
def test_named_gives_what_headers_get_gives_for_every_name_it_keeps(pairs, prefix):
    headers = httpx.Headers(pairs)
    found = named(headers, prefix)
    expected = {k: headers.get(k) for k in {n.lower() for n, _ in pairs} if k.startswith((prefix, "retry-after"))}
    assert found == expected


def test_an_openai_response_of_many_headers_gives_its_limits():
    headers = httpx.Headers(
        {
            "Date": "Thu, 26 Nov 2026 10:00:00 GMT",
            "Content-Type": "text/event-stream",
            "openai-processing-ms": "312",
            "X-RateLimit-Limit-Requests": "10000",
            "x-ratelimit-remaining-requests": "9999",
            "x-ratelimit-reset-requests": "6ms",
            "x-ratelimit-limit-tokens": "30000000",
            "x-ratelimit-remaining-tokens": "29999986",
            "x-ratelimit-reset-tokens": "1m30s",
            "cf-ray": "abc-SJC",
        }
    )
    limit = openai_rate_limit(headers)
    assert limit is not None
    assert (limit.requests_limit, limit.requests_remaining, limit.tokens_limit, limit.tokens_remaining) == (
        10000,
        9999,
        30000000,
        29999986,
    )
    assert limit.requests_reset_s == 0.006 and limit.tokens_reset_s == 90.0 and limit.retry_after_s is None


def test_a_response_without_limits_has_none_and_a_retry_after_alone_is_kept():
    assert openai_rate_limit(httpx.Headers({"content-type": "application/json", "x-request-id": "r"})) is None
    limit = openai_rate_limit(httpx.Headers({"Retry-After": "7"}))
    assert limit is not None and limit.retry_after_s == 7.0 and limit.requests_limit is None
