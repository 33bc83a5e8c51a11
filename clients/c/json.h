/* json.h: JSON <-> msgpack for the `tl` program (the library itself speaks msgpack only). */
#ifndef TL_JSON_H
#define TL_JSON_H
#include <stdio.h>

#include <msgpack.h>

/* Parse one JSON value into msgpack (integers stay integers). 0 on success, else -1 and
 * *error points to a static description. */
int json_to_msgpack(const char *text, msgpack_sbuffer *out, const char **error);
/* Write a msgpack object as JSON (binary as a base64-free "<binary>" marker: the protocol has none). */
void msgpack_to_json(FILE *f, const msgpack_object *o);
#endif
