/* trunkline.h: a small C client for the trunkline daemon (PROTOCOL.md).
 *
 * Built on libnng (Req0 for control calls, Sub0 for events) and msgpack-c. It
 * implements the client state machine of PROTOCOL.md §4: each request is
 * tracked from before its submit is sent, events are delivered in seq order
 * exactly once, a gap or a silence is recovered by replay (in batches, until
 * last_seq), a request the daemon no longer knows ends with a retryable
 * `unavailable` error, and the terminal event (finish or error) is last.
 *
 * Endpoints: ipc://, tcp:// and tls+tcp:// (libnng's TLS: the daemon's certificate is
 * always verified against tls_ca_file, for tls_server_name or the endpoint's host). A
 * tl_client is not thread-safe:
 * use it from one thread. Events are read from the event socket only
 * while you call tl_next_event() (or tl_connect/tl_submit while probing). Call
 * it often enough, or lose events to the Sub0 queue: the library then gets
 * them back by replay.
 *
 *   tl_client *c; tl_error err;
 *   tl_options opt = tl_default_options();
 *   opt.control = "ipc:///run/user/1000/trunkline/control.ipc";
 *   if (tl_connect(&c, &opt, &err) != TL_OK) ...
 *   tl_submit(c, "req-1", request_msgpack, len, 1, &accepted, &err);
 *   while (tl_next_event(c, "req-1", 30000, &ev, &err) == TL_OK) { ...; tl_event_free(ev); }
 *   tl_close(c);
 */
#ifndef TRUNKLINE_H
#define TRUNKLINE_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TL_PROTOCOL_VERSION 1

/* Message types (the `type` key of every map): TL_T_<the type in capitals>. */
#define TL_T_HELLO "hello"
#define TL_T_WELCOME "welcome"
#define TL_T_PROBE "probe"
#define TL_T_PROBE_SENT "probe_sent"
#define TL_T_SUBMIT "submit"
#define TL_T_ACCEPTED "accepted"
#define TL_T_REJECTED "rejected"
#define TL_T_CANCEL "cancel"
#define TL_T_CANCEL_RESULT "cancel_result"
#define TL_T_REPLAY "replay"
#define TL_T_REPLAY_RESULT "replay_result"
#define TL_T_LIST_MODELS "list_models"
#define TL_T_MODELS "models"
#define TL_T_STATUS "status"
#define TL_T_STATUS_REPORT "status_report"
#define TL_T_READY "ready"
#define TL_T_READY_RESULT "ready_result"
#define TL_T_COUNT_TOKENS "count_tokens"
#define TL_T_TOKEN_COUNT "token_count"
#define TL_T_GOODBYE "goodbye"
#define TL_T_GOODBYE_ACK "goodbye_ack"
#define TL_T_RELOAD "reload"
#define TL_T_RELOAD_RESULT "reload_result"
#define TL_T_PROTOCOL_ERROR "protocol_error"
/* Events. */
#define TL_T_STREAM_START "stream_start"
#define TL_T_TEXT_START "text_start"
#define TL_T_TEXT_DELTA "text_delta"
#define TL_T_TEXT_END "text_end"
#define TL_T_REASONING_START "reasoning_start"
#define TL_T_REASONING_DELTA "reasoning_delta"
#define TL_T_REASONING_END "reasoning_end"
#define TL_T_TOOL_CALL_START "tool_call_start"
#define TL_T_TOOL_CALL_DELTA "tool_call_delta"
#define TL_T_TOOL_CALL_END "tool_call_end"
#define TL_T_PROVIDER_PART "provider_part"
#define TL_T_PROVIDER_EVENT "provider_event"
#define TL_T_FINISH "finish"
#define TL_T_ERROR "error"
#define TL_T_BUS "bus"
#define TL_BUS_TOPIC "bus"

/* Error classes (ErrorInfo.error_class). */
#define TL_E_AUTHENTICATION "authentication"
#define TL_E_ACCESS_DENIED "access_denied"
#define TL_E_NOT_FOUND "not_found"
#define TL_E_INVALID_REQUEST "invalid_request"
#define TL_E_CONTEXT_LENGTH "context_length"
#define TL_E_CONTENT_FILTER "content_filter"
#define TL_E_QUOTA_EXCEEDED "quota_exceeded"
#define TL_E_RATE_LIMIT "rate_limit"
#define TL_E_SERVER_ERROR "server_error"
#define TL_E_TIMEOUT "timeout"
#define TL_E_NETWORK "network"
#define TL_E_MODEL_NOT_LOADED "model_not_loaded"
#define TL_E_INVALID_RESPONSE "invalid_response"
#define TL_E_CANCELLED "cancelled"
#define TL_E_NOT_CONFIGURED "not_configured"
#define TL_E_UNAVAILABLE "unavailable"
#define TL_E_OTHER "other"
/* ErrorInfo.provider_code of a refusal for a client id this connection does not own. */
#define TL_UNKNOWN_CLIENT "unknown_client"

/* Defaults that are not zero values: a field left out on the wire means these. */
#define TL_DEFAULT_SUBMIT_STREAM 1
#define TL_DEFAULT_REPLAY_LAST_SEQ (-1)
#define TL_DEFAULT_REPLAY_STATE "unknown"
#define TL_DEFAULT_FINISH_REASON "other"
#define TL_DEFAULT_TOOL_CHOICE_MODE "auto"
#define TL_DEFAULT_RESPONSE_FORMAT_KIND "text"
#define TL_DEFAULT_MODEL_TOOLS 1
#define TL_DEFAULT_MODEL_STREAMING 1
#define TL_DEFAULT_MODEL_IN_CATALOG 1
#define TL_DEFAULT_RULES_FORCED_TOOL_WITH_THINKING 1
#define TL_DEFAULT_RULES_CHAT_COMPLETIONS_TOOLS "yes"
#define TL_DEFAULT_RESPONSE_ROLE "assistant"
#define TL_DEFAULT_PROTOCOL TL_PROTOCOL_VERSION

/* Client-side settings (PROTOCOL.md §1, "Socket options per stack"). */
#define TL_SUB_QUEUE 8192          /* NNG_OPT_RECVBUF of the Sub0 socket */
#define TL_RECONNECT_MIN_MS 10
#define TL_RECONNECT_MAX_MS 500
#define TL_SILENCE_S 5.0           /* no event for this long: replay */
#define TL_PROBE_INTERVAL_MS 50
#define TL_CALL_TIMEOUT_S 30.0

/* Return codes. */
enum {
    TL_OK = 0,
    TL_REJECTED = 1,  /* the daemon refused (err says why) */
    TL_TIMEDOUT = 2,  /* nothing within the time asked for; try again */
    TL_DONE = 3,      /* the request's terminal event was already returned */
    TL_FAIL = -1,     /* the call failed (err says why) */
};

typedef struct tl_error {
    char error_class[32];
    char message[1024];
    int retryable;
    int provider_status;     /* 0: none */
    char provider_code[64];  /* "": none */
} tl_error;

typedef struct tl_options {
    const char *control;      /* the control endpoint URL (ipc://..., tcp://..., tls+tcp://...) */
    const char *token;        /* for network endpoints; NULL: none */
    const char *tls_ca_file;  /* tls+tcp://: the CA (PEM) that signed the daemon's certificate; required */
    const char *tls_server_name; /* tls+tcp://: the name its certificate must carry; NULL: the endpoint's host */
    const char *client_name;
    double silence_s;         /* TL_SILENCE_S */
    double call_timeout_s;    /* TL_CALL_TIMEOUT_S */
    int sub_queue;            /* TL_SUB_QUEUE messages */
} tl_options;

typedef struct tl_accepted {
    char provider[64];
    char model[256];          /* the canonical id (provider:name) */
    int duplicate;
} tl_accepted;

/* One event of a request: its type, request id and seq, and the whole event map
 * (msgpack bytes; tl_event_unpack() reads them). */
typedef struct tl_event {
    char type[32];
    char *request_id;
    int64_t seq;
    char *data;
    size_t size;
    int from_replay;
} tl_event;

typedef struct tl_client tl_client;

tl_options tl_default_options(void);

/* Dial, hello, subscribe, probe until the subscription is live. */
int tl_connect(tl_client **out, const tl_options *opt, tl_error *err);
/* Goodbye (when requests are unfinished), then close both sockets and free. */
void tl_close(tl_client *c);
const char *tl_client_id(const tl_client *c);
/* welcome.limits.max_event_bytes: the largest message the daemon sends. */
int64_t tl_max_event_bytes(const tl_client *c);

/* Start a request: `request` is a msgpack map (a Request). The request is tracked
 * before the submit is sent, so events that beat the reply are kept. TL_OK with
 * `acc` filled, TL_T_REJECTED with `err` filled, or TL_FAIL. With TRACEPARENT (and
 * TRACESTATE) in the environment the submit carries them as its trace_context. */
int tl_submit(tl_client *c, const char *request_id, const char *request, size_t request_size, int stream,
              tl_accepted *acc, tl_error *err);

/* The request's next event, in seq order: TL_OK (free it with tl_event_free), TL_TIMEDOUT,
 * TL_DONE once its terminal event was returned (or the request is unknown), or TL_FAIL. */
int tl_next_event(tl_client *c, const char *request_id, int timeout_ms, tl_event **ev, tl_error *err);
void tl_event_free(tl_event *ev);
/* Unpack an event's map; msgpack_unpacked_destroy() it after use. */
int tl_event_unpack(const tl_event *ev, msgpack_unpacked *out);
/* Events of the request recovered by replay, and lost for good (the ring had moved on). */
int64_t tl_recovered(tl_client *c, const char *request_id);
int64_t tl_lost(tl_client *c, const char *request_id);

int tl_cancel(tl_client *c, const char *request_id, int *cancelled, tl_error *err);

/* A raw control call: `msg` is a msgpack map; `*reply` (malloc'd) the reply's msgpack.
 * A protocol_error reply is TL_OK too: look at its type. */
int tl_call(tl_client *c, const char *msg, size_t size, char **reply, size_t *reply_size, tl_error *err);

/* Helpers on msgpack objects. */
const msgpack_object *tl_get(const msgpack_object *map, const char *key);
/* A string field copied into buf ("" when missing or not a string). */
const char *tl_get_str(const msgpack_object *map, const char *key, char *buf, size_t n);
int64_t tl_get_int(const msgpack_object *map, const char *key, int64_t missing);
int tl_get_bool(const msgpack_object *map, const char *key, int missing);
void tl_error_from(tl_error *err, const msgpack_object *info);

/* Fault injection for the conformance suite: discard, once, an event of the request
 * arriving on the event socket (never by replay), as if PUB/SUB had lost it. */
void tl_test_drop_seq(tl_client *c, const char *request_id, int64_t seq);
void tl_test_drop_type(tl_client *c, const char *request_id, const char *type);
/* Change the Sub0 queue length (messages) after connecting. */
int tl_test_set_sub_queue(tl_client *c, int messages);

#ifdef __cplusplus
}
#endif
#endif
