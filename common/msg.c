/*  msg.c - the message schema's table and its one decoder (msg.h).

    One row per message type of docs/PROTOCOL.md, in msg_type order. The
    fields a row lists are the ones every receiver relies on; what the
    receiver checks beyond their types (ranges, names, the parts of an
    instruction that depend on its kind) stays with its handler.
*/
#include "msg.h"

#include "ident.h"
#include "wire.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#define FREE MSG_ACT_FREE

/* The fields every trial message carries: its identity. */
#define TRIAL_ID "trial:int token:str"
/* Optional on every request: a front end's delegation (PROTOCOL.md). */
#define DELEGATION "who?:str as_role?:str"

#define ROW(t, name, from, to, auth, action, fields)                                     \
    [t] = {t, name, from, to, auth, action, fields}

static const msg_def s_table[MSG_COUNT] = {
    /* trial -> controller */
    ROW(MSG_HELLO, "hello", MSG_TRIAL, MSG_CTL, MSG_AUTH_TRIAL, FREE,
        TRIAL_ID " pid?:int"),
    ROW(MSG_METRICS, "metrics", MSG_TRIAL, MSG_CTL, MSG_AUTH_TRIAL, FREE,
        TRIAL_ID " points:array session?:str"),
    ROW(MSG_TRIAL_HEARTBEAT, "trial_heartbeat", MSG_TRIAL, MSG_CTL, MSG_AUTH_TRIAL, FREE,
        TRIAL_ID),
    ROW(MSG_INS_ACK, "ins_ack", MSG_TRIAL, MSG_CTL, MSG_AUTH_TRIAL, FREE,
        TRIAL_ID " id:int applied:bool detail?:str"),
    ROW(MSG_CHECKPOINT_DONE, "checkpoint_done", MSG_TRIAL, MSG_CTL, MSG_AUTH_TRIAL, FREE,
        TRIAL_ID " step:int path:str"),
    /* dispatcher -> controller */
    ROW(MSG_REGISTER, "register", MSG_DISP, MSG_CTL, MSG_AUTH_NONE, IDENT_RUN,
        "name:str slots:int gpus:array running:array"),
    ROW(MSG_DISP_HEARTBEAT, "disp_heartbeat", MSG_DISP, MSG_CTL, MSG_AUTH_DISP, IDENT_RUN,
        "name:str running?:array"),
    ROW(MSG_STARTED, "started", MSG_DISP, MSG_CTL, MSG_AUTH_DISP, IDENT_RUN,
        "name:str trial:int attempt:int tag?:str pid?:int stdout?:str stderr?:str "
        "gpus?:array"),
    ROW(MSG_EXITED, "exited", MSG_DISP, MSG_CTL, MSG_AUTH_DISP, IDENT_RUN,
        "name:str trial:int attempt:int how:str tag?:str code?:int signal?:int "
        "message?:str elapsed_s?:num pid?:int stdout?:str stderr?:str stderr_tail?:str"),
    ROW(MSG_LOG_DATA, "log_data", MSG_DISP, MSG_CTL, MSG_AUTH_DISP, IDENT_RUN,
        "name:str id:int data?:str bytes?:int error?:str"),
    /* CLI -> controller */
    ROW(MSG_SUBMIT, "submit", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_SUBMIT,
        "spec:object " DELEGATION),
    ROW(MSG_STATUS, "status", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_READ,
        "study:str " DELEGATION),
    ROW(MSG_STUDY_STOP, "study_stop", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "study:str " DELEGATION),
    ROW(MSG_STUDY_RESUME, "study_resume", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "study:str " DELEGATION),
    ROW(MSG_STUDY_ENQUEUE, "study_enqueue", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "study:str params:object " DELEGATION),
    ROW(MSG_STUDY_EXTEND, "study_extend", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "study:str trials:int " DELEGATION),
    ROW(MSG_STUDY_DELETE, "study_delete", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "study:str " DELEGATION),
    ROW(MSG_STUDY_COPY, "study_copy", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_SUBMIT,
        "study:str name:str " DELEGATION),
    ROW(MSG_TRIAL_STOP, "trial_stop", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "trial:int " DELEGATION),
    ROW(MSG_TRIAL_PAUSE, "trial_pause", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "trial:int wait?:bool wait_s?:num release?:bool " DELEGATION),
    ROW(MSG_TRIAL_RESUME, "trial_resume", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "trial:int wait?:bool wait_s?:num " DELEGATION),
    ROW(MSG_TRIAL_SET, "trial_set", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "trial:int values:object force?:bool wait?:bool wait_s?:num "
        "guard?:object " DELEGATION),
    ROW(MSG_TRIAL_FORK, "trial_fork", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "trial:int siblings?:array steps?:int keep?:str decide?:bool force?:bool "
        "wait?:bool wait_s?:num " DELEGATION),
    ROW(MSG_TRIAL_ASK, "trial_ask", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "study:str " DELEGATION),
    ROW(MSG_TRIAL_TELL, "trial_tell", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_STEER,
        "trial:int value?:num values?:array state?:str message?:str " DELEGATION),
    ROW(MSG_READ, "read", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_READ,
        "what:str " DELEGATION),
    ROW(MSG_READ_LOG, "read_log", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_READ,
        "trial:int stream:str offset?:int max?:int " DELEGATION),
    ROW(MSG_PING, "ping", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, FREE, ""),
    ROW(MSG_QUEUE, "queue", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_READ, DELEGATION),
    ROW(MSG_QUOTA_SET, "quota_set", MSG_CLI, MSG_CTL, MSG_AUTH_NONE, IDENT_ADMINISTER,
        "user:str slots?:int gpus?:int max_priority?:str " DELEGATION),
    ROW(MSG_DISP_RELEASE, "disp_release", MSG_CLI, MSG_CTL, MSG_AUTH_NONE,
        IDENT_ADMINISTER, "name:str " DELEGATION),
    /* controller -> trial */
    ROW(MSG_INSTRUCTION, "instruction", MSG_CTL, MSG_TRIAL, MSG_AUTH_NONE, FREE,
        "id:int kind:str name?:str path?:str params?:object"),
    /* controller -> dispatcher */
    ROW(MSG_START, "start", MSG_CTL, MSG_DISP, MSG_AUTH_NONE, FREE,
        "trial:int attempt:int study:str argv:array env?:object timeout_s?:num gpus?:int "
        "ranks?:int cwd?:str venv?:str launcher?:str log_dir?:str"),
    ROW(MSG_KILL, "kill", MSG_CTL, MSG_DISP, MSG_AUTH_NONE, FREE,
        "trial:int attempt?:int reason?:str"),
    ROW(MSG_DISOWN, "disown", MSG_CTL, MSG_DISP, MSG_AUTH_NONE, FREE,
        "trial:int attempt:int tag:str reason?:str"),
    ROW(MSG_DISP_READ_LOG, "read_log", MSG_CTL, MSG_DISP, MSG_AUTH_NONE, FREE,
        "id:int trial:int path:str offset:int max:int"),
    /* controller -> whoever asked */
    ROW(MSG_OK, "ok", MSG_CTL, MSG_ANY, MSG_AUTH_NONE, FREE, "req:int"),
    ROW(MSG_ERROR, "error", MSG_CTL, MSG_ANY, MSG_AUTH_NONE, FREE,
        "req:int code:str message:str"),
};

const char *const msg_error_codes[] = {
    "malformed",
    "too_large",
    "unauthorized",
    "forbidden",
    "unknown_study",
    "unknown_trial",
    "unknown_dispatcher",
    "conflict",
    "bad_state",
    "bad_spec",
    "bad_params",
    "limit",
    "bad_value",
    "out_of_space",
    "refused",
    "not_acknowledged",
    "try_again",
    "too_many",
    "unavailable",
    "timeout",
    "internal",
    NULL,
};

const msg_def *msg_def_of(msg_type t)
{
    assert((unsigned)t < MSG_COUNT);
    return &s_table[t];
}

const msg_def *msg_find(const char *name, msg_peer to)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < MSG_COUNT; i++)
        if ((s_table[i].to == to || s_table[i].to == MSG_ANY) &&
            !strcmp(s_table[i].name, name))
            return &s_table[i];
    return NULL;
}

static const struct {
    const char *word, *name;
} s_jtypes[] = {
    [MSG_T_INT] = {"int", "an integer"},   [MSG_T_NUM] = {"num", "a number"},
    [MSG_T_STR] = {"str", "a string"},     [MSG_T_BOOL] = {"bool", "a boolean"},
    [MSG_T_ARRAY] = {"array", "an array"}, [MSG_T_OBJECT] = {"object", "an object"},
};

int msg_field_next(const char **cursor, msg_field *out)
{
    const char *p = *cursor;
    while (*p == ' ')
        p++;
    if (!*p) {
        *cursor = p;
        return 0;
    }
    size_t n = strcspn(p, "?: ");
    assert(n > 0 && n < sizeof out->name);
    memcpy(out->name, p, n);
    out->name[n] = 0;
    p += n;
    out->optional = *p == '?';
    if (out->optional)
        p++;
    assert(*p == ':');
    p++;
    size_t w = strcspn(p, " ");
    out->type = MSG_T_INT;
    int known = 0;
    for (size_t t = 0; t < sizeof s_jtypes / sizeof s_jtypes[0]; t++)
        if (strlen(s_jtypes[t].word) == w && !strncmp(p, s_jtypes[t].word, w)) {
            out->type = (msg_jtype)t;
            known = 1;
        }
    assert(known);
    (void)known;
    *cursor = p + w;
    return 1;
}

int msg_jtype_is(msg_jtype t, const json_t *v)
{
    double x;
    switch (t) {
    case MSG_T_INT:
        return json_is_integer(v);
    case MSG_T_NUM:
        return wire_to_double(v, &x) == 0;
    case MSG_T_STR:
        return json_is_string(v);
    case MSG_T_BOOL:
        return json_is_boolean(v);
    case MSG_T_ARRAY:
        return json_is_array(v);
    case MSG_T_OBJECT:
        return json_is_object(v);
    }
    return 0;
}

const char *msg_jtype_name(msg_jtype t)
{
    return (unsigned)t < sizeof s_jtypes / sizeof s_jtypes[0] ? s_jtypes[t].name
                                                              : "a value";
}

int msg_check(const msg_def *def, const json_t *msg, char *err, size_t errsize)
{
    const char *cur = def->fields;
    msg_field f;
    while (msg_field_next(&cur, &f)) {
        const json_t *v = json_object_get(msg, f.name);
        if (f.optional && (!v || json_is_null(v)))
            continue;
        if (!msg_jtype_is(f.type, v)) {
            snprintf(err, errsize, "field '%s': %sexpected %s", f.name,
                     v ? "" : "missing, ", msg_jtype_name(f.type));
            return -1;
        }
    }
    return 0;
}

const msg_def *msg_decode(const json_t *msg, msg_peer to, char *err, size_t errsize)
{
    const char *type = json_string_value(json_object_get(msg, "type"));
    const msg_def *def = msg_find(type, to);
    if (!def) {
        snprintf(err, errsize, "unknown message type \"%.40s\"", type ? type : "");
        return NULL;
    }
    return msg_check(def, msg, err, errsize) == 0 ? def : NULL;
}

const char *msg_peer_name(msg_peer p)
{
    switch (p) {
    case MSG_CTL:
        return "controller";
    case MSG_TRIAL:
        return "trial";
    case MSG_DISP:
        return "dispatcher";
    case MSG_CLI:
        return "cli";
    case MSG_ANY:
        return "any";
    }
    return "?";
}
