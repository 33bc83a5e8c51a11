/* trunkline.c: the C client library (see trunkline.h and PROTOCOL.md §4, "The client state machine"). */
#define _POSIX_C_SOURCE 200809L
#include "trunkline.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

enum { ST_WAITING, ST_RUNNING, ST_DONE };

typedef struct drop_rule {
    char *request_id;
    int64_t seq;      /* -1: match by type */
    char type[32];
    struct drop_rule *next;
} drop_rule;

typedef struct qnode {
    tl_event *ev;
    struct qnode *next;
} qnode;

typedef struct request {
    char *id;
    int state;
    int64_t next_seq;
    tl_event **held; /* out of order events, unsorted */
    size_t n_held, cap_held;
    qnode *head, *tail; /* delivered, not yet taken */
    int terminal_queued;
    int terminal_taken;
    int need_replay;
    double last_event_at;
    int64_t recovered, lost;
} request;

struct tl_client {
    nng_socket req, sub;
    tl_options opt;
    char *control;
    char *token;
    char *client_name;
    char *tls_ca_file;
    char *tls_server_name;
    char client_id[128];
    char event_endpoint[1024];
    char topic[136];
    size_t topic_len;
    int64_t max_event_bytes;
    int connects;     /* control connections made (nng's pipe callback counts them) */
    int hello_at;     /* `connects` when we said hello */
    int probe_seen;
    request **reqs;
    size_t n_reqs, cap_reqs;
    drop_rule *drops;
};

/* -- small helpers ---------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void set_err(tl_error *err, const char *cls, const char *fmt, const char *detail) {
    if (!err) return;
    memset(err, 0, sizeof *err);
    snprintf(err->error_class, sizeof err->error_class, "%s", cls);
    snprintf(err->message, sizeof err->message, fmt, detail ? detail : "");
}

/* An `unavailable` error with a message of our own (cut to the message's size). */
__attribute__((format(printf, 2, 3))) static void unavailable(tl_error *err, const char *fmt, ...) {
    if (!err) return;
    memset(err, 0, sizeof *err);
    snprintf(err->error_class, sizeof err->error_class, "%s", TL_E_UNAVAILABLE);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

static void pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static int obj_is_str(const msgpack_object *o, const char *s) {
    size_t n = strlen(s);
    return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && memcmp(o->via.str.ptr, s, n) == 0;
}

const msgpack_object *tl_get(const msgpack_object *map, const char *key) {
    if (!map || map->type != MSGPACK_OBJECT_MAP) return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (obj_is_str(&map->via.map.ptr[i].key, key)) return &map->via.map.ptr[i].val;
    return NULL;
}

const char *tl_get_str(const msgpack_object *map, const char *key, char *buf, size_t n) {
    const msgpack_object *v = tl_get(map, key);
    if (n == 0) return buf;
    buf[0] = 0;
    if (v && v->type == MSGPACK_OBJECT_STR) {
        size_t k = v->via.str.size < n - 1 ? v->via.str.size : n - 1;
        memcpy(buf, v->via.str.ptr, k);
        buf[k] = 0;
    }
    return buf;
}

int64_t tl_get_int(const msgpack_object *map, const char *key, int64_t missing) {
    const msgpack_object *v = tl_get(map, key);
    if (!v) return missing;
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) return (int64_t)v->via.u64;
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return v->via.i64;
    return missing;
}

int tl_get_bool(const msgpack_object *map, const char *key, int missing) {
    const msgpack_object *v = tl_get(map, key);
    return v && v->type == MSGPACK_OBJECT_BOOLEAN ? v->via.boolean : missing;
}

void tl_error_from(tl_error *err, const msgpack_object *info) {
    if (!err) return;
    memset(err, 0, sizeof *err);
    tl_get_str(info, "error_class", err->error_class, sizeof err->error_class);
    if (!err->error_class[0]) snprintf(err->error_class, sizeof err->error_class, "other");
    tl_get_str(info, "message", err->message, sizeof err->message);
    err->retryable = tl_get_bool(info, "retryable", 0);
    err->provider_status = (int)tl_get_int(info, "provider_status", 0);
    tl_get_str(info, "provider_code", err->provider_code, sizeof err->provider_code);
}

tl_options tl_default_options(void) {
    tl_options o;
    memset(&o, 0, sizeof o);
    o.client_name = "trunkline-c";
    o.silence_s = TL_SILENCE_S;
    o.call_timeout_s = TL_CALL_TIMEOUT_S;
    o.sub_queue = TL_SUB_QUEUE;
    return o;
}

const char *tl_client_id(const tl_client *c) { return c->client_id; }
int64_t tl_max_event_bytes(const tl_client *c) { return c->max_event_bytes; }

/* -- events ------------------------------------------------------------------------------------ */

void tl_event_free(tl_event *ev) {
    if (!ev) return;
    free(ev->request_id);
    free(ev->data);
    free(ev);
}

int tl_event_unpack(const tl_event *ev, msgpack_unpacked *out) {
    size_t off = 0;
    msgpack_unpacked_init(out);
    return msgpack_unpack_next(out, ev->data, ev->size, &off) == MSGPACK_UNPACK_SUCCESS ? TL_OK : TL_FAIL;
}

/* An event of its own from a map inside a message (the message may hold several). */
static tl_event *event_from(const msgpack_object *map, int from_replay) {
    if (map->type != MSGPACK_OBJECT_MAP) return NULL;
    tl_event *ev = calloc(1, sizeof *ev);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, *map);
    ev->data = sb.data;
    ev->size = sb.size;
    tl_get_str(map, "type", ev->type, sizeof ev->type);
    char rid[512];
    ev->request_id = strdup(tl_get_str(map, "request_id", rid, sizeof rid));
    ev->seq = tl_get_int(map, "seq", 0);
    ev->from_replay = from_replay;
    return ev;
}

static int is_terminal(const tl_event *ev) {
    return strcmp(ev->type, TL_T_FINISH) == 0 || strcmp(ev->type, TL_T_ERROR) == 0;
}

static request *find_req(tl_client *c, const char *id) {
    for (size_t i = 0; i < c->n_reqs; i++)
        if (strcmp(c->reqs[i]->id, id) == 0) return c->reqs[i];
    return NULL;
}

static request *add_req(tl_client *c, const char *id) {
    if (c->n_reqs == c->cap_reqs) {
        c->cap_reqs = c->cap_reqs ? 2 * c->cap_reqs : 16;
        c->reqs = realloc(c->reqs, c->cap_reqs * sizeof *c->reqs);
    }
    request *r = calloc(1, sizeof *r);
    r->id = strdup(id);
    r->last_event_at = now_s();
    c->reqs[c->n_reqs++] = r;
    return r;
}

static void free_req(request *r) {
    for (size_t i = 0; i < r->n_held; i++) tl_event_free(r->held[i]);
    free(r->held);
    for (qnode *q = r->head; q;) {
        qnode *next = q->next;
        tl_event_free(q->ev);
        free(q);
        q = next;
    }
    free(r->id);
    free(r);
}

static void remove_req(tl_client *c, request *r) {
    for (size_t i = 0; i < c->n_reqs; i++)
        if (c->reqs[i] == r) {
            c->reqs[i] = c->reqs[--c->n_reqs];
            break;
        }
    free_req(r);
}

/* Hand an in-order event to the application; a terminal one ends the request. */
static void deliver(request *r, tl_event *ev) {
    qnode *q = calloc(1, sizeof *q);
    q->ev = ev;
    if (r->tail) r->tail->next = q;
    else r->head = q;
    r->tail = q;
    r->next_seq = ev->seq + 1;
    if (ev->from_replay) r->recovered++;
    if (is_terminal(ev)) {
        r->state = ST_DONE;
        r->terminal_queued = 1;
        r->need_replay = 0;
        for (size_t i = 0; i < r->n_held; i++) tl_event_free(r->held[i]);
        r->n_held = 0;
    }
}

static void flush_held(request *r) {
    int found = 1;
    while (found && r->state != ST_DONE) {
        found = 0;
        for (size_t i = 0; i < r->n_held; i++) {
            if (r->held[i]->seq == r->next_seq) {
                tl_event *ev = r->held[i];
                r->held[i] = r->held[--r->n_held];
                deliver(r, ev);
                found = 1;
                break;
            }
            if (r->held[i]->seq < r->next_seq) { /* came meanwhile by replay */
                tl_event_free(r->held[i]);
                r->held[i] = r->held[--r->n_held];
                found = 1;
                break;
            }
        }
    }
}

/* The seq check of every event, subscribed or replayed (takes ownership of ev). */
static void receive(request *r, tl_event *ev) {
    r->last_event_at = now_s();
    if (r->state == ST_DONE || ev->seq < r->next_seq) { /* duplicate, or after the end */
        tl_event_free(ev);
        return;
    }
    if (ev->seq > r->next_seq) { /* a gap: hold it, replay from the first missing seq */
        for (size_t i = 0; i < r->n_held; i++)
            if (r->held[i]->seq == ev->seq) {
                tl_event_free(ev);
                return;
            }
        if (r->n_held == r->cap_held) {
            r->cap_held = r->cap_held ? 2 * r->cap_held : 16;
            r->held = realloc(r->held, r->cap_held * sizeof *r->held);
        }
        r->held[r->n_held++] = ev;
        r->need_replay = 1;
        return;
    }
    deliver(r, ev);
    flush_held(r);
}

static int dropped(tl_client *c, const tl_event *ev) {
    for (drop_rule **p = &c->drops; *p; p = &(*p)->next) {
        drop_rule *d = *p;
        if (strcmp(d->request_id, ev->request_id) != 0) continue;
        if ((d->seq >= 0 && d->seq == ev->seq) || (d->seq < 0 && strcmp(d->type, ev->type) == 0)) {
            *p = d->next;
            free(d->request_id);
            free(d);
            return 1;
        }
    }
    return 0;
}

/* Whether `data` holds exactly one well-formed msgpack value, checked without allocating.
 * msgpack-c allocates an array's or map's slots from its header alone, so five bytes
 * claiming 2^32 elements would ask for 128 GiB: every count must fit the bytes left. */
static int well_formed(const unsigned char *p, size_t n) {
    size_t pos = 0, pending = 1;
    while (pending) {
        if (pos >= n) return 0;
        unsigned b = p[pos++];
        size_t len = 0, items = 0, width = 0;
        pending--;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) continue; /* fixint, nil, bool */
        if ((b & 0xf0) == 0x80) items = 2 * (b & 0x0f);
        else if ((b & 0xf0) == 0x90) items = b & 0x0f;
        else if ((b & 0xe0) == 0xa0) len = b & 0x1f;
        else switch (b) {
            case 0xcc: case 0xd0: len = 1; break;
            case 0xcd: case 0xd1: len = 2; break;
            case 0xca: case 0xce: case 0xd2: len = 4; break;
            case 0xcb: case 0xcf: case 0xd3: len = 8; break;
            case 0xd4: len = 2; break;
            case 0xd5: len = 3; break;
            case 0xd6: len = 5; break;
            case 0xd7: len = 9; break;
            case 0xd8: len = 17; break;
            case 0xc4: case 0xd9: width = 1; break;
            case 0xc5: case 0xda: width = 2; break;
            case 0xc6: case 0xdb: width = 4; break;
            case 0xc7: width = 1; len = 1; break; /* ext 8: size, then type byte + data */
            case 0xc8: width = 2; len = 1; break;
            case 0xc9: width = 4; len = 1; break;
            case 0xdc: case 0xde: width = 2; break;
            case 0xdd: case 0xdf: width = 4; break;
            default: return 0; /* 0xc1: never used */
            }
        if (width) {
            if (n - pos < width) return 0;
            size_t v = 0;
            for (size_t i = 0; i < width; i++) v = v << 8 | p[pos + i];
            pos += width;
            if (b == 0xdc || b == 0xdd) items = v;
            else if (b == 0xde || b == 0xdf) items = 2 * v;
            else len += v;
        }
        if (items > n - pos) return 0; /* each element takes at least one byte */
        pending += items;
        if (len > n - pos) return 0;
        pos += len;
    }
    return pos == n;
}

/* One message from the event socket: `topic \0` then a map or an array of maps. */
static void dispatch(tl_client *c, const char *data, size_t size) {
    if (size < c->topic_len || memcmp(data, c->topic, c->topic_len) != 0) return; /* not our topic */
    if (!well_formed((const unsigned char *)data + c->topic_len, size - c->topic_len)) return;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    if (msgpack_unpack_next(&up, data + c->topic_len, size - c->topic_len, &off) != MSGPACK_UNPACK_SUCCESS) {
        msgpack_unpacked_destroy(&up);
        return;
    }
    const msgpack_object *body = &up.data;
    uint32_t n = body->type == MSGPACK_OBJECT_ARRAY ? body->via.array.size : 1;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *m = body->type == MSGPACK_OBJECT_ARRAY ? &body->via.array.ptr[i] : body;
        const msgpack_object *type = tl_get(m, "type");
        if (obj_is_str(type, TL_T_PROBE)) {
            c->probe_seen = 1;
            continue;
        }
        tl_event *ev = event_from(m, 0);
        if (!ev) continue;
        request *r = find_req(c, ev->request_id);
        if (!r || dropped(c, ev)) {
            tl_event_free(ev);
            continue;
        }
        receive(r, ev);
    }
    msgpack_unpacked_destroy(&up);
}

/* Read what the event socket holds, waiting up to timeout_ms for the first message. */
static int pump(tl_client *c, int timeout_ms) {
    int got = 0;
    for (;;) {
        nng_msg *msg;
        nng_socket_set_ms(c->sub, NNG_OPT_RECVTIMEO, got ? 0 : (timeout_ms > 0 ? timeout_ms : 0));
        int rv = nng_recvmsg(c->sub, &msg, got || timeout_ms <= 0 ? NNG_FLAG_NONBLOCK : 0);
        if (rv != 0) return got;
        dispatch(c, nng_msg_body(msg), nng_msg_len(msg));
        nng_msg_free(msg);
        got++;
        if (got >= 256) return got; /* let the caller look at its queue */
    }
}

/* -- control calls ----------------------------------------------------------------------------- */

int tl_call(tl_client *c, const char *msg, size_t size, char **reply, size_t *reply_size, tl_error *err) {
    nng_msg *m;
    nng_msg_alloc(&m, 0);
    nng_msg_append(m, msg, size);
    int rv = nng_sendmsg(c->req, m, 0);
    if (rv != 0) {
        nng_msg_free(m);
        set_err(err, TL_E_UNAVAILABLE, "cannot send to the daemon: %s", nng_strerror(rv));
        if (err) err->retryable = 1;
        return TL_FAIL;
    }
    rv = nng_recvmsg(c->req, &m, 0);
    if (rv != 0) {
        set_err(err, TL_E_UNAVAILABLE, "the daemon did not answer: %s", nng_strerror(rv));
        if (err) err->retryable = 1;
        return TL_FAIL;
    }
    *reply_size = nng_msg_len(m);
    *reply = malloc(*reply_size ? *reply_size : 1);
    memcpy(*reply, nng_msg_body(m), *reply_size);
    nng_msg_free(m);
    return TL_OK;
}

/* A call whose reply is unpacked into `up` (the caller destroys it). */
static int call_unpacked(tl_client *c, msgpack_sbuffer *sb, msgpack_unpacked *up, tl_error *err) {
    char *reply;
    size_t n, off = 0;
    msgpack_unpacked_init(up);
    int rv = tl_call(c, sb->data, sb->size, &reply, &n, err);
    msgpack_sbuffer_destroy(sb);
    if (rv != TL_OK) return rv;
    int ok = well_formed((const unsigned char *)reply, n) &&
             msgpack_unpack_next(up, reply, n, &off) == MSGPACK_UNPACK_SUCCESS && up->data.type == MSGPACK_OBJECT_MAP;
    /* The objects point into `reply` (msgpack-c does not copy strings): the zone frees it. */
    if (!up->zone || !msgpack_zone_push_finalizer(up->zone, free, reply)) free(reply);
    if (!ok) {
        set_err(err, TL_E_INVALID_RESPONSE, "the daemon's reply is not a msgpack map%s", NULL);
        return TL_FAIL;
    }
    return TL_OK;
}

static void start_map(msgpack_sbuffer *sb, msgpack_packer *pk, size_t n, const char *type) {
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(pk, n);
    pack_str(pk, "type");
    pack_str(pk, type);
}

static int probe(tl_client *c, tl_error *err) {
    c->probe_seen = 0;
    double deadline = now_s() + 10.0;
    while (!c->probe_seen) {
        if (now_s() > deadline) {
            set_err(err, TL_E_UNAVAILABLE, "no probe arrived on the event socket within 10 s%s", NULL);
            return TL_FAIL;
        }
        msgpack_sbuffer sb;
        msgpack_packer pk;
        start_map(&sb, &pk, 2, TL_T_PROBE);
        pack_str(&pk, "client_id");
        pack_str(&pk, c->client_id);
        msgpack_unpacked up;
        int rv = call_unpacked(c, &sb, &up, err);
        msgpack_unpacked_destroy(&up);
        if (rv != TL_OK) return rv;
        double until = now_s() + TL_PROBE_INTERVAL_MS / 1000.0;
        while (!c->probe_seen && now_s() < until) pump(c, TL_PROBE_INTERVAL_MS);
    }
    return TL_OK;
}

static int hello(tl_client *c, tl_error *err) {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    start_map(&sb, &pk, c->token ? 4 : 3, TL_T_HELLO);
    pack_str(&pk, "client_name");
    pack_str(&pk, c->client_name);
    /* This client never subscribes to the bus: the daemon need not publish it for us. */
    pack_str(&pk, "watch_bus");
    msgpack_pack_false(&pk);
    if (c->token) {
        pack_str(&pk, "token");
        pack_str(&pk, c->token);
    }
    c->hello_at = __atomic_load_n(&c->connects, __ATOMIC_SEQ_CST);
    msgpack_unpacked up;
    int rv = call_unpacked(c, &sb, &up, err);
    if (rv != TL_OK) return rv;
    const msgpack_object *reply = &up.data;
    if (!obj_is_str(tl_get(reply, "type"), TL_T_WELCOME)) {
        tl_error_from(err, tl_get(reply, "error"));
        msgpack_unpacked_destroy(&up);
        return TL_FAIL;
    }
    if (c->topic_len) /* a hello again: the old client id is gone with its connection */
        nng_socket_set(c->sub, NNG_OPT_SUB_UNSUBSCRIBE, c->topic, c->topic_len);
    tl_get_str(reply, "client_id", c->client_id, sizeof c->client_id);
    tl_get_str(reply, "event_endpoint", c->event_endpoint, sizeof c->event_endpoint);
    c->max_event_bytes = tl_get_int(tl_get(reply, "limits"), "max_event_bytes", 0);
    c->topic_len = (size_t)snprintf(c->topic, sizeof c->topic, "%s", c->client_id) + 1; /* with the NUL */
    msgpack_unpacked_destroy(&up);
    nng_socket_set(c->sub, NNG_OPT_SUB_SUBSCRIBE, c->topic, c->topic_len);
    return TL_OK;
}

static void on_pipe(nng_pipe p, nng_pipe_ev ev, void *arg) {
    (void)p;
    (void)ev;
    tl_client *c = arg;
    __atomic_add_fetch(&c->connects, 1, __ATOMIC_SEQ_CST);
}

/* A wildcard listening address in the announced event endpoint means the host we dialled. */
static char *event_url(const char *announced, const char *control) {
    const char *wild[] = {"://0.0.0.0:", "://[::]:", "://*:"};
    for (size_t i = 0; i < 3; i++) {
        const char *w = strstr(announced, wild[i]);
        if (!w) continue;
        const char *port = strrchr(announced, ':');
        const char *host = strstr(control, "://");
        const char *host_end = host ? strrchr(control, ':') : NULL;
        if (!host || !host_end || host_end < host + 3) break;
        size_t n = (size_t)(w - announced) + 3 + (size_t)(host_end - (host + 3)) + strlen(port) + 1;
        char *out = malloc(n);
        snprintf(out, n, "%.*s://%.*s%s", (int)(w - announced), announced, (int)(host_end - (host + 3)), host + 3,
                 port);
        return out;
    }
    return strdup(announced);
}

static int is_tls(const char *url) { return strncmp(url, "tls+tcp", 7) == 0; }

/* The host of a network endpoint URL (brackets of an IPv6 address removed). */
static const char *host_of(const char *url, char *buf, size_t n) {
    const char *host = strstr(url, "://");
    host = host ? host + 3 : url;
    const char *end = strrchr(host, ':');
    size_t len = end ? (size_t)(end - host) : strlen(host);
    if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
        host++;
        len -= 2;
    }
    snprintf(buf, n, "%.*s", (int)len, host);
    return buf;
}

/* Dial `url` on `s`, blocking until connected. A tls+tcp:// endpoint is dialled with a
 * TLS configuration of our own: the server verified against the CA, for the name given
 * (nng's TLS has no system store, so without a CA nothing could be verified). */
static int dial(tl_client *c, nng_socket s, const char *url, tl_error *err) {
    char host[256];
    int rv;
    if (!is_tls(url)) {
        if ((rv = nng_dial(s, url, NULL, 0)) == 0) return TL_OK;
        if (rv == NNG_ECONNSHUT && strncmp(url, "tcp", 3) == 0) /* what a TLS endpoint does to plain nng */
            unavailable(err, "%s closed the connection before a daemon answered (%s); the daemon may expect TLS "
                        "(tls+%s, with TRUNKLINE_TLS_CA_FILE)", url, nng_strerror(rv), url);
        else
            unavailable(err, "no trunkline daemon answers at %s (%s)", url, nng_strerror(rv));
        return TL_FAIL;
    }
    if (!c->tls_ca_file) {
        unavailable(err, "%s is a TLS endpoint: give the CA that signed the daemon's certificate "
                    "(tl_options.tls_ca_file, TRUNKLINE_TLS_CA_FILE)", url);
        return TL_FAIL;
    }
    const char *name = c->tls_server_name ? c->tls_server_name : host_of(url, host, sizeof host);
    nng_tls_config *cfg;
    if ((rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT)) != 0) {
        unavailable(err, "cannot set up TLS for %s (%s)", url, nng_strerror(rv));
        return TL_FAIL;
    }
    nng_dialer d = NNG_DIALER_INITIALIZER;
    if ((rv = nng_tls_config_ca_file(cfg, c->tls_ca_file)) != 0) {
        unavailable(err, "cannot use the CA file %s for %s (%s)", c->tls_ca_file, url, nng_strerror(rv));
    } else if ((rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) != 0 ||
               (rv = nng_tls_config_server_name(cfg, name)) != 0 || (rv = nng_dialer_create(&d, s, url)) != 0 ||
               (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg)) != 0) {
        unavailable(err, "cannot set up TLS for %s (%s)", url, nng_strerror(rv));
    } else if ((rv = nng_dialer_start(d, 0)) != 0) {
        if (rv == NNG_ECRYPTO || rv == NNG_EPEERAUTH)
            unavailable(err, "the TLS handshake with %s failed (%s): the daemon's certificate is not one for '%s' "
                        "signed by the CA in %s, or the endpoint does not speak TLS; check TRUNKLINE_TLS_CA_FILE "
                        "and TRUNKLINE_TLS_SERVER_NAME", url, nng_strerror(rv), name, c->tls_ca_file);
        else
            unavailable(err, "no trunkline daemon answers at %s (%s)", url, nng_strerror(rv));
    }
    nng_tls_config_free(cfg); /* the dialer holds its own reference */
    if (rv != 0 && nng_dialer_id(d) > 0) nng_dialer_close(d);
    return rv == 0 ? TL_OK : TL_FAIL;
}

static void free_client(tl_client *c) {
    free(c->control);
    free(c->token);
    free(c->client_name);
    free(c->tls_ca_file);
    free(c->tls_server_name);
    free(c);
}

int tl_connect(tl_client **out, const tl_options *opt, tl_error *err) {
    tl_client *c = calloc(1, sizeof *c);
    c->opt = *opt;
    c->control = strdup(opt->control);
    c->token = opt->token && opt->token[0] ? strdup(opt->token) : NULL;
    c->client_name = strdup(opt->client_name ? opt->client_name : "trunkline-c");
    c->tls_ca_file = opt->tls_ca_file && opt->tls_ca_file[0] ? strdup(opt->tls_ca_file) : NULL;
    c->tls_server_name = opt->tls_server_name && opt->tls_server_name[0] ? strdup(opt->tls_server_name) : NULL;
    if (c->opt.silence_s <= 0) c->opt.silence_s = TL_SILENCE_S;
    if (c->opt.call_timeout_s <= 0) c->opt.call_timeout_s = TL_CALL_TIMEOUT_S;
    if (c->opt.sub_queue <= 0) c->opt.sub_queue = TL_SUB_QUEUE;
    int rv;
    if ((rv = nng_req0_open(&c->req)) != 0 || (rv = nng_sub0_open(&c->sub)) != 0) {
        set_err(err, TL_E_OTHER, "cannot open nng sockets: %s", nng_strerror(rv));
        free_client(c);
        return TL_FAIL;
    }
    /* PROTOCOL.md §1: never resend (a resend to a restarted daemon is a second, billed call),
     * accept any size (a finish or replay_result can be many MiB), reconnect quickly. */
    nng_socket_set_ms(c->req, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_ms(c->req, NNG_OPT_RECVTIMEO, (nng_duration)(c->opt.call_timeout_s * 1000));
    nng_socket_set_ms(c->req, NNG_OPT_SENDTIMEO, (nng_duration)(c->opt.call_timeout_s * 1000));
    nng_socket_set_int(c->sub, NNG_OPT_RECVBUF, c->opt.sub_queue);
    for (int i = 0; i < 2; i++) {
        nng_socket s = i ? c->sub : c->req;
        nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 0);
        nng_socket_set_ms(s, NNG_OPT_RECONNMINT, TL_RECONNECT_MIN_MS);
        nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, TL_RECONNECT_MAX_MS);
    }
    nng_pipe_notify(c->req, NNG_PIPE_EV_ADD_POST, on_pipe, c);
    if (dial(c, c->req, c->control, err) != TL_OK) goto fail;
    if (hello(c, err) != TL_OK) goto fail;
    {
        char *url = event_url(c->event_endpoint, c->control);
        rv = dial(c, c->sub, url, err);
        free(url);
        if (rv != TL_OK) goto fail;
    }
    if (probe(c, err) != TL_OK) goto fail;
    *out = c;
    return TL_OK;
fail:
    nng_close(c->req);
    nng_close(c->sub);
    free_client(c);
    return TL_FAIL;
}

/* The control connection was made anew since our hello (a daemon restart, a dropped
 * connection): the daemon let our client id go with it. Hello again and probe. */
static int hello_again(tl_client *c, tl_error *err) {
    int rv = hello(c, err);
    return rv == TL_OK ? probe(c, err) : rv;
}

/* A process started inside a trace has TRACEPARENT (and maybe TRACESTATE) in its
 * environment: sent as the submit's trace_context, the daemon's span joins that trace. */
static void pack_submit(msgpack_sbuffer *sb, tl_client *c, const char *rid, const char *req_map, size_t size,
                        int stream) {
    msgpack_packer pk;
    const char *parent = getenv("TRACEPARENT");
    const char *state = getenv("TRACESTATE");
    int traced = parent && *parent;
    int with_state = traced && state && *state;
    start_map(sb, &pk, (stream ? 4 : 5) + (traced ? 1 : 0), TL_T_SUBMIT);
    pack_str(&pk, "request_id");
    pack_str(&pk, rid);
    pack_str(&pk, "client_id");
    pack_str(&pk, c->client_id);
    pack_str(&pk, "request");
    msgpack_sbuffer_write(sb, req_map, size); /* already a msgpack map */
    if (!stream) {
        pack_str(&pk, "stream");
        msgpack_pack_false(&pk);
    }
    if (traced) {
        pack_str(&pk, "trace_context");
        msgpack_pack_map(&pk, with_state ? 2 : 1);
        pack_str(&pk, "traceparent");
        pack_str(&pk, parent);
        if (with_state) {
            pack_str(&pk, "tracestate");
            pack_str(&pk, state);
        }
    }
}

int tl_submit(tl_client *c, const char *rid, const char *req_map, size_t size, int stream, tl_accepted *acc,
              tl_error *err) {
    if (__atomic_load_n(&c->connects, __ATOMIC_SEQ_CST) != c->hello_at && hello_again(c, err) != TL_OK)
        return TL_FAIL;
    request *r = find_req(c, rid);
    if (r) remove_req(c, r); /* a repeat of an ended request: track it anew */
    r = add_req(c, rid);      /* before the submit leaves: events can beat the reply */
    msgpack_unpacked up;
    for (int attempt = 0;; attempt++) {
        msgpack_sbuffer sb;
        pack_submit(&sb, c, rid, req_map, size, stream);
        if (call_unpacked(c, &sb, &up, err) != TL_OK) {
            remove_req(c, r);
            return TL_FAIL;
        }
        const msgpack_object *reply = &up.data;
        const msgpack_object *error = tl_get(reply, "error");
        char code[64];
        if (attempt == 0 && error && strcmp(tl_get_str(error, "provider_code", code, sizeof code),
                                            TL_UNKNOWN_CLIENT) == 0) {
            /* Sent before nng had reconnected to a restarted daemon: never reached a provider. */
            msgpack_unpacked_destroy(&up);
            if (hello_again(c, err) != TL_OK) {
                remove_req(c, r);
                return TL_FAIL;
            }
            continue;
        }
        break;
    }
    const msgpack_object *reply = &up.data;
    if (obj_is_str(tl_get(reply, "type"), TL_T_ACCEPTED)) {
        if (acc) {
            memset(acc, 0, sizeof *acc);
            tl_get_str(reply, "provider", acc->provider, sizeof acc->provider);
            tl_get_str(reply, "model", acc->model, sizeof acc->model);
            acc->duplicate = tl_get_bool(reply, "duplicate", 0);
        }
        if (r->state == ST_WAITING) r->state = ST_RUNNING;
        r->last_event_at = now_s();
        msgpack_unpacked_destroy(&up);
        return TL_OK;
    }
    tl_error_from(err, tl_get(reply, "error"));
    msgpack_unpacked_destroy(&up);
    remove_req(c, r);
    return TL_REJECTED;
}

/* A terminal error the library makes itself, as the event the daemon would have sent. */
static tl_event *made_error(request *r, const char *cls, const char *message) {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    start_map(&sb, &pk, 4, TL_T_ERROR);
    pack_str(&pk, "request_id");
    pack_str(&pk, r->id);
    pack_str(&pk, "seq");
    msgpack_pack_int64(&pk, r->next_seq);
    pack_str(&pk, "error");
    msgpack_pack_map(&pk, 3);
    pack_str(&pk, "error_class");
    pack_str(&pk, cls);
    pack_str(&pk, "message");
    pack_str(&pk, message);
    pack_str(&pk, "retryable");
    msgpack_pack_true(&pk);
    tl_event *ev = calloc(1, sizeof *ev);
    snprintf(ev->type, sizeof ev->type, "%s", TL_T_ERROR);
    ev->request_id = strdup(r->id);
    ev->seq = r->next_seq;
    ev->data = sb.data;
    ev->size = sb.size;
    return ev;
}

/* Replay from the next expected seq until nothing is missing (in batches of at most
 * 5,000 events: again from where a batch ended, until last_seq). */
static int recover(tl_client *c, request *r, tl_error *err) {
    r->need_replay = 0;
    while (r->state != ST_DONE) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        start_map(&sb, &pk, 3, TL_T_REPLAY);
        pack_str(&pk, "request_id");
        pack_str(&pk, r->id);
        pack_str(&pk, "from_seq");
        msgpack_pack_int64(&pk, r->next_seq);
        msgpack_unpacked up;
        if (call_unpacked(c, &sb, &up, err) != TL_OK) {
            deliver(r, made_error(r, TL_E_UNAVAILABLE, err ? err->message : "replay failed"));
            return TL_FAIL;
        }
        const msgpack_object *res = &up.data;
        char state[16];
        tl_get_str(res, "state", state, sizeof state);
        if (!state[0]) snprintf(state, sizeof state, "%s", TL_DEFAULT_REPLAY_STATE);
        if (!obj_is_str(tl_get(res, "type"), TL_T_REPLAY_RESULT) || strcmp(state, "unknown") == 0) {
            msgpack_unpacked_destroy(&up);
            deliver(r, made_error(r, TL_E_UNAVAILABLE,
                                  "the daemon no longer knows this request (it restarted, or the request expired)"));
            return TL_OK;
        }
        int64_t first = tl_get_int(res, "first_seq", 0);
        int64_t last = tl_get_int(res, "last_seq", TL_DEFAULT_REPLAY_LAST_SEQ);
        if (first > r->next_seq) { /* left the ring: lost for good (the terminal event still has it all) */
            r->lost += first - r->next_seq;
            r->next_seq = first;
            flush_held(r);
        }
        const msgpack_object *events = tl_get(res, "events");
        uint32_t n = events && events->type == MSGPACK_OBJECT_ARRAY ? events->via.array.size : 0;
        for (uint32_t i = 0; i < n; i++) {
            tl_event *ev = event_from(&events->via.array.ptr[i], 1);
            if (ev) receive(r, ev);
        }
        msgpack_unpacked_destroy(&up);
        if (r->state == ST_DONE || n == 0) break;
        if (r->next_seq > last && r->n_held == 0) break; /* caught up; newer events come as usual */
    }
    r->need_replay = 0;
    r->last_event_at = now_s();
    return TL_OK;
}

int tl_next_event(tl_client *c, const char *rid, int timeout_ms, tl_event **out, tl_error *err) {
    *out = NULL;
    request *r = find_req(c, rid);
    if (!r) return TL_DONE;
    double deadline = now_s() + timeout_ms / 1000.0;
    for (;;) {
        if (r->head) {
            qnode *q = r->head;
            r->head = q->next;
            if (!r->head) r->tail = NULL;
            *out = q->ev;
            free(q);
            if (is_terminal(*out)) r->terminal_taken = 1;
            return TL_OK;
        }
        if (r->terminal_taken) {
            remove_req(c, r);
            return TL_DONE;
        }
        for (size_t i = 0; i < c->n_reqs; i++) /* gaps found by the last read, this request's or not */
            if (c->reqs[i]->need_replay) recover(c, c->reqs[i], err);
        if (r->head) continue;
        double now = now_s();
        if (now - r->last_event_at >= c->opt.silence_s) {
            recover(c, r, err);
            continue;
        }
        if (now >= deadline) return TL_TIMEDOUT;
        double wait = deadline - now;
        double silent = r->last_event_at + c->opt.silence_s - now;
        if (silent < wait) wait = silent;
        pump(c, (int)(wait * 1000) + 1);
    }
}

int64_t tl_recovered(tl_client *c, const char *rid) {
    request *r = find_req(c, rid);
    return r ? r->recovered : 0;
}

int64_t tl_lost(tl_client *c, const char *rid) {
    request *r = find_req(c, rid);
    return r ? r->lost : 0;
}

int tl_cancel(tl_client *c, const char *rid, int *cancelled, tl_error *err) {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    start_map(&sb, &pk, 2, TL_T_CANCEL);
    pack_str(&pk, "request_id");
    pack_str(&pk, rid);
    msgpack_unpacked up;
    if (call_unpacked(c, &sb, &up, err) != TL_OK) return TL_FAIL;
    int ok = obj_is_str(tl_get(&up.data, "type"), TL_T_CANCEL_RESULT);
    if (ok && cancelled) *cancelled = tl_get_bool(&up.data, "cancelled", 0);
    if (!ok) tl_error_from(err, tl_get(&up.data, "error"));
    msgpack_unpacked_destroy(&up);
    return ok ? TL_OK : TL_FAIL;
}

void tl_close(tl_client *c) {
    if (!c) return;
    int unfinished = 0;
    for (size_t i = 0; i < c->n_reqs; i++) unfinished |= c->reqs[i]->state != ST_DONE;
    if (unfinished) { /* cancel them now rather than when the connection closes */
        msgpack_sbuffer sb;
        msgpack_packer pk;
        start_map(&sb, &pk, 2, TL_T_GOODBYE);
        pack_str(&pk, "client_id");
        pack_str(&pk, c->client_id);
        msgpack_unpacked up;
        nng_socket_set_ms(c->req, NNG_OPT_RECVTIMEO, 2000);
        if (call_unpacked(c, &sb, &up, NULL) == TL_OK) msgpack_unpacked_destroy(&up);
    }
    while (c->n_reqs) remove_req(c, c->reqs[0]);
    free(c->reqs);
    while (c->drops) {
        drop_rule *d = c->drops;
        c->drops = d->next;
        free(d->request_id);
        free(d);
    }
    nng_close(c->req);
    nng_close(c->sub);
    free_client(c);
}

static void add_drop(tl_client *c, const char *rid, int64_t seq, const char *type) {
    drop_rule *d = calloc(1, sizeof *d);
    d->request_id = strdup(rid);
    d->seq = seq;
    snprintf(d->type, sizeof d->type, "%s", type ? type : "");
    d->next = c->drops;
    c->drops = d;
}

void tl_test_drop_seq(tl_client *c, const char *rid, int64_t seq) { add_drop(c, rid, seq, NULL); }
void tl_test_drop_type(tl_client *c, const char *rid, const char *type) { add_drop(c, rid, -1, type); }

int tl_test_set_sub_queue(tl_client *c, int messages) {
    return nng_socket_set_int(c->sub, NNG_OPT_RECVBUF, messages) == 0 ? TL_OK : TL_FAIL;
}
