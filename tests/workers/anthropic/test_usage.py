"""Anthropic usage -> canonical usage: compaction steps billed, estimates named."""

from __future__ import annotations

from trunkline.workers.anthropic.response import usage

#: The usage of the recorded compaction (`test_anthropic_compaction_usage_with_cache_streaming`).
COMPACTED = {
    "input_tokens": 181,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "output_tokens": 8,
    "iterations": [
        {
            "type": "compaction",
            "input_tokens": 100,
            "output_tokens": 83,
            "cache_read_input_tokens": 55096,
            "cache_creation_input_tokens": 0,
        },
        {
            "type": "message",
            "input_tokens": 181,
            "output_tokens": 8,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        },
    ],
}


def test_compaction_steps_are_billed_with_the_message():
    u = usage(COMPACTED)
    # 100 + 55,096 cached + 181 in, 83 + 8 out: not the top level's 181 / 8
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) == (55377, 55096, 0)
    assert (u.output_tokens, u.total_tokens) == (91, 55468)
    assert not u.estimated and u.estimated_fields == []


def test_without_iterations_the_top_level_is_the_bill():
    u = usage({"input_tokens": 10, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 2, "output_tokens": 3})
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens) == (17, 5, 2, 3)


def test_iterations_without_the_message_step_keep_the_top_level():
    only_compaction = dict(COMPACTED, iterations=COMPACTED["iterations"][:1])
    u = usage(only_compaction)
    assert (u.input_tokens, u.output_tokens) == (100 + 55096 + 181, 83 + 8)


def test_only_the_estimated_figure_is_named():
    u = usage({"input_tokens": 10, "output_tokens": 90}, "Let me think about the weather in Paris.")
    assert u.estimated and u.estimated_fields == ["reasoning_tokens"] and 0 < u.reasoning_tokens <= 90
    reported = usage(
        {"input_tokens": 10, "output_tokens": 90, "output_tokens_details": {"thinking_tokens": 64}}, "some thinking"
    )
    assert not reported.estimated and reported.estimated_fields == []
