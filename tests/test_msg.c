/*  test_msg.c - the message schema (common/msg.h): its table is well
    formed, msg_decode refuses every message type with a required field
    missing or any field of the wrong JSON type (naming the field), and
    docs/PROTOCOL.md names every type, every field and every error code.
    The receivers' refusals (controller, dispatcher, helper) are tested
    with them running: test_ctl_chaos, test_disp, test_jz_helper.
*/
#include "jz_test.h"

#include "common/msg.h"

#include <limits.h>
#include <unistd.h>

/* A value of type t. New reference. */
static json_t *s_value_of(msg_jtype t)
{
    switch (t) {
    case MSG_T_INT:
        return json_integer(3);
    case MSG_T_NUM:
        return json_real(0.5);
    case MSG_T_STR:
        return json_string("x");
    case MSG_T_BOOL:
        return json_true();
    case MSG_T_ARRAY:
        return json_array();
    case MSG_T_OBJECT:
        return json_object();
    }
    return json_null();
}

/* A value of another type than t. New reference. */
static json_t *s_wrong_for(msg_jtype t)
{
    return t == MSG_T_STR ? json_integer(7) : json_string("seven");
}

/* A message of def's type with every field (optional ones when `all`). */
static json_t *s_full(const msg_def *def, int all)
{
    json_t *m = json_pack("{s:s}", "type", def->name);
    const char *cur = def->fields;
    msg_field f;
    while (msg_field_next(&cur, &f))
        if (all || !f.optional)
            json_object_set_new(m, f.name, s_value_of(f.type));
    return m;
}

/* The receivers of def: its own, or all three for a reply. */
static int s_receivers(const msg_def *def, msg_peer out[3])
{
    if (def->to != MSG_ANY) {
        out[0] = def->to;
        return 1;
    }
    out[0] = MSG_TRIAL;
    out[1] = MSG_DISP;
    out[2] = MSG_CLI;
    return 3;
}

TEST(table_is_well_formed)
{
    for (int t = 0; t < MSG_COUNT; t++) {
        const msg_def *d = msg_def_of((msg_type)t);
        CHECK(d->type == (msg_type)t);
        REQUIRE(d->name && d->name[0] && d->fields);
        CHECK(d->from != d->to);
        CHECK(d->auth == MSG_AUTH_NONE || d->to == MSG_CTL);
        /* a name is one row's for each receiver */
        msg_peer to[3];
        for (int k = s_receivers(d, to); k-- > 0;)
            CHECK(msg_find(d->name, to[k]) == d);
        /* field names unique, under the struct's size; the identity the
           controller checks is among the required fields */
        const char *cur = d->fields;
        msg_field f;
        char seen[24][32];
        int n = 0, has_trial = 0, has_token = 0, has_name = 0;
        while (msg_field_next(&cur, &f)) {
            REQUIRE(n < 24);
            for (int i = 0; i < n; i++)
                if (!strcmp(seen[i], f.name))
                    JZT_FAIL("%s: field %s twice", d->name, f.name);
            snprintf(seen[n++], sizeof seen[0], "%s", f.name);
            has_trial |= !f.optional && f.type == MSG_T_INT && !strcmp(f.name, "trial");
            has_token |= !f.optional && f.type == MSG_T_STR && !strcmp(f.name, "token");
            has_name |= !f.optional && f.type == MSG_T_STR && !strcmp(f.name, "name");
        }
        if (d->auth == MSG_AUTH_TRIAL)
            CHECK(has_trial && has_token);
        if (d->auth == MSG_AUTH_DISP)
            CHECK(has_name);
    }
    CHECK(msg_find("read_log", MSG_CTL) == msg_def_of(MSG_READ_LOG));
    CHECK(msg_find("read_log", MSG_DISP) == msg_def_of(MSG_DISP_READ_LOG));
    CHECK(msg_find("start", MSG_CTL) == NULL); /* the controller sends it */
    CHECK(msg_find("hello", MSG_DISP) == NULL);
    CHECK(msg_find(NULL, MSG_CTL) == NULL);
}

TEST(every_type_decodes_and_refuses_bad_fields)
{
    char err[200];
    int refusals = 0;
    for (int t = 0; t < MSG_COUNT; t++) {
        const msg_def *d = msg_def_of((msg_type)t);
        msg_peer to[3];
        int nto = s_receivers(d, to);
        for (int k = 0; k < nto; k++) {
            /* required fields alone, and all fields, decode */
            for (int all = 0; all < 2; all++) {
                json_t *m = s_full(d, all);
                CHECK(msg_decode(m, to[k], err, sizeof err) == d);
                json_decref(m);
            }
            const char *cur = d->fields;
            msg_field f;
            while (msg_field_next(&cur, &f)) {
                char want[64];
                snprintf(want, sizeof want, "field '%s': ", f.name);
                /* missing: refused when required, fine when optional */
                json_t *m = s_full(d, 1);
                json_object_del(m, f.name);
                const msg_def *got = msg_decode(m, to[k], err, sizeof err);
                if (f.optional) {
                    CHECK(got == d);
                } else {
                    CHECK(got == NULL);
                    if (!got && (!strstr(err, want) || !strstr(err, "missing")))
                        JZT_FAIL("%s without %s: \"%s\"", d->name, f.name, err);
                    refusals++;
                }
                /* null: absent for an optional field, wrong for a required */
                json_object_set_new(m, f.name, json_null());
                got = msg_decode(m, to[k], err, sizeof err);
                CHECK(f.optional ? got == d : got == NULL);
                /* of another type: always refused, naming field and type */
                json_object_set_new(m, f.name, s_wrong_for(f.type));
                got = msg_decode(m, to[k], err, sizeof err);
                CHECK(got == NULL);
                if (!got && (!strstr(err, want) || !strstr(err, msg_jtype_name(f.type))))
                    JZT_FAIL("%s with %s retyped: \"%s\"", d->name, f.name, err);
                refusals++;
                json_decref(m);
            }
        }
    }
    CHECK(refusals > 100);
    /* num takes the non-finite strings; int takes no real */
    json_t *m = json_pack("{s:s, s:I, s:s, s:s}", "type", "exited", "trial", 1, "name",
                          "d", "how", "exited");
    json_object_set_new(m, "attempt", json_integer(0));
    json_object_set_new(m, "elapsed_s", json_string("inf"));
    CHECK(msg_decode(m, MSG_CTL, err, sizeof err) == msg_def_of(MSG_EXITED));
    json_object_set_new(m, "attempt", json_real(0.0));
    CHECK(msg_decode(m, MSG_CTL, err, sizeof err) == NULL);
    CHECK_STR(err, "field 'attempt': expected an integer");
    json_decref(m);
    /* an unknown type, and none */
    m = json_pack("{s:s}", "type", "no_such");
    CHECK(msg_decode(m, MSG_CTL, err, sizeof err) == NULL);
    CHECK_STR(err, "unknown message type \"no_such\"");
    json_decref(m);
    m = json_object();
    CHECK(msg_decode(m, MSG_CTL, err, sizeof err) == NULL);
    json_decref(m);
}

/* docs/PROTOCOL.md as one string (caller frees), found from the cwd (the
   runner runs in the repo root) or above the executable; NULL if not. */
static char *s_protocol_md(void)
{
    char path[PATH_MAX + 32] = "docs/PROTOCOL.md";
    FILE *f = fopen(path, "r");
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    for (int up = 0; !f && n > 0 && up < 5; up++) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (!slash)
            break;
        *slash = 0;
        n = (ssize_t)strlen(exe);
        snprintf(path, sizeof path, "%s/docs/PROTOCOL.md", exe);
        f = fopen(path, "r");
    }
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc(1, (size_t)len + 1);
    if (s && fread(s, 1, (size_t)len, f) != (size_t)len) {
        free(s);
        s = NULL;
    }
    fclose(f);
    return s;
}

static int s_mentions(const char *doc, const char *word)
{
    char q[80];
    snprintf(q, sizeof q, "`%s`", word);
    return strstr(doc, q) != NULL;
}

/* The line of docs/PROTOCOL.md's schema table for d (into buf). */
static void s_doc_row(const msg_def *d, char *buf, size_t size)
{
    static const char *const actions[] = {"read", "submit", "steer", "run", "administer"};
    const char *auth = d->auth == MSG_AUTH_TRIAL  ? "`trial` + `token`"
                       : d->auth == MSG_AUTH_DISP ? "registered `name`"
                                                  : "none";
    const char *action = d->action >= 0 && d->action < 5 ? actions[d->action] : "none";
    char fields[400] = "none";
    if (d->fields[0])
        snprintf(fields, sizeof fields, "`%s`", d->fields);
    snprintf(buf, size, "| `%s` | %s → %s | %s | %s | %s |", d->name,
             msg_peer_name(d->from), msg_peer_name(d->to), auth, action, fields);
}

TEST(protocol_md_names_every_type_field_and_error_code)
{
    char *doc = s_protocol_md();
    if (!doc)
        SKIP("docs/PROTOCOL.md not found from the cwd or the executable's folders");
    for (int t = 0; t < MSG_COUNT; t++) {
        const msg_def *d = msg_def_of((msg_type)t);
        if (!s_mentions(doc, d->name))
            JZT_FAIL("docs/PROTOCOL.md does not name message `%s`", d->name);
        char row[600];
        s_doc_row(d, row, sizeof row);
        if (!strstr(doc, row))
            JZT_FAIL("docs/PROTOCOL.md's schema table lacks the row\n%s", row);
        const char *cur = d->fields;
        msg_field f;
        while (msg_field_next(&cur, &f))
            if (!s_mentions(doc, f.name))
                JZT_FAIL("docs/PROTOCOL.md does not name field `%s` of `%s`", f.name,
                         d->name);
    }
    int codes = 0;
    for (const char *const *c = msg_error_codes; *c; c++, codes++)
        if (!s_mentions(doc, *c))
            JZT_FAIL("docs/PROTOCOL.md does not name error code `%s`", *c);
    CHECK(codes >= 20);
    free(doc);
}

int main(void)
{
    RUN(table_is_well_formed);
    RUN(every_type_decodes_and_refuses_bad_fields);
    RUN(protocol_md_names_every_type_field_and_error_code);
    TEST_DONE();
}
