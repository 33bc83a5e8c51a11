"""The bounded body decoder: inflates a bounded piece at a time, counts what it
produces, stops at the limit, and turns every broken body into a typed error."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.workers._body import PIECE, BodyDecoder
from trunkline.workers.errors import ProviderError


def run(decoder: BodyDecoder, chunks: list[bytes]) -> bytes:
    out = []
    for c in chunks:
        out += decoder.feed(c)
        decoder.check()
    out += decoder.flush()
    return b"".join(out)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def test_a_gzip_bomb_never_inflates_past_the_limit_in_one_step():
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 MiB in about 64 KiB
    decoder = BodyDecoder("gzip", 1 << 20)
    pieces = decoder.feed(bomb[:32768])
    assert all(len(p) <= PIECE for p in pieces)
    assert sum(map(len, pieces)) == 1 << 20  # what fits is handed on...
    with pytest.raises(ProviderError) as caught:
        decoder.check()  # ...and then the body is refused
    assert caught.value.error_class == "invalid_response" and "max_response_bytes" in caught.value.message
    with pytest.raises(ProviderError):
        decoder.feed(bomb[32768:])


def test_a_plain_body_is_counted_too():
    decoder = BodyDecoder(None, 10)
    assert decoder.feed(b"12345678") == [b"12345678"]
    assert decoder.feed(b"9abc") == [b"9a"] and decoder.over
    with pytest.raises(ProviderError):
        decoder.check()


def test_garbage_that_claims_to_be_gzip_is_an_invalid_response():
    decoder = BodyDecoder("gzip", 1 << 20)
    with pytest.raises(ProviderError) as caught:
        run(decoder, [b"\x1f\x8b\x08\x00" + b"not really gzip at all" * 10])
    assert caught.value.error_class == "invalid_response" and "decompressed" in caught.value.message


def test_an_encoding_we_did_not_ask_for_is_an_invalid_response():
    with pytest.raises(ProviderError) as caught:
        BodyDecoder("br", 100)
    assert caught.value.error_class == "invalid_response" and "'br'" in caught.value.message


@pytest.mark.parametrize("wbits", [zlib.MAX_WBITS, -zlib.MAX_WBITS])
def test_deflate_wrapped_or_raw(wbits):
    packer = zlib.compressobj(wbits=wbits)
    body = packer.compress(b"hello deflate " * 100) + packer.flush()
    assert run(BodyDecoder("deflate", 1 << 20), [body[:5], body[5:]]) == b"hello deflate " * 100


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.lists(st.integers(0, 3000), max_size=8), st.sampled_from(["gzip", None]))
def test_any_chunking_gives_the_same_body(data, cuts, encoding):
    body = gzip.compress(data) if encoding else data
    assert run(BodyDecoder(encoding, 1 << 20), split(body, cuts)) == data


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=2000),
    st.lists(st.integers(0, 2000), max_size=6),
    st.sampled_from(["gzip", "deflate", None]),
    st.integers(1, 4000),
)
def test_any_bytes_give_a_body_within_the_limit_or_a_typed_error(data, cuts, encoding, limit):
    decoder = BodyDecoder(encoding, limit)
    try:
        out = run(decoder, split(data, cuts))
    except ProviderError as exc:  # one of the two outcomes the property allows
        assert exc.error_class == "invalid_response"  # noqa: PT017 - typed, whatever the bytes
    else:
        assert len(out) <= limit
