"""`Usage`: which figures are estimates, kept through sums and the wire."""

from __future__ import annotations

from trunkline.protocol.codec import decode_event, encode
from trunkline.protocol.messages import Finish, Response, Usage


def test_marking_names_each_figure_once_and_sets_the_flag():
    u = Usage(input_tokens=5).mark_estimated("reasoning_tokens", "reasoning_tokens")
    assert u.estimated and u.estimated_fields == ["reasoning_tokens"]
    assert Usage().mark_estimated() == Usage()


def test_a_sum_keeps_every_estimated_figure():
    a = Usage(input_tokens=1).mark_estimated("reasoning_tokens")
    b = Usage(input_tokens=2).mark_estimated("input_tokens", "reasoning_tokens")
    total = a + b + Usage(output_tokens=3)
    assert total.input_tokens == 3 and total.estimated
    assert total.estimated_fields == ["reasoning_tokens", "input_tokens"]
    assert not (Usage() + Usage()).estimated


def test_the_fields_travel_and_older_peers_read_no_field_as_none_estimated():
    u = Usage(input_tokens=4, output_tokens=2, total_tokens=6).mark_estimated("output_tokens", "total_tokens")
    back = decode_event(encode(Finish(response=Response(usage=u))))
    assert back.response.usage.estimated_fields == ["output_tokens", "total_tokens"]
    assert decode_event(encode(Finish(response=Response()))).response.usage.estimated_fields == []
