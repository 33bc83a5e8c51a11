/* json.c: a small recursive-descent JSON reader that writes msgpack, and a writer back. */
#include "json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    const char *error;
    msgpack_packer pk;
    int depth;
} reader;

static void skip_ws(reader *r) {
    while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r') r->p++;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (unsigned)(ch - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static void put_utf8(char **o, unsigned cp) {
    unsigned char *u = (unsigned char *)*o;
    if (cp < 0x80) *u++ = (unsigned char)cp;
    else if (cp < 0x800) { *u++ = (unsigned char)(0xC0 | cp >> 6); *u++ = (unsigned char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        *u++ = (unsigned char)(0xE0 | cp >> 12); *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *u++ = (unsigned char)(0xF0 | cp >> 18); *u++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    *o = (char *)u;
}

static int read_string(reader *r) {
    const char *start = ++r->p; /* after the quote */
    size_t max = 0;
    while (start[max] && start[max] != '"') max += start[max] == '\\' && start[max + 1] ? 2 : 1;
    if (!start[max]) { r->error = "unterminated string"; return -1; }
    char *buf = malloc(max + 1), *o = buf;
    while (*r->p != '"') {
        char ch = *r->p++;
        if (ch != '\\') { *o++ = ch; continue; }
        ch = *r->p++;
        switch (ch) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(r->p, &cp)) { free(buf); r->error = "bad \\u escape"; return -1; }
            r->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && r->p[0] == '\\' && r->p[1] == 'u' && !hex4(r->p + 2, &lo) &&
                lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                r->p += 6;
            }
            put_utf8(&o, cp);
            break;
        }
        default: *o++ = ch;
        }
    }
    r->p++;
    msgpack_pack_str(&r->pk, (size_t)(o - buf));
    msgpack_pack_str_body(&r->pk, buf, (size_t)(o - buf));
    free(buf);
    return 0;
}

static int read_value(reader *r);

/* Containers are packed after counting their members, so values go to a scratch buffer first. */
static int read_container(reader *r, char close) {
    msgpack_sbuffer *outer = (msgpack_sbuffer *)r->pk.data;
    msgpack_sbuffer inner;
    msgpack_sbuffer_init(&inner);
    r->pk.data = &inner;
    uint32_t n = 0;
    r->p++;
    skip_ws(r);
    int rv = 0;
    if (*r->p == close) r->p++;
    else for (;;) {
        skip_ws(r);
        if (close == '}') {
            if (*r->p != '"') { r->error = "expected a key"; rv = -1; break; }
            if ((rv = read_string(r))) break;
            skip_ws(r);
            if (*r->p++ != ':') { r->error = "expected ':'"; rv = -1; break; }
        }
        if ((rv = read_value(r))) break;
        n++;
        skip_ws(r);
        if (*r->p == ',') { r->p++; continue; }
        if (*r->p == close) { r->p++; break; }
        r->error = "expected ',' or the end of a container";
        rv = -1;
        break;
    }
    r->pk.data = outer;
    if (rv == 0) {
        if (close == '}') msgpack_pack_map(&r->pk, n);
        else msgpack_pack_array(&r->pk, n);
        msgpack_sbuffer_write(outer, inner.data, inner.size);
    }
    msgpack_sbuffer_destroy(&inner);
    return rv;
}

static int read_value(reader *r) {
    skip_ws(r);
    if (++r->depth > 200) { r->error = "nested too deeply"; return -1; }
    int rv = 0;
    char ch = *r->p;
    if (ch == '{') rv = read_container(r, '}');
    else if (ch == '[') rv = read_container(r, ']');
    else if (ch == '"') rv = read_string(r);
    else if (!strncmp(r->p, "true", 4)) { msgpack_pack_true(&r->pk); r->p += 4; }
    else if (!strncmp(r->p, "false", 5)) { msgpack_pack_false(&r->pk); r->p += 5; }
    else if (!strncmp(r->p, "null", 4)) { msgpack_pack_nil(&r->pk); r->p += 4; }
    else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        char *end;
        const char *q = r->p + (ch == '-');
        while (*q >= '0' && *q <= '9') q++;
        if (*q == '.' || *q == 'e' || *q == 'E') msgpack_pack_double(&r->pk, strtod(r->p, &end));
        else if (ch == '-') msgpack_pack_int64(&r->pk, strtoll(r->p, &end, 10));
        else msgpack_pack_uint64(&r->pk, strtoull(r->p, &end, 10));
        r->p = end;
    } else { r->error = "unexpected character"; rv = -1; }
    r->depth--;
    return rv;
}

int json_to_msgpack(const char *text, msgpack_sbuffer *out, const char **error) {
    reader r = {.p = text, .error = NULL, .depth = 0};
    msgpack_packer_init(&r.pk, out, msgpack_sbuffer_write);
    int rv = read_value(&r);
    if (rv == 0) {
        skip_ws(&r);
        if (*r.p) { r.error = "trailing characters"; rv = -1; }
    }
    if (error) *error = r.error;
    return rv;
}

static void write_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') { fputc('\\', f); fputc(ch, f); }
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\r') fputs("\\r", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

void msgpack_to_json(FILE *f, const msgpack_object *o) {
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: fputs("null", f); break;
    case MSGPACK_OBJECT_BOOLEAN: fputs(o->via.boolean ? "true" : "false", f); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: fprintf(f, "%llu", (unsigned long long)o->via.u64); break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: fprintf(f, "%lld", (long long)o->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: fprintf(f, "%.17g", o->via.f64); break;
    case MSGPACK_OBJECT_STR: write_string(f, o->via.str.ptr, o->via.str.size); break;
    case MSGPACK_OBJECT_ARRAY:
        fputc('[', f);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i) fputc(',', f);
            msgpack_to_json(f, &o->via.array.ptr[i]);
        }
        fputc(']', f);
        break;
    case MSGPACK_OBJECT_MAP:
        fputc('{', f);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            if (i) fputc(',', f);
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if (k->type == MSGPACK_OBJECT_STR) write_string(f, k->via.str.ptr, k->via.str.size);
            else fputs("\"<key>\"", f);
            fputc(':', f);
            msgpack_to_json(f, &o->via.map.ptr[i].val);
        }
        fputc('}', f);
        break;
    default: fputs("\"<binary>\"", f);
    }
}
