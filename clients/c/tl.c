/* tl: an example program of the C client.
 *
 *   tl chat MODEL PROMPT      stream a reply to stdout (TRUNKLINE_CONTROL, TRUNKLINE_TOKEN,
 *                             TRUNKLINE_TLS_CA_FILE, TRUNKLINE_TLS_SERVER_NAME)
 *   tl conform                the conformance suite's command interface: JSON lines on
 *                             stdin, one JSON reply line per command on stdout
 *                             (tests/conformance/README.md)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "trunkline.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *default_control(char *buf, size_t n) {
    const char *env = getenv("TRUNKLINE_CONTROL");
    if (env) return env;
    const char *dir = getenv("TRUNKLINE_RUNTIME_DIR");
    if (dir) snprintf(buf, n, "ipc://%s/control.ipc", dir);
    else if ((dir = getenv("XDG_RUNTIME_DIR"))) snprintf(buf, n, "ipc://%s/trunkline/control.ipc", dir);
    else snprintf(buf, n, "ipc:///tmp/trunkline-%d/control.ipc", (int)getuid());
    return buf;
}

/* -- tl chat -------------------------------------------------------------------------------- */

static int chat(const char *model, const char *prompt) {
    char buf[512];
    tl_options opt = tl_default_options();
    opt.control = default_control(buf, sizeof buf);
    opt.token = getenv("TRUNKLINE_TOKEN");
    opt.tls_ca_file = getenv("TRUNKLINE_TLS_CA_FILE");
    opt.tls_server_name = getenv("TRUNKLINE_TLS_SERVER_NAME");
    opt.client_name = "tl";
    tl_client *c;
    tl_error err;
    if (tl_connect(&c, &opt, &err) != TL_OK) {
        fprintf(stderr, "tl: %s: %s\n", err.error_class, err.message);
        return 1;
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    /* {model, messages: [{role: user, content: [{type: text, text: prompt}]}]} */
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "model", 5);
    msgpack_pack_str_with_body(&pk, model, strlen(model));
    msgpack_pack_str_with_body(&pk, "messages", 8);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "role", 4);
    msgpack_pack_str_with_body(&pk, "user", 4);
    msgpack_pack_str_with_body(&pk, "content", 7);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "type", 4);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, "text", 4);
    msgpack_pack_str_with_body(&pk, prompt, strlen(prompt));
    char rid[64];
    struct timespec ts; /* unique across processes: the id must not collide with another client's */
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(rid, sizeof rid, "tl-%lld%09ld-%d", (long long)ts.tv_sec, ts.tv_nsec, (int)getpid());
    tl_accepted acc;
    int rv = tl_submit(c, rid, sb.data, sb.size, 1, &acc, &err);
    msgpack_sbuffer_destroy(&sb);
    int status = 0;
    if (rv != TL_OK) {
        fprintf(stderr, "tl: %s: %s\n", err.error_class, err.message);
        tl_close(c);
        return 1;
    }
    tl_event *ev;
    while ((rv = tl_next_event(c, rid, 60000, &ev, &err)) == TL_OK) {
        msgpack_unpacked up;
        if (tl_event_unpack(ev, &up) == TL_OK) {
            char text[65536];
            if (strcmp(ev->type, TL_T_TEXT_DELTA) == 0) {
                fputs(tl_get_str(&up.data, "text", text, sizeof text), stdout);
                fflush(stdout);
            } else if (strcmp(ev->type, TL_T_ERROR) == 0) {
                tl_error_from(&err, tl_get(&up.data, "error"));
                fprintf(stderr, "\ntl: %s: %s\n", err.error_class, err.message);
                status = 1;
            }
        }
        msgpack_unpacked_destroy(&up);
        tl_event_free(ev);
    }
    if (rv == TL_TIMEDOUT) {
        fprintf(stderr, "\ntl: no event for 60 s\n");
        status = 1;
    }
    putchar('\n');
    tl_close(c);
    return status;
}

/* -- tl conform ----------------------------------------------------------------------------- */

typedef struct log_entry {
    char *id;
    tl_event **events;
    size_t n, cap;
    int done;
    struct log_entry *next;
} log_entry;

static tl_client *client;
static log_entry *logs;

static log_entry *log_of(const char *id, int create) {
    for (log_entry *l = logs; l; l = l->next)
        if (strcmp(l->id, id) == 0) return l;
    if (!create) return NULL;
    log_entry *l = calloc(1, sizeof *l);
    l->id = strdup(id);
    l->next = logs;
    logs = l;
    return l;
}

static void reply_error(const char *cls, const char *message) {
    printf("{\"ok\":false,\"error\":{\"error_class\":");
    msgpack_object s = {.type = MSGPACK_OBJECT_STR};
    s.via.str.ptr = cls;
    s.via.str.size = (uint32_t)strlen(cls);
    msgpack_to_json(stdout, &s);
    printf(",\"message\":");
    s.via.str.ptr = message;
    s.via.str.size = (uint32_t)strlen(message);
    msgpack_to_json(stdout, &s);
    printf("}}");
}

static void print_str(const char *v) {
    msgpack_object s = {.type = MSGPACK_OBJECT_STR};
    s.via.str.ptr = v;
    s.via.str.size = (uint32_t)strlen(v);
    msgpack_to_json(stdout, &s);
}

static void print_event(const tl_event *ev) {
    msgpack_unpacked up;
    if (tl_event_unpack(ev, &up) == TL_OK) msgpack_to_json(stdout, &up.data);
    else printf("null");
    msgpack_unpacked_destroy(&up);
}

static int terminal(const tl_event *ev) {
    return strcmp(ev->type, TL_T_FINISH) == 0 || strcmp(ev->type, TL_T_ERROR) == 0;
}

static void cmd_connect(const msgpack_object *cmd) {
    char control[1024], token[512], ca[1024], server_name[256];
    tl_options opt = tl_default_options();
    opt.control = tl_get_str(cmd, "control", control, sizeof control);
    opt.token = tl_get_str(cmd, "token", token, sizeof token);
    opt.tls_ca_file = tl_get_str(cmd, "tls_ca_file", ca, sizeof ca);
    opt.tls_server_name = tl_get_str(cmd, "tls_server_name", server_name, sizeof server_name);
    opt.client_name = "conformance-c";
    const msgpack_object *silence = tl_get(cmd, "silence_s");
    if (silence && (silence->type == MSGPACK_OBJECT_FLOAT64 || silence->type == MSGPACK_OBJECT_FLOAT32))
        opt.silence_s = silence->via.f64;
    else if (silence && silence->type == MSGPACK_OBJECT_POSITIVE_INTEGER) opt.silence_s = (double)silence->via.u64;
    int queue = (int)tl_get_int(cmd, "recv_buffer", 0);
    if (queue > 0) opt.sub_queue = queue;
    tl_error err;
    tl_client *c;
    if (tl_connect(&c, &opt, &err) != TL_OK) {
        reply_error(err.error_class, err.message);
        return;
    }
    if (client) tl_close(client);
    client = c;
    printf("{\"ok\":true,\"client_id\":");
    print_str(tl_client_id(c));
    printf(",\"max_event_bytes\":%lld}", (long long)tl_max_event_bytes(c));
}

static void cmd_submit(const msgpack_object *cmd) {
    char id[512];
    tl_get_str(cmd, "id", id, sizeof id);
    const msgpack_object *request = tl_get(cmd, "request");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, *request);
    tl_accepted acc;
    tl_error err;
    int rv = tl_submit(client, id, sb.data, sb.size, tl_get_bool(cmd, "stream", TL_DEFAULT_SUBMIT_STREAM), &acc, &err);
    msgpack_sbuffer_destroy(&sb);
    if (rv == TL_OK) {
        log_entry *l = log_of(id, 1);
        for (size_t i = 0; i < l->n; i++) tl_event_free(l->events[i]); /* a repeat starts a new log */
        l->n = 0;
        l->done = 0;
        printf("{\"ok\":true,\"reply\":\"accepted\",\"model\":");
        print_str(acc.model);
        printf(",\"provider\":");
        print_str(acc.provider);
        printf(",\"duplicate\":%s}", acc.duplicate ? "true" : "false");
    } else if (rv == TL_REJECTED) {
        printf("{\"ok\":true,\"reply\":\"rejected\",\"error\":{\"error_class\":");
        print_str(err.error_class);
        printf(",\"message\":");
        print_str(err.message);
        printf("}}");
    } else reply_error(err.error_class, err.message);
}

static void cmd_events(const msgpack_object *cmd) {
    char id[512], until[64];
    tl_get_str(cmd, "id", id, sizeof id);
    tl_get_str(cmd, "until", until, sizeof until);
    const msgpack_object *t = tl_get(cmd, "timeout_s");
    double timeout = t && t->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (double)t->via.u64
                     : t && t->type == MSGPACK_OBJECT_FLOAT64 ? t->via.f64 : 30.0;
    log_entry *l = log_of(id, 1);
    int64_t recovered = tl_recovered(client, id), lost = tl_lost(client, id);
    double deadline = now_s() + timeout;
    int seen_until = 0;
    for (size_t i = 0; i < l->n; i++) seen_until |= until[0] && strcmp(l->events[i]->type, until) == 0;
    while (!l->done && !seen_until) {
        double left = deadline - now_s();
        if (left <= 0) break;
        tl_event *ev;
        tl_error err;
        int rv = tl_next_event(client, id, (int)(left * 1000) + 1, &ev, &err);
        recovered = tl_recovered(client, id) > recovered ? tl_recovered(client, id) : recovered;
        lost = tl_lost(client, id) > lost ? tl_lost(client, id) : lost;
        if (rv != TL_OK) break;
        if (l->n == l->cap) {
            l->cap = l->cap ? 2 * l->cap : 64;
            l->events = realloc(l->events, l->cap * sizeof *l->events);
        }
        l->events[l->n++] = ev;
        if (ev->from_replay) recovered = recovered > 0 ? recovered : 1;
        if (terminal(ev)) l->done = 1;
        if (until[0] && strcmp(ev->type, until) == 0) seen_until = 1;
    }
    printf("{\"ok\":true,\"events\":[");
    int64_t replayed = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (i) putchar(',');
        print_event(l->events[i]);
        replayed += l->events[i]->from_replay;
    }
    printf("],\"recovered\":%lld,\"lost\":%lld}", (long long)replayed, (long long)lost);
}

static void cmd_call(const msgpack_object *message) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, *message);
    char *reply;
    size_t n;
    tl_error err;
    int rv = tl_call(client, sb.data, sb.size, &reply, &n, &err);
    msgpack_sbuffer_destroy(&sb);
    if (rv != TL_OK) {
        reply_error(err.error_class, err.message);
        return;
    }
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    if (msgpack_unpack_next(&up, reply, n, &off) == MSGPACK_UNPACK_SUCCESS) {
        printf("{\"ok\":true,\"reply\":");
        msgpack_to_json(stdout, &up.data);
        printf("}");
    } else reply_error("invalid_response", "the reply is not msgpack");
    msgpack_unpacked_destroy(&up);
    free(reply);
}

/* A control call built from a few string/int fields, its reply printed with extra keys. */
static int simple_call(const char *type, const char *key, const char *value, const char *key2, int64_t value2,
                       msgpack_unpacked *up) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1 + (key != NULL) + (key2 != NULL));
    msgpack_pack_str_with_body(&pk, "type", 4);
    msgpack_pack_str_with_body(&pk, type, strlen(type));
    if (key) {
        msgpack_pack_str_with_body(&pk, key, strlen(key));
        msgpack_pack_str_with_body(&pk, value, strlen(value));
    }
    if (key2) {
        msgpack_pack_str_with_body(&pk, key2, strlen(key2));
        msgpack_pack_int64(&pk, value2);
    }
    char *reply;
    size_t n, off = 0;
    tl_error err;
    int rv = tl_call(client, sb.data, sb.size, &reply, &n, &err);
    msgpack_sbuffer_destroy(&sb);
    msgpack_unpacked_init(up);
    if (rv != TL_OK) {
        reply_error(err.error_class, err.message);
        return -1;
    }
    rv = msgpack_unpack_next(up, reply, n, &off) == MSGPACK_UNPACK_SUCCESS ? 0 : -1;
    if (!up->zone || !msgpack_zone_push_finalizer(up->zone, free, reply)) free(reply); /* objects point into it */
    if (rv) reply_error("invalid_response", "the reply is not msgpack");
    return rv;
}

static void handle(const msgpack_object *cmd) {
    char op[32], id[512], buf[64];
    tl_get_str(cmd, "cmd", op, sizeof op);
    tl_get_str(cmd, "id", id, sizeof id);
    if (strcmp(op, "connect") == 0) return cmd_connect(cmd);
    if (!client) return reply_error("invalid_request", "connect first");
    if (strcmp(op, "submit") == 0) return cmd_submit(cmd);
    if (strcmp(op, "events") == 0) return cmd_events(cmd);
    if (strcmp(op, "call") == 0) return cmd_call(tl_get(cmd, "message"));
    if (strcmp(op, "cancel") == 0) {
        int cancelled = 0;
        tl_error err;
        if (tl_cancel(client, id, &cancelled, &err) != TL_OK) return reply_error(err.error_class, err.message);
        printf("{\"ok\":true,\"cancelled\":%s}", cancelled ? "true" : "false");
        return;
    }
    if (strcmp(op, "replay") == 0) {
        msgpack_unpacked up;
        if (simple_call(TL_T_REPLAY, "request_id", id, "from_seq", tl_get_int(cmd, "from_seq", 0), &up) == 0) {
            const msgpack_object *r = &up.data;
            const msgpack_object *events = tl_get(r, "events");
            tl_get_str(r, "state", buf, sizeof buf);
            printf("{\"ok\":true,\"state\":");
            print_str(buf[0] ? buf : TL_DEFAULT_REPLAY_STATE);
            printf(",\"first_seq\":%lld,\"last_seq\":%lld,\"events\":", (long long)tl_get_int(r, "first_seq", 0),
                   (long long)tl_get_int(r, "last_seq", TL_DEFAULT_REPLAY_LAST_SEQ));
            if (events) msgpack_to_json(stdout, events);
            else printf("[]");
            printf("}");
        }
        msgpack_unpacked_destroy(&up);
        return;
    }
    if (strcmp(op, "status") == 0) {
        msgpack_unpacked up;
        if (simple_call(TL_T_STATUS, NULL, NULL, NULL, 0, &up) == 0) {
            printf("{\"ok\":true,\"client_id\":");
            print_str(tl_client_id(client));
            printf(",\"in_flight\":%lld}", (long long)tl_get_int(&up.data, "in_flight", 0));
        }
        msgpack_unpacked_destroy(&up);
        return;
    }
    if (strcmp(op, "hold") == 0 || strcmp(op, "resume") == 0) {
        /* The library reads events only inside tl_next_event: between commands it holds anyway. */
        printf("{\"ok\":true}");
        return;
    }
    if (strcmp(op, "drop") == 0) {
        const msgpack_object *seqs = tl_get(cmd, "seqs"), *types = tl_get(cmd, "types");
        for (uint32_t i = 0; seqs && seqs->type == MSGPACK_OBJECT_ARRAY && i < seqs->via.array.size; i++)
            tl_test_drop_seq(client, id, (int64_t)seqs->via.array.ptr[i].via.u64);
        for (uint32_t i = 0; types && types->type == MSGPACK_OBJECT_ARRAY && i < types->via.array.size; i++) {
            char type[32];
            const msgpack_object *t = &types->via.array.ptr[i];
            snprintf(type, sizeof type, "%.*s", (int)t->via.str.size, t->via.str.ptr);
            tl_test_drop_type(client, id, type);
        }
        printf("{\"ok\":true}");
        return;
    }
    if (strcmp(op, "close") == 0) {
        tl_close(client);
        client = NULL;
        printf("{\"ok\":true}");
        return;
    }
    reply_error("invalid_request", "unknown command");
}

static int conform(void) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        if (n <= 1) continue;
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        const char *error;
        if (json_to_msgpack(line, &sb, &error) != 0) {
            reply_error("invalid_request", error);
        } else {
            msgpack_unpacked up;
            msgpack_unpacked_init(&up);
            size_t off = 0;
            msgpack_unpack_next(&up, sb.data, sb.size, &off);
            handle(&up.data);
            msgpack_unpacked_destroy(&up);
        }
        msgpack_sbuffer_destroy(&sb);
        putchar('\n');
        fflush(stdout);
    }
    free(line);
    if (client) tl_close(client);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "conform") == 0) return conform();
    if (argc >= 4 && strcmp(argv[1], "chat") == 0) return chat(argv[2], argv[3]);
    fprintf(stderr, "usage: tl chat MODEL PROMPT | tl conform\n");
    return 2;
}
