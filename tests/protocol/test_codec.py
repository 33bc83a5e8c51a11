"""The wire protocol: every message round-trips, the schema file is current, bad bytes fail cleanly."""

from __future__ import annotations

import contextlib
import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.protocol import codec, schema
from trunkline.protocol import messages as m
from trunkline.protocol.codec import DecodeError

REQUEST = m.Request(
    model="anthropic:claude-sonnet-4-5",
    messages=[
        m.Message.system("Be brief."),
        m.Message.user(
            "Look:",
            m.ImagePart(data="aGk=", media_type="image/png", detail="low"),
            m.DocumentPart(path="/tmp/a.pdf", media_type="application/pdf"),
            m.AudioPart(url="https://x/a.wav"),
        ),
        m.Message(
            role="assistant",
            content=[
                m.ThinkingPart(text="hmm", signature="sig", provider="anthropic"),
                m.RedactedThinkingPart(data="opaque", provider="anthropic"),
                m.ProviderPart(
                    api="anthropic",
                    kind="server_tool_use",
                    data={"id": "srvtoolu_1", "input": {}},
                    model="claude-opus-5-5",
                    provider="anthropic",
                ),
                m.TextPart(text="calling"),
                m.ToolCallPart(
                    id="tu_01", name="f", arguments={"a": [1, {"b": None}]}, provider_id="toolu_1", provider="anthropic"
                ),
            ],
        ),
        m.Message.tool_result("tu_01", [m.TextPart(text="ok")], is_error=True, name="f"),
    ],
    tools=[m.Tool(name="f", description="does f", parameters={"type": "object", "properties": {"a": {}}})],
    tool_choice=m.ToolChoice(mode="tool", name="f"),
    response_format=m.ResponseFormat(kind="json_schema", schema={"type": "object"}, name="out"),
    temperature=0.2,
    top_p=0.9,
    max_tokens=100,
    stop_sequences=["END"],
    seed=7,
    reasoning_effort="low",
    metadata={"user": "u1"},
    provider_options={"anthropic": {"beta_headers": ["x"]}},
    session_id="s1",
    max_retries=1,
    timeouts=m.Timeouts(request_s=5),
    include_raw=True,
    passthrough=True,
)
RESPONSE = m.Response(
    id="msg_1",
    model="claude",
    provider="anthropic",
    message=m.Message.assistant("hi"),
    finish_reason=m.FinishReason(reason="stop", raw="end_turn"),
    usage=m.Usage(input_tokens=10, output_tokens=5, total_tokens=15, cache_read_tokens=3),
    cost_usd=0.001,
    pricing_version="v1",
    latency_ms=12.5,
    warnings=[m.WarningInfo(code="dropped", message="thinking dropped")],
    rate_limit=m.RateLimit(requests_remaining=5),
    raw={"any": ["json"]},
)
ERROR = m.ErrorInfo(
    error_class="rate_limit",
    message="slow down",
    retryable=True,
    retry_after_s=2.5,
    provider="anthropic",
    provider_status=429,
    provider_code="rate_limit_error",
)
MODEL = m.ModelInfo(
    id="mock:echo", provider="mock", wire_name="echo", aliases=["echo"], price=m.Price(input=1.0, output=2.0)
)

SAMPLES: list[m.Msg] = [
    m.Hello(client_name="t", token="secret", watch_bus=False),
    m.Probe(client_id="c1"),
    m.Submit(request_id="r", client_id="c", request=REQUEST, stream=False, operation_id="op"),
    m.Cancel(request_id="r"),
    m.Replay(request_id="r", from_seq=3),
    m.ListModels(provider="mock"),
    m.StatusQuery(),
    m.Ready(model="echo", provider="mock"),
    m.CountTokens(request=REQUEST),
    m.Goodbye(client_id="c"),
    m.WatchBus(client_id="c", watch=False),
    m.Reload(),
    m.Welcome(
        client_id="c",
        server_version="1",
        event_endpoint="ipc:///x",
        limits=m.Limits(max_message_bytes=1, replay_ring_events=2, replay_keep_s=3.0),
        providers=["mock"],
    ),
    m.ProbeSent(),
    m.Accepted(request_id="r", provider="mock", model="mock:echo", duplicate=True),
    m.Rejected(request_id="r", error=ERROR),
    m.CancelResult(request_id="r", cancelled=True),
    m.ReplayResult(
        request_id="r",
        events=[msgspec.Raw(codec.encode(m.TextDelta(text="x")))],
        first_seq=1,
        last_seq=4,
        state="running",
    ),
    m.Models(models=[MODEL]),
    m.StatusReport(
        server_version="1",
        pid=1,
        uptime_s=2.0,
        in_flight=1,
        workers=[
            m.WorkerStatus(
                provider="mock",
                provider_type="mock",
                state="running",
                pid=2,
                restarts=1,
                in_flight=1,
                last_error="x",
                last_heartbeat_s=0.1,
            )
        ],
    ),
    m.ReadyResult(ok=False, model="m", error=ERROR),
    m.TokenCount(input_tokens=5, exact=True),
    m.GoodbyeAck(cancelled=2),
    m.WatchBusAck(watch=False),
    m.ProtocolError(error=ERROR),
    m.ReloadResult(
        ok=False, error=ERROR, pricing_version="2026-11-20", config_path="/c.yaml", restart_needed=["providers.vllm"]
    ),
    m.StreamStart(request_id="r", seq=0, model="x", provider="p", warnings=[m.WarningInfo(code="a", message="b")]),
    m.TextStart(request_id="r", seq=1, index=0),
    m.TextDelta(request_id="r", seq=2, index=0, text="hé"),
    m.TextEnd(request_id="r", seq=3, index=0, text="hé"),
    m.ReasoningStart(request_id="r", seq=4, index=1),
    m.ReasoningDelta(request_id="r", seq=5, index=1, text="t"),
    m.ReasoningEnd(request_id="r", seq=6, index=1, text="t", signature="s", redacted_data=None),
    m.ToolCallStart(request_id="r", seq=7, index=2, id="tu_1", name="f", provider_id="call_1"),
    m.ToolCallDelta(request_id="r", seq=8, index=2, id="tu_1", partial_json='{"a'),
    m.ToolCallEnd(request_id="r", seq=9, index=2, id="tu_1", name="f", arguments={"a": 1}, raw_arguments='{"a":1}'),
    m.ProviderEvent(request_id="r", seq=10, provider="p", event_type="ping", data={"x": 1}),
    m.ProviderPartEvent(
        request_id="r",
        seq=10,
        index=3,
        api="anthropic",
        kind="web_search_tool_result",
        data={"content": []},
        model=None,
    ),
    m.Finish(request_id="r", seq=11, response=RESPONSE),
    m.ErrorEvent(request_id="r", seq=11, error=ERROR, partial=RESPONSE),
    m.ProbeEvent(client_id="c"),
    m.BusEvent(name="llm.call_started", provider="p", attempt=1, usage=m.Usage()),
    m.Job(
        request_id="r",
        client_id="c",
        request=REQUEST,
        model=MODEL,
        operation_id="op",
        generation=3,
        retry={"max_retries": 0},
        timeouts={"request_s": 5.0},
        key_index=1,
    ),
    m.StopJob(request_id="r"),
    m.CheckReady(call_id=1, model=MODEL),
    m.EstimateTokens(call_id=2, request=REQUEST, model=MODEL),
    m.Shutdown(grace_s=1.0),
    m.CallEvents(send=False),
    m.WorkerUp(provider="p", pid=1, generation=2),
    m.Heartbeat(in_flight=3),
    m.Relay(request_id="r", frames=[b"c\x00abc"], last_seq=4, terminal=True),
    m.RelayBatch(
        relays=[
            m.Relay(request_id="r", frames=[b"c\x00a"], last_seq=0),
            m.Relay(request_id="q", frames=[b"d\x00b", b"d\x00c"], last_seq=7, terminal=True),
        ]
    ),
    m.CallResult(call_id=1, ok=False, error=ERROR, input_tokens=4),
    m.Progress(request_id="r", content=[m.TextPart(text="so far")], model="m"),
    m.KeyFailed(key_index=1, error_class="rate_limit", retry_after_s=30.0),
    *list(REQUEST.messages[1].content + REQUEST.messages[2].content + REQUEST.messages[3].content),
]


ABSTRACT = {m.Event}  # bases of tagged families, never on the wire themselves


def _tagged(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        if sub not in ABSTRACT:
            out.append(sub)
        out += _tagged(sub)
    return out


def test_samples_cover_every_tagged_message():
    missing = {c.__name__ for c in _tagged(m.Msg)} - {type(s).__name__ for s in SAMPLES}
    assert not missing, missing


@pytest.mark.parametrize(
    "family", [m.ControlRequest, m.ControlReply, m.AnyEvent, m.ToWorker, m.FromWorker, m.ContentPart]
)
def test_tags_are_unique_snake_case_within_each_family(family):
    tags = [c.__struct_config__.tag for c in family.__args__]
    assert len(tags) == len(set(tags))
    assert all(t == t.lower() and " " not in t for t in tags)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: type(s).__name__)
def test_round_trip(sample: m.Msg):
    data = codec.encode(sample)
    family = (
        codec.decode_control_request
        if isinstance(sample, m.ControlRequest)
        else codec.decode_control_reply
        if isinstance(sample, m.ControlReply)
        else codec.decode_event
        if isinstance(sample, m.AnyEvent)
        else codec.decode_to_worker
        if isinstance(sample, m.ToWorker)
        else codec.decode_from_worker
        if isinstance(sample, m.FromWorker)
        else (lambda b: msgspec.msgpack.decode(b, type=m.ContentPart))
    )
    decoded = family(data)
    if isinstance(sample, m.ReplayResult):
        assert [bytes(e) for e in decoded.events] == [bytes(e) for e in sample.events]
        decoded.events = sample.events
    assert decoded == sample
    # another language sees a plain map with a `type` key
    plain = msgspec.msgpack.decode(data)
    assert plain["type"] == sample.__struct_config__.tag


def test_defaults_are_omitted_on_the_wire():
    plain = msgspec.msgpack.decode(codec.encode(m.TextDelta(request_id="r", seq=0, index=0, text="x")))
    assert plain == {"type": "text_delta", "request_id": "r", "text": "x"}


def test_unknown_fields_are_skipped():
    data = msgspec.msgpack.encode({"type": "cancel", "request_id": "r", "from_the_future": {"x": 1}})
    assert codec.decode_control_request(data) == m.Cancel(request_id="r")


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\xc1", "malformed"),
        (msgspec.msgpack.encode({"type": "nope"}), "Invalid value 'nope'"),
        (msgspec.msgpack.encode({"type": "submit"}), "missing required field"),
        (msgspec.msgpack.encode({"request_id": "r"}), "missing required field `type`"),
    ],
)
def test_bad_bytes_raise_decode_error(data: bytes, words: str):
    with pytest.raises(DecodeError, match=words):
        codec.decode_control_request(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_decode_error(data: bytes):
    for decode in (
        codec.decode_control_request,
        codec.decode_control_reply,
        codec.decode_event,
        codec.decode_to_worker,
        codec.decode_from_worker,
    ):
        with contextlib.suppress(DecodeError):
            decode(data)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=10,
    )
)
def test_arbitrary_msgpack_values_never_raise_anything_but_decode_error(value):
    data = msgspec.msgpack.encode(value)
    with contextlib.suppress(DecodeError):
        codec.decode_control_request(data)


def test_event_framing():
    frame = codec.frame_event("c42", m.TextDelta(request_id="r", text="x"))
    assert frame.startswith(b"c42\x00")
    topic, body = codec.split_frame(frame)
    assert topic == "c42" and codec.decode_event(body) == m.TextDelta(request_id="r", text="x")
    assert not codec.frame_event("c1", m.ProbeEvent()).startswith(codec.topic_prefix("c12"))
    with pytest.raises(DecodeError):
        codec.split_frame(b"no separator")


def test_schema_file_is_current():
    committed = schema.SCHEMA_PATH.read_text()
    assert committed == schema.render(), "protocol/schema.json is stale: run `make schema`"


def test_protocol_md_reference_is_current():
    from trunkline.protocol import reference

    text = reference.protocol_md().read_text()
    assert reference.splice(text) == text, "PROTOCOL.md's message reference is stale: run `make schema`"


def test_schema_names_every_client_message():
    doc = json.loads(schema.render())
    names = set(doc["$defs"])
    for name in ("Submit", "Welcome", "TextDelta", "Finish", "ErrorEvent", "Request", "Response", "Usage"):
        assert name in names
    # the internal link is not part of the client protocol
    assert "Job" not in names and "Relay" not in names


def test_usage_adds_up():
    a = m.Usage(input_tokens=1, output_tokens=2, total_tokens=3, reasoning_tokens=1, cache_read_tokens=1)
    b = m.Usage(input_tokens=10, output_tokens=20, total_tokens=30, cache_write_tokens=5, estimated=True)
    assert a + b == m.Usage(
        input_tokens=11,
        output_tokens=22,
        total_tokens=33,
        reasoning_tokens=1,
        cache_read_tokens=1,
        cache_write_tokens=5,
        estimated=True,
    )


@given(st.lists(st.text(max_size=40) | st.integers(1, 70).map(lambda k: "w" * (k * 1000)), min_size=1, max_size=600))
@settings(max_examples=50, deadline=None)
def test_batched_event_messages_carry_every_event_in_order(texts):
    frames = [codec.frame_event("c7", m.TextDelta(request_id="r", seq=i, text=t)) for i, t in enumerate(texts)]
    messages = codec.batch_frames(frames)
    for message in messages:
        body = codec.split_frame(message)[1]
        assert len(body) <= codec.BATCH_BYTES + 16 or len(codec.decode_events(body)) == 1
        assert len(codec.decode_events(body)) <= codec.BATCH_EVENTS
    events = []
    for message in messages:
        topic, body = codec.split_frame(message)
        assert topic == "c7"
        events += codec.decode_events(body)
    assert [(e.seq, e.text) for e in events] == list(enumerate(texts))


def _submit_with_options(value_bytes: bytes) -> bytes:
    """A submit whose provider_options.mock.x is the raw msgpack `value_bytes`."""
    head = codec.encode(
        {
            "type": "submit",
            "request_id": "r",
            "client_id": "c",
            "request": {
                "model": "mock:echo",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
                "provider_options": {"mock": {"x": 0}},
            },
        }
    )
    assert head.endswith(b"\xa1x\x00")
    return head[:-1] + value_bytes


@pytest.mark.parametrize("depth", [64, 70, 980, 5000, 1_000_000])
def test_over_deep_free_form_json_is_a_decode_error(depth: int):
    with pytest.raises(DecodeError, match="nested") as info:
        codec.decode_control_request(_submit_with_options(b"\x91" * depth + b"\x01"))
    assert "64 levels" in str(info.value)


def test_free_form_json_within_the_nesting_limit_decodes():
    # provider_options.mock is level 1, the list in its `x` level 2: 63 lists reach level 64.
    msg = codec.decode_control_request(_submit_with_options(b"\x91" * 63 + b"\x01"))
    assert type(msg) is m.Submit
    deep = msg.request.provider_options["mock"]["x"]
    assert codec.encode(
        m.Job(
            request_id="r",
            client_id="c",
            request=msg.request,
            operation_id="r",
            model=m.ModelInfo(id="a", provider="mock", wire_name="a"),
        )
    )
    assert deep[0][0][0] is not None


def test_invalid_utf8_is_a_decode_error():
    with pytest.raises(DecodeError, match="not valid UTF-8"):
        codec.decode_control_request(b"\x82\xa4type\xa5hello\xabclient_name\xa2\xff\xfe")


def test_a_problem_in_a_huge_value_names_the_field_and_costs_no_walk_in_python():
    from trunkline.protocol.limits import LOCATE_LIMIT, json_problem

    huge = {"properties": {f"k{i}": [i, "x"] for i in range(LOCATE_LIMIT)}}
    assert json_problem(huge, "tools[0].parameters", numbers=True) is None
    huge["properties"]["k9"].append(float("nan"))
    assert json_problem(huge, "tools[0].parameters", numbers=True) == (
        "tools[0].parameters: holds a number that is not finite (NaN or infinity)"
    )
    small = {"a": [1, {"b": float("-inf")}]}
    assert json_problem(small, "f", numbers=True) == "f.a[1].b: -inf is not a finite number"
    assert json_problem(small, "f", numbers=False) is None


_ANY_MSGPACK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=6)
    | st.binary(max_size=6)
    | st.datetimes(timezones=st.just(__import__("datetime").timezone.utc))
    | st.builds(msgspec.msgpack.Ext, st.integers(0, 127), st.binary(max_size=9)),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4) | st.integers(0, 9) | st.binary(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(_ANY_MSGPACK, st.sampled_from(["options", "parameters", "schema", "arguments", "data"]))
def test_a_request_decodes_only_with_free_form_values_json_can_hold(value, field: str):
    """Whatever msgpack sits in a free-form field, the request decodes only when every
    free-form value is JSON (so the supervisor, the worker and the provider body all
    encode it), and is otherwise a DecodeError naming the field."""
    request = {"model": "mock:echo", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}
    if field == "options":
        request["provider_options"] = {"mock": {"v": value}}
    elif field == "parameters":
        request["tools"] = [{"name": "t", "parameters": {"v": value}}]
    elif field == "schema":
        request["response_format"] = {"kind": "json_schema", "schema": {"v": value}}
    elif field == "arguments":
        request["messages"].append(
            {
                "role": "assistant",
                "content": [{"type": "tool_call", "id": "tu_1", "name": "t", "arguments": {"v": value}}],
            }
        )
    else:
        request["messages"].append(
            {"role": "assistant", "content": [{"type": "provider_part", "api": "x", "kind": "y", "data": value}]}
        )
    data = msgspec.msgpack.encode({"type": "count_tokens", "request": request})
    try:
        msg = codec.decode_control_request(data)
    except DecodeError as exc:  # one of the two outcomes the property allows
        assert "request." in str(exc)  # noqa: PT017 - the error names the field
        return

    def plain(v) -> bool:
        if type(v) is dict:
            return all(type(k) is str and plain(x) for k, x in v.items())
        if type(v) is list:
            return all(map(plain, v))
        return type(v) in (str, int, float, bool, type(None))

    free = [*msg.request.provider_options.values(), *(t.parameters for t in msg.request.tools)]
    if msg.request.response_format is not None:
        free.append(msg.request.response_format.schema)
    for message in msg.request.messages:
        free += [getattr(p, "arguments", None) or getattr(p, "data", None) for p in message.content]
    assert all(map(plain, free))
