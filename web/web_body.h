/*  web_body.h - the JSON bodies of the web API's POSTs, parsed and
    checked before anything is sent to the controller. Pure functions of
    their input (no server, no store), so that a fuzzer can drive them
    (tests/fuzz/fuzz_webjson.c). Each returns 0, or -1 with a message for
    the 400 answer in err; none changes anything.
*/
#ifndef JZ_WEB_BODY_H
#define JZ_WEB_BODY_H

#include <jansson.h>
#include <stddef.h>

/* The body (len bytes, not NUL-terminated; empty reads as {}) as a JSON
   object: 0 with *out set (caller owns it), or -1 (*out NULL) when it is
   malformed or not an object. */
int web_body_parse(const char *data, size_t len, json_t **out, char *err, size_t errsize);

/* POST /api/trials/ID/set: {"values": {"name": number or string, ...}},
   at least one, each name a legal parameter name. *values borrowed from
   in. */
int web_body_set_values(const json_t *in, const json_t **values, char *err,
                        size_t errsize);

/* POST /api/trials/ID/pause: {"release": true|false} (absent: false). */
int web_body_release(const json_t *in, int *release, char *err, size_t errsize);

/* POST /api/trials/ID/set: {"force": true|false} (absent: false): send a
   value outside the study's space. */
int web_body_force(const json_t *in, int *force, char *err, size_t errsize);

/* POST /api/trials/ID/fork: {"wait": true|false (absent: false),
   "wait_s": seconds, 1 to max_s (absent: def_s)}: answer once the fork is
   decided, waiting up to wait_s. */
int web_body_wait(const json_t *in, int *wait, double *wait_s, double def_s, double max_s,
                  char *err, size_t errsize);

#endif
