/*  msg_testlib.h - what the tests of each peer's message decoding share
    (test_ctl_chaos.c, test_disp.c, test_jz_helper.c): a message of a type
    of common/msg.h with one required field missing or of the wrong JSON
    type, every other field well typed. Each test still says what a good
    value is for its own peer (a trial id it owns, names of nothing there);
    only the building of the message lives here.
*/
#ifndef MSG_TESTLIB_H
#define MSG_TESTLIB_H

#include "common/msg.h"

#include <jansson.h>
#include <string.h>

/* A value of JSON type t where only the type matters: integer 0, the
   number num, the string str, false, [] or {}. New reference. */
static inline json_t *mtl_value_of(msg_jtype t, double num, const char *str)
{
    switch (t) {
    case MSG_T_INT:
        return json_integer(0);
    case MSG_T_NUM:
        return json_real(num);
    case MSG_T_STR:
        return json_string(str);
    case MSG_T_BOOL:
        return json_false();
    case MSG_T_ARRAY:
        return json_array();
    case MSG_T_OBJECT:
        return json_object();
    }
    return json_null();
}

/* A well-typed value for field f (new reference); arg as given to
   mtl_broken. */
typedef json_t *(*mtl_value_fn)(const msg_field *f, void *arg);

/* A message {"type": d->name, ...} with field `bad` of d missing
   (retype 0) or of the wrong JSON type (retype 1: the integer 5 for a
   string field, else the string "five"), and every other field from
   value(field, arg): the required ones, and the optional ones too when
   `optional` is set. Caller owns the result. */
static inline json_t *mtl_broken(const msg_def *d, const msg_field *bad, int retype,
                                 int optional, mtl_value_fn value, void *arg)
{
    json_t *m = json_pack("{s:s}", "type", d->name);
    const char *cur = d->fields;
    msg_field g;
    while (msg_field_next(&cur, &g))
        if ((optional || !g.optional) && strcmp(g.name, bad->name) != 0)
            json_object_set_new(m, g.name, value(&g, arg));
    if (retype)
        json_object_set_new(
            m, bad->name, bad->type == MSG_T_STR ? json_integer(5) : json_string("five"));
    return m;
}

#endif
